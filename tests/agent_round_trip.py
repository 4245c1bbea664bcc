"""What the agent-framework tests share: a scripted Qwen3 model that calls ``get_weather`` until the
tool result is in the last user turn and then answers, and the checks on a call-only round trip —
what the framework sent (the assistant turn with ``content: null``, the tool result pointing at its
call) and what reached the backend (the call, then the result, rendered by the Qwen3 template)."""

from __future__ import annotations

import json
from typing import Any

from tests.scripted_backend import Script, ScriptedBackend

CITY = "Reykjavik"
INSTRUCTIONS = "Answer with the tool."
# how the Qwen3 template renders an assistant's call, and then a tool result, in the next prompt
RENDERED_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Reykjavik"}}\n</tool_call><|im_end|>'


def scripted_model(result: str, answer: str, delay: float = 0.005) -> Any:
    """A backend responder: a call (after a little thinking) until ``result`` is in the last user
    turn, then ``answer`` — both streamed in small pieces."""

    def respond(body: dict[str, Any]) -> Script:
        prompt: str = body["prompt"]
        if result in prompt[prompt.rfind("<|im_start|>user"):]:
            return Script(pieces=["<think>\nGot it.\n</think>\n\n", answer[:8], answer[8:]], delay=delay)
        call = json.dumps({"name": "get_weather", "arguments": {"city": CITY}})
        return Script(pieces=["<think>\nAsk the tool.\n</think>\n\n", "<tool_call>\n", call[:17], call[17:],
                              "\n</tool_call>"], delay=delay)

    return respond


def check_call_only_round_trip(sent: list[dict[str, Any]], backend: ScriptedBackend, result: str,
                               streamed: bool) -> None:
    """``sent``: the chat request bodies the framework sent toolwire, in order."""
    assert len(sent) == 2 and all(bool(body.get("stream")) == streamed for body in sent)
    history = sent[1]["messages"]
    assistant = next(m for m in history if m["role"] == "assistant")
    tool_message = next(m for m in history if m["role"] == "tool")
    assert "content" in assistant and assistant["content"] is None, assistant
    assert [c["function"]["name"] for c in assistant["tool_calls"]] == ["get_weather"]
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"city": CITY}
    assert tool_message["tool_call_id"] == assistant["tool_calls"][0]["id"] and tool_message["content"] == result

    rendered_result = f"<|im_start|>user\n<tool_response>\n{result}\n</tool_response><|im_end|>"
    prompts = [b["prompt"] for b in backend.bodies()]
    assert len(prompts) == 2 and prompts[1].startswith(f"<|im_start|>system\n{INSTRUCTIONS}")
    assert RENDERED_CALL not in prompts[0] and result not in prompts[0]
    assert RENDERED_CALL in prompts[1] and rendered_result in prompts[1], prompts[1]
    assert prompts[1].index(RENDERED_CALL) < prompts[1].index(rendered_result)
    assert prompts[1].endswith("<|im_start|>assistant\n")
