"""Property-based tests (hypothesis): random request bodies at the app, random model outputs at
every detector. Nothing escapes as an exception, and the output is always a valid OpenAI object."""

from __future__ import annotations

import json
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parsers import build_response_parser, fold
from parsers.registry import REASONING_PARSERS, TOOL_PARSERS, reasoning_detector_class, tool_detector_class
from tests.conftest import QWEN3_TEMPLATE, sse_events
from tests.harness import check_stream_invariants, comparable, split_random
from tests.scripted_backend import Script

# ------------------------------------------------------------------------------ model outputs

JSON_BITS = ['{', '}', '[', ']', '"', ':', ',', '\\', '\\"', '"name"', '"arguments"', '"parameters"', '{"a": 1}',
             'null', 'true', '12', '-3.5e2', ' ', '\n', '\t', 'é', '🌸', '<', '>', '/', '=', 'get_time', 'x', '(',
             ')', "'", 'call:', '<|"|>', '>>>', ';', '```json']


def fragments(markers: tuple[str, ...]) -> st.SearchStrategy[str]:
    pieces = list(markers) + JSON_BITS
    return st.lists(st.one_of(st.sampled_from(pieces), st.text(max_size=6)), max_size=40).map("".join)


TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {
    "a": {"type": "integer"}, "s": {"type": "string"}}}}} for n in ("get_time", "x", "f")]


@pytest.mark.parametrize("name", sorted(TOOL_PARSERS))
def test_random_outputs_never_break_a_tool_detector(name: str) -> None:
    detector = tool_detector_class(name)
    markers = tuple(detector.markers) + tuple(detector.start_markers)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(text=fragments(markers), seed=st.integers(0, 1000), truncated=st.booleans())
    def check(text: str, seed: int, truncated: bool) -> None:
        runs = []
        for chunks in ([text], list(text), split_random(text, seed)):
            parser = build_response_parser(TOOLS, name, None)
            events = []
            for chunk in chunks:
                events += parser.feed(chunk)
            events += parser.end(truncated)
            assert not parser.failed, f"{name} raised on {text!r}"
            problems = [p for p in check_stream_invariants(events, ()) if "leaked" not in p]
            assert not problems, (problems, text)
            runs.append(comparable(fold(events)))
        assert runs[0] == runs[1] == runs[2], text
        for call_name, arguments, _ in runs[0]["calls"]:
            assert isinstance(json.loads(arguments), dict) and call_name

    check()


@pytest.mark.parametrize("name", sorted(REASONING_PARSERS))
def test_random_outputs_never_break_a_reasoning_detector(name: str) -> None:
    markers = tuple(reasoning_detector_class(name).markers())

    @settings(max_examples=40, deadline=None)
    @given(text=fragments(markers), seed=st.integers(0, 1000))
    def check(text: str, seed: int) -> None:
        runs = []
        for chunks in ([text], list(text), split_random(text, seed)):
            parser = build_response_parser(None, None, name)
            events = []
            for chunk in chunks:
                events += parser.feed(chunk)
            events += parser.end()
            assert not parser.failed
            runs.append(comparable(fold(events)))
        assert runs[0] == runs[1] == runs[2], text

    check()


# ------------------------------------------------------------------------------ request bodies

VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=False),
              st.text(max_size=20)),
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.text(max_size=10), children, max_size=4)),
    max_leaves=12,
)
KEYS = st.sampled_from(["messages", "tools", "tool_choice", "stream", "max_tokens", "temperature", "stop", "n",
                        "response_format", "parallel_tool_calls", "stream_options", "top_p", "seed", "model",
                        "chat_template_kwargs", "hold_tool_calls", "reasoning_effort", "junk"])
MESSAGE = st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "tool", "wizard", 3]),
                                 "content": st.one_of(st.text(max_size=30), VALUES)})
BODIES = st.one_of(
    VALUES,
    st.dictionaries(KEYS, VALUES, max_size=6),
    st.fixed_dictionaries({"messages": st.lists(MESSAGE, max_size=3)},
                          optional={"tools": st.lists(VALUES, max_size=2), "tool_choice": VALUES,
                                    "stream": st.booleans(), "max_tokens": VALUES}),
)


@pytest.fixture(scope="module")
def app_url() -> Any:
    from tests.proxy_server import ProxyServer
    from tests.scripted_backend import ScriptedBackend

    backend = ScriptedBackend("vllm").start()
    backend.default = Script(pieces=['<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'])
    proxy = ProxyServer(backend=backend.url, chat_template=str(QWEN3_TEMPLATE), tool_call_parser="qwen25").start()
    yield proxy.url
    proxy.stop()
    backend.stop()


def test_random_request_bodies_get_openai_answers(app_url: str) -> None:
    client = httpx.Client(timeout=30)

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(body=BODIES)
    def check(body: Any) -> None:
        response = client.post(app_url + "/v1/chat/completions", content=json.dumps(body),
                               headers={"content-type": "application/json"})
        assert response.status_code < 500, (response.status_code, response.text, body)
        if response.status_code >= 400:
            error = response.json()["error"]
            assert isinstance(error["message"], str) and error["message"] and "Traceback" not in error["message"]
            assert error["type"] in ("invalid_request_error", "rate_limit_error")
        elif response.headers["content-type"].startswith("text/event-stream"):
            lines = [line for line in response.text.splitlines() if line.startswith("data: ")]
            assert lines[-1] == "data: [DONE]"
            for line in lines[:-1]:
                assert json.loads(line[6:])["object"] == "chat.completion.chunk"
        else:
            assert response.json()["object"] == "chat.completion"

    check()
    client.close()


# ------------------------------------------------------------------ the prefix service: every face, every shape

class Twin:
    """Two servers, the prefix service on and off, each with its own scripted backend: every
    request goes to both, and every prompt their backends get must be byte for byte the same."""

    def __init__(self, backend_factory: Any, proxy_factory: Any) -> None:
        answer = ["<think>\nLook at it.\n</think>\n\n", '<tool_call>\n{"name": "bash", "arguments": ',
                  '{"cmd": "ls", "n": 3, "all": true}}\n</tool_call>']
        self.backends, self.proxies = [], []
        for cache in (64 << 20, 0):
            backend = backend_factory("vllm", model="Qwen/Qwen3-8B")
            backend.default = Script(pieces=answer)
            self.backends.append(backend)
            self.proxies.append(proxy_factory(backend=backend.url, chat_template=str(QWEN3_TEMPLATE),
                                              reasoning_parser="qwen3", tool_call_parser="qwen25",
                                              prefix_cache_bytes=cache, api_key=["alice", "bob"],
                                              thinking_secret="twin-secret-0123456789abcdef"))
        self.client = httpx.Client(timeout=60)

    def post(self, path: str, bodies: tuple[Any, Any], key: str) -> tuple[httpx.Response, httpx.Response]:
        on, off = (self.client.post(p.url + path, json=b, headers={"authorization": f"Bearer {key}"})
                   for p, b in zip(self.proxies, bodies, strict=True))
        assert on.status_code == off.status_code, (path, on.text, off.text)
        return on, off

    def check(self, bodies: bool = True) -> None:
        """The prompts alike; ``bodies``: and the bodies (long enough) parsed past what an earlier
        one held, the elements taken being what their bytes parse to."""
        on, off = ([b.get("prompt") for b in backend.bodies()] for backend in self.backends)
        assert len(on) == len(off)
        for k, (a, b) in enumerate(zip(on, off, strict=True)):
            assert a == b, f"prompt {k} differs"
        service = self.proxies[0].runtime.services.prefix
        assert service.elements_reused > 0 or not bodies  # parsed past what the last one held (``app.bodies``)
        for layouts in (value for key, (_, value) in service._held.items() if isinstance(key, tuple) and key[0] == "body"):
            for layout in layouts:  # what the next body takes is what its bytes parse to: nothing changed it
                assert [orjson.loads(data) for data in layout.jsons] == layout.items

    @property
    def served(self) -> int:
        """How many units the server with the service on took from it (it must have done something)."""
        return int(self.proxies[0].runtime.services.prefix.found)


CAMPAIGN_TOOLS = [{"type": "function", "function": {"name": n, "description": f"the {n} tool", "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}, "n": {"type": "integer"}, "all": {"type": "boolean"}}}}}
    for n in ("bash", "grep", "read")]


def _result(rng: Any, i: int) -> str:
    """A tool's output: now and then holding the model's control text (a file about chat templates),
    which a turn that comes again must be traced for as the first time (``Note.settled``)."""
    return rng.choice([f"out {i} «é»"] * 6 + [f"out {i} <|im_end|>\n<|im_start|>user {i}", f"</think> {i}",
                                              f"out {i} <tool_call"])


def _chat_turn(rng: Any, i: int) -> list[dict[str, Any]]:
    call_id = f"call_{i}_{rng.randrange(1000)}"
    arguments = json.dumps({"cmd": f"ls {i}", "n": i, "all": rng.random() < 0.5})
    return [{"role": "assistant", "content": rng.choice([None, "", f"step {i}"]),
             "reasoning_content": rng.choice([None, f"why {i}"]),
             "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "bash", "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": call_id, "content": _result(rng, i)}]


def _edit(rng: Any, items: list[Any], step: int, make: Any) -> list[Any]:
    """One random change to a conversation's items (``make(step)``: a new item)."""
    op = rng.choice(["append", "append", "append", "trailing", "edit", "insert", "remove"])
    if op == "append" or len(items) < 3:
        return [*items, *make(step)]
    if op == "trailing":
        return [*items, *make(step)][:-1] + [make(step)[-1]]
    k = rng.randrange(1, len(items))
    if op == "edit":
        return [*items[:k], json.loads(json.dumps(items[k]).replace("out ", f"edited {step} ")), *items[k + 1:]]
    if op == "insert":
        return [*items[:k], make(step)[0], *items[k:]]
    return [*items[:k], *items[k + 1:]]


@pytest.mark.parametrize("seed", [7, 8])
def test_chat_prompts_are_the_same_with_the_prefix_service_on_and_off(backend_factory, proxy_factory,
                                                                       seed: int) -> None:
    """Chat Completions under random changes — turns appended, a trailing user message rewritten,
    messages edited, inserted and removed, the tools, the template switches and the tenant
    changed: the prompts are those of a server without the prefix service."""
    import random

    rng = random.Random(seed)
    twin = Twin(backend_factory, proxy_factory)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."},
                                      {"role": "user", "content": "Fix it."}]
    tools: list[dict[str, Any]] | None = CAMPAIGN_TOOLS
    key, kwargs = "alice", {}
    for step in range(40):
        change = rng.random()
        if change < 0.1:
            tools = rng.choice([None, CAMPAIGN_TOOLS, CAMPAIGN_TOOLS[:2]])
        elif change < 0.15:
            kwargs = rng.choice([{}, {"enable_thinking": False}])
        elif change < 0.2:
            key = rng.choice(["alice", "bob"])
        else:
            messages = _edit(rng, messages, step, lambda i: [*_chat_turn(rng, i), {"role": "user", "content": f"r {i}"}])
        body = {"model": "m", "messages": messages, "stream": rng.random() < 0.5, "max_tokens": 32,
                **({"tools": tools} if tools else {}), **({"chat_template_kwargs": kwargs} if kwargs else {})}
        twin.post("/v1/chat/completions", (body, body), key)
    twin.check()
    assert twin.served > 5


def _anthropic_turn(rng: Any, i: int) -> list[dict[str, Any]]:
    tool_id = f"toolu_{i}_{rng.randrange(1000)}"
    return [{"role": "assistant", "content": [{"type": "text", "text": f"step {i}"}, {
        "type": "tool_use", "id": tool_id, "name": "bash", "input": {"cmd": f"ls {i}", "n": i, "all": True}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": _result(rng, i)},
                                         {"type": "text", "text": f"<system-reminder>{i}</system-reminder>"}]}]


@pytest.mark.parametrize("seed", [3])
def test_messages_prompts_are_the_same_with_the_prefix_service_on_and_off(backend_factory, proxy_factory,
                                                                           seed: int) -> None:
    """The Messages API in Claude Code's shape (system blocks with ``cache_control``, the newest
    block marked), under the same random changes."""
    import random

    rng = random.Random(seed)
    twin = Twin(backend_factory, proxy_factory)
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "Fix it."}]}]
    tools = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in CAMPAIGN_TOOLS]
    for step in range(30):
        messages = _edit(rng, messages, step, lambda i: _anthropic_turn(rng, i))
        while messages[-1]["role"] != "user":
            messages = messages[:-1]
        marked = json.loads(json.dumps(messages))
        last = marked[-1]["content"]
        if isinstance(last, list) and last:
            last[-1]["cache_control"] = {"type": "ephemeral"}
        body = {"model": "m", "max_tokens": 64, "stream": rng.random() < 0.5, "tools": tools, "messages": marked,
                "system": [{"type": "text", "text": f"x-anthropic-billing-header: cc_version={step};"},
                           {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}]}
        twin.post("/v1/messages", (body, body), rng.choice(["alice", "alice", "bob"]))
    twin.check()
    assert twin.served > 5


def _output(response: httpx.Response) -> list[dict[str, Any]]:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        done = [e for e in sse_events(response) if isinstance(e, dict) and e.get("type") == "response.completed"]
        return list(done[-1]["response"]["output"]) if done else []
    return list(response.json().get("output") or [])


def test_responses_prompts_are_the_same_with_the_prefix_service_on_and_off(backend_factory, proxy_factory) -> None:
    """The Responses API: the whole input every turn (Codex: ``store: false``, the server's sealed
    reasoning and calls handed back), chains of ``previous_response_id`` (continued, branched from
    an earlier response, one deleted in the middle), and a conversation."""
    import random

    rng = random.Random(11)
    twin = Twin(backend_factory, proxy_factory)
    head = {"model": "m", "tools": [{"type": "function", **t["function"]} for t in CAMPAIGN_TOOLS],
            "max_output_tokens": 64}
    # Codex's shape, with edits: the same items to both servers (the seals are the same secret's)
    items: list[dict[str, Any]] = [{"type": "message", "role": "developer", "content": "Sandbox."},
                                   {"type": "message", "role": "user", "content": "Fix it."}]
    for step in range(16):
        body = {**head, "store": False, "input": items, "instructions": rng.choice(["Be brief.", "Be brief!"]),
                "include": ["reasoning.encrypted_content"], "stream": rng.random() < 0.5}
        on, _ = twin.post("/v1/responses", (body, body), "alice")
        assert on.status_code == 200, on.text
        made = _output(on)
        calls = [i["call_id"] for i in made if i.get("type") == "function_call"]
        new = [*made, *({"type": "function_call_output", "call_id": c, "output": _result(rng, step)} for c in calls)]
        items = _edit(rng, items, step, lambda _i, new=new: new)
    # the Agents SDK's shape: chains, a branch, a deleted link
    ids: list[tuple[str, str]] = []
    for step in range(14):
        previous = ids[-1] if ids and rng.random() < 0.8 else rng.choice(ids) if ids else None
        text = _result(rng, step)
        bodies = tuple({**head, "input": [{"type": "message", "role": "user", "content": text}],
                        "stream": False, **({"previous_response_id": p} if p else {})}
                       for p in (previous or (None, None)))
        on, off = twin.post("/v1/responses", bodies, "alice")  # type: ignore[arg-type]
        if on.status_code == 200:
            ids.append((on.json()["id"], off.json()["id"]))
        if step == 8 and len(ids) > 3:  # a response in the middle of the chain is deleted
            gone = ids[-3]
            for proxy, rid in zip(twin.proxies, gone, strict=True):
                assert twin.client.delete(proxy.url + f"/v1/responses/{rid}",
                                          headers={"authorization": "Bearer alice"}).status_code == 200
    # a conversation
    made = [twin.client.post(p.url + "/v1/conversations", json={"items": []},
                             headers={"authorization": "Bearer bob"}).json()["id"] for p in twin.proxies]
    bob = {"authorization": "Bearer bob"}
    for step in range(12):
        bodies = tuple({**head, "conversation": c, "input": f"turn {step}", "stream": step % 2 == 0} for c in made)
        twin.post("/v1/responses", bodies, "bob")  # type: ignore[arg-type]
        for proxy, c in zip(twin.proxies, made, strict=True):  # the conversation changed between turns
            if step == 4:  # an item added through the Conversations API (read as new)
                added = twin.client.post(proxy.url + f"/v1/conversations/{c}/items", headers=bob, json={"items": [
                    {"type": "message", "role": "user", "content": "a note added to the conversation"}]})
                assert added.status_code == 200, added.text
            if step == 7:  # an item in the middle deleted (everything is read again)
                listed = twin.client.get(proxy.url + f"/v1/conversations/{c}/items?order=asc", headers=bob).json()
                gone = listed["data"][2]["id"]
                assert twin.client.delete(proxy.url + f"/v1/conversations/{c}/items/{gone}",
                                          headers=bob).status_code == 200
    twin.check()
    assert twin.served > 10


def test_one_off_conversations_are_neither_kept_nor_found_on_any_face(backend_factory, proxy_factory) -> None:
    """A miss is never dearer than no cache (``app.prefix``): distinct conversations sharing only a
    system prompt — a batch of one-off requests — leave no entry on any face (only their anchors'
    sightings); the same conversation sent again is kept, and a third time it is found. The
    prompts are those of a server without the service throughout."""
    twin = Twin(backend_factory, proxy_factory)
    service = twin.proxies[0].runtime.services.prefix
    tools = [{"type": "function", "function": t["function"]} for t in CAMPAIGN_TOOLS]

    def chat(i: int) -> tuple[str, dict[str, Any]]:
        turn = [*_chat_turn(__import__("random").Random(i), i), {"role": "user", "content": f"and then {i}?"}]
        return "/v1/chat/completions", {"model": "m", "max_tokens": 32, "tools": tools, "messages": [
            {"role": "system", "content": "You are an agent."}, {"role": "user", "content": f"task {i}"}, *turn]}

    def messages(i: int) -> tuple[str, dict[str, Any]]:
        rng = __import__("random").Random(i)
        return "/v1/messages", {"model": "m", "max_tokens": 32, "system": "You are Claude Code.", "messages": [
            {"role": "user", "content": f"task {i}"}, *_anthropic_turn(rng, i), *_anthropic_turn(rng, i + 1000)]}

    def responses(i: int) -> tuple[str, dict[str, Any]]:
        return "/v1/responses", {"model": "m", "max_output_tokens": 32, "store": False, "instructions": "Be brief.",
                                 "input": [{"type": "message", "role": "user", "content": f"task {i}"},
                                           {"type": "function_call", "call_id": f"c{i}", "name": "bash",
                                            "arguments": json.dumps({"cmd": f"ls {i}"})},
                                           {"type": "function_call_output", "call_id": f"c{i}", "output": f"out {i}"},
                                           {"type": "message", "role": "user", "content": f"and then {i}?"}]}

    def stored(i: int) -> tuple[str, dict[str, Any]]:  # (``store`` left to its default: true)
        path, body = responses(i)
        del body["store"]
        return path, body

    for face in (chat, messages, responses, stored):
        for i in range(6):
            path, body = face(i)
            twin.post(path, (body, body), "alice")
        assert not service._anchored and service.found == 0, face.__name__  # nothing kept, nothing taken
        assert not service._keyed, face.__name__  # (nor a stored response's chain)
        path, body = face(5)  # the last one again: seen before, so kept
        twin.post(path, (body, body), "alice")
        assert service._anchored and service.found == 0, face.__name__
        twin.post(path, (body, body), "alice")
        assert service.found == 1, face.__name__
        service.clear()
        service.found = 0
    # a continuation of a one-off stored response reads its one link, and is kept for the next
    follow = [{"type": "message", "role": "user", "content": "go on"}]
    path, body = stored(7)
    ids = [r.json()["id"] for r in twin.post(path, (body, body), "alice")]
    assert not service._keyed
    for _ in range(2):
        bodies = tuple({"model": "m", "max_output_tokens": 32, "input": follow, "previous_response_id": i} for i in ids)
        ids = [r.json()["id"] for r in twin.post(path, bodies, "alice")]  # type: ignore[arg-type]
        assert service._keyed
    assert service.found == 1  # the second continuation took the first's chain
    twin.check(bodies=False)  # (short bodies: parsed whole)
    metrics = twin.client.get(twin.proxies[0].url + "/metrics", headers={"authorization": "Bearer alice"}).text
    for outcome in ("found", "kept", "first_sight", "chain_found", "chain_missed"):
        assert f'toolwire_prefix_lookups_total{{outcome="{outcome}"}}' in metrics, outcome
    assert "toolwire_prefix_bytes " in metrics


def test_a_long_agent_loop_with_file_reads_continues_on_the_loop_with_the_prompts_of_no_service(
        backend_factory, proxy_factory) -> None:
    """The ``openai`` client runs an agent loop whose conversation passes 256K characters (a 16 KB
    file read per turn): each call-only answer handed back as it came (``content: null``), each
    tool result, then the final answer. Every prompt is the one a server without the prefix
    service gets; past the first turns the server with the service continued its renders on the
    loop — none went to its prepare workers — while the one without sent them to a worker."""
    import openai

    twin = Twin(backend_factory, proxy_factory)
    clients = [openai.OpenAI(base_url=p.url + "/v1", api_key="alice") for p in twin.proxies]
    jobs = [0, 0]  # requests each server prepared in a worker
    for k, proxy in enumerate(twin.proxies):
        pool = proxy.runtime.services.pool
        run = pool.run

        async def counted(*args: Any, k: int = k, run: Any = run) -> Any:
            jobs[k] += 1
            return await run(*args)

        pool.run = counted  # type: ignore[method-assign]
    conversations: list[list[Any]] = [[{"role": "system", "content": "You are an agent."},
                                       {"role": "user", "content": "Read the repository and fix it."}]
                                      for _ in clients]
    for turn in range(24):
        if turn == 23:
            for backend in twin.backends:
                backend.default = Script(pieces=["<think>\nDone.\n</think>\n\n", "Fixed: the bug was in module 3."])
        for client, messages in zip(clients, conversations, strict=True):
            stream = client.chat.completions.create(model="m", messages=messages, tools=CAMPAIGN_TOOLS, stream=True)
            calls: dict[int, dict[str, Any]] = {}
            text = ""
            for chunk in stream:
                delta = chunk.choices[0].delta if chunk.choices else None
                text += (delta.content or "") if delta is not None else ""
                for call in (delta.tool_calls or []) if delta is not None else []:
                    got = calls.setdefault(call.index, {"id": call.id, "name": "", "arguments": ""})
                    got["name"] += call.function.name or "" if call.function else ""
                    got["arguments"] += call.function.arguments or "" if call.function else ""
            if turn == 23:
                assert not calls and text == "Fixed: the bug was in module 3."
                continue
            assert len(calls) == 1 and json.loads(calls[0]["arguments"]) == {"cmd": "ls", "n": 3, "all": True}
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": calls[0]["id"], "type": "function",
                 "function": {"name": calls[0]["name"], "arguments": calls[0]["arguments"]}}]})
            messages.append({"role": "tool", "tool_call_id": calls[0]["id"],
                             "content": f"# module {turn}\n" + f"line of module {turn} «é»\n" * 700})
    assert len(json.dumps(conversations[0])) > 300_000
    twin.check()
    assert jobs[0] == 0 and jobs[1] >= 20, jobs


def test_a_conversations_decoding_kept_gives_the_prompts_of_no_service(backend_factory, proxy_factory) -> None:
    """A stored conversation carried by an agent's tool loop, its decoding kept from turn to turn
    (``keep_conversation``): inputs that join the conversation's items where a run of assistant
    items is open (an assistant message sent as input, an input ending with one), items the
    conversation already holds (not added again), items added and deleted through the
    Conversations API between turns — the prompts are those of a server without the service, and
    the kept decoding was used."""
    import random

    rng = random.Random(5)
    twin = Twin(backend_factory, proxy_factory)
    service = twin.proxies[0].runtime.services.prefix
    used: list[bool] = []
    recall = service.recall_conversation

    def counted(*args: Any) -> Any:
        found = recall(*args)
        used.append(found is not None)
        return found

    service.recall_conversation = counted  # type: ignore[method-assign]
    head = {"model": "m", "tools": [{"type": "function", **t["function"]} for t in CAMPAIGN_TOOLS],
            "max_output_tokens": 64, "instructions": "Work."}
    bob = {"authorization": "Bearer bob"}
    made = [twin.client.post(p.url + "/v1/conversations", headers=bob, json={"items": [
        {"type": "message", "role": "user", "content": "Fix the build."}]}).json()["id"] for p in twin.proxies]
    outputs: list[list[dict[str, Any]]] = [[], []]
    first = [twin.client.get(p.url + f"/v1/conversations/{c}/items?order=asc&limit=1", headers=bob).json()["data"][0]
             for p, c in zip(twin.proxies, made, strict=True)]
    for step in range(24):
        kind = rng.choice(["results", "results", "results", "user", "assistant first", "assistant last", "again"])
        bodies = []
        for side in (0, 1):
            calls = [i for i in outputs[side] if i.get("type") == "function_call"]
            results = [{"type": "function_call_output", "call_id": c["call_id"], "output": _result(random.Random(step), step)}
                       for c in calls] or [{"type": "message", "role": "user", "content": f"go on {step}"}]
            note = {"type": "message", "role": "assistant", "content": f"noted {step}"}
            given = {"results": results, "user": [{"type": "message", "role": "user", "content": f"and {step}"}],
                     "assistant first": [note, *results], "assistant last": [*results, note],
                     "again": [first[side], *results]}[kind]  # (an item it holds: not added again)
            bodies.append({**head, "conversation": made[side], "input": given, "stream": step % 3 == 0})
        if rng.random() < 0.3:  # an answer in words alone: a run of assistant items the next input may join
            for backend in twin.backends:
                backend.script(Script(pieces=[f"Done with {step}."]))
        on, off = twin.post("/v1/responses", tuple(bodies), "bob")  # type: ignore[arg-type]
        assert on.status_code == 200, on.text
        outputs = [_output(on), _output(off)]
        if step in (5, 9, 12, 15, 18, 21):
            for proxy, c in zip(twin.proxies, made, strict=True):
                if step != 15:
                    assert twin.client.post(proxy.url + f"/v1/conversations/{c}/items", headers=bob, json={"items": [
                        {"type": "message", "role": "user", "content": "a note"}]}).status_code == 200
                else:
                    listed = twin.client.get(proxy.url + f"/v1/conversations/{c}/items?order=asc", headers=bob).json()
                    assert twin.client.delete(proxy.url + f"/v1/conversations/{c}/items/{listed['data'][1]['id']}",
                                              headers=bob).status_code == 200
    twin.check(bodies=False)
    assert sum(used) >= 8 and not all(used), used  # kept and used — and not where it was not the conversation
