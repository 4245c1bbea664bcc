"""The conversations rendered for the template tests (shared by the test and by
``make_hf_renders.py``, which produced the reference output with transformers)."""

import datetime
from typing import Any

PINNED_NOW = datetime.datetime(2026, 1, 15, 10, 30, 0)

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City"}},
                       "required": ["city"]}}},
]


def _tool_conversation(arguments: Any) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "abcDEF123", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": "abcDEF123", "name": "get_weather", "content": "{\"temp\": 21}"},
        {"role": "assistant", "content": "It is 21°C."},
        {"role": "user", "content": "Thanks!"},
    ]


def render_cases(dict_arguments: bool) -> dict[str, dict[str, Any]]:
    """label -> render kwargs. Clients send arguments as JSON text; HF renders take dicts."""
    arguments: Any = {"city": "Paris"} if dict_arguments else '{"city": "Paris"}'
    return {
        "plain": {"messages": [{"role": "user", "content": "Hi"}]},
        "tools": {"messages": _tool_conversation(arguments), "tools": TOOLS},
        "thinking_off": {"messages": [{"role": "user", "content": "Hi"}], "enable_thinking": False},
        "thinking_on": {"messages": [{"role": "user", "content": "Hi"}], "enable_thinking": True},
        "history_reasoning": {"messages": [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4", "reasoning_content": "Add them."},
            {"role": "user", "content": "And 3+3?"},
        ]},
    }


def image_cases() -> dict[str, dict[str, Any]]:
    """label -> render kwargs of conversations with images, as transformers gives them to a template:
    ``content`` a list of ``{"type": "text", "text": …}`` and ``{"type": "image"}`` parts."""
    image = {"type": "image"}
    return {
        "image_after_text": {"messages": [
            {"role": "user", "content": [{"type": "text", "text": "What is in this picture?"}, image]}]},
        "images_first_then_text": {"messages": [
            {"role": "user", "content": [image, image, {"type": "text", "text": "Compare them."}]}]},
        "image_history": {"messages": [
            {"role": "user", "content": [image, {"type": "text", "text": "Describe it."}]},
            {"role": "assistant", "content": "A red square."},
            {"role": "user", "content": [{"type": "text", "text": "And this one?"}, image]}]},
        "image_in_tool_result": {"tools": TOOLS, "messages": [
            {"role": "user", "content": "Show me Paris."},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "abcDEF123", "type": "function", "function": {"name": "get_weather",
                                                                     "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "tool_call_id": "abcDEF123", "name": "get_weather",
             "content": [{"type": "text", "text": "Radar:"}, image]}]},
    }
