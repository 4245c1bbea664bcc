"""One contract test per place toolwire reaches past a library's public API (README "Dependencies"
lists them with the measured reason each is kept). Each fails when the library changes what the
hook relies on: the names, signatures and node layouts it uses, and its behaviour compared with the
library's own path. ``pyproject.toml`` bounds each library to the versions these ran on; the
lowest-versions run (``make test-lowest``) runs them on the lowest versions too.

The behaviour of the jinja hooks over every suite template is compared in
``tests/test_render_resume.py`` (``test_the_fast_render_gives_what_jinja_gives``,
``test_resumed_renders_are_byte_identical``); the head bounds from outside in
``tests/test_head_bounds.py``; the connection set-up in ``tests/app/api/test_edge_speed.py``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import deque
from collections.abc import MutableMapping, MutableSequence, MutableSet
from typing import Any

import jinja2
import pytest
from jinja2 import nodes

from tests.app.api.test_edge_speed import Recorder as EdgeRecorder

# ------------------------------------------------------------------ uvicorn: app/api/http_protocol.py


def test_uvicorn_protocol_has_what_the_subclass_extends() -> None:
    """``BoundedHeadProtocol`` extends these callbacks (calling uvicorn's own), and uses
    ``self.transport``, ``self.loop`` and ``self.logger``."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    expected = {"connection_made": ["self", "transport"], "data_received": ["self", "data"],
                "connection_lost": ["self", "exc"], "on_message_begin": ["self"],
                "on_headers_complete": ["self"], "on_message_complete": ["self"]}
    for name, params in expected.items():
        assert list(inspect.signature(getattr(HttpToolsProtocol, name)).parameters) == params, name
    source = inspect.getsource(HttpToolsProtocol.__init__)
    for attribute in ("self.loop", "self.logger", "self.transport"):
        assert attribute in source, attribute
    # the parser is fed from data_received (the bounds count bytes before it is)
    assert "feed_data(data)" in inspect.getsource(HttpToolsProtocol.data_received)


class Recorder(EdgeRecorder):
    """A transport that records writes, with a peer's and its own address."""

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 1), "sockname": ("127.0.0.1", 2)}.get(name, default)

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


def test_uvicorn_writes_a_response_head_alone_before_its_body() -> None:
    """``HeadWithBody`` holds a write that starts ``HTTP/1.1 `` (uvicorn's head) to join it with
    the next: uvicorn must write a response's head as one write of its own, before the body."""
    import uvicorn
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    from uvicorn.server import ServerState

    from app.api import http_protocol

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def go() -> list[bytes]:
        config = uvicorn.Config(app, log_level="warning", access_log=False)
        config.load()
        protocol = HttpToolsProtocol(config=config, server_state=ServerState(), app_state={})
        transport = Recorder()
        protocol.connection_made(transport)
        protocol.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        for _ in range(20):
            await asyncio.sleep(0)
        return transport.writes

    writes = asyncio.run(go())
    assert writes[0].startswith(http_protocol._HEAD) and writes[0].endswith(b"\r\n\r\n")
    assert b"first" not in writes[0] and any(b"first" in w for w in writes[1:])


# ------------------------------------------------------------------ jinja: app/templates/fastrender.py


def test_jinja_template_has_what_fastrender_calls() -> None:
    """``fastrender.render`` builds the context jinja's ``Template.render`` builds and runs the
    template's root render function: these names and signatures."""
    env = jinja2.Environment()
    template = env.from_string("{{ x }}")
    for name in ("root_render_func", "blocks", "globals", "name", "environment"):
        assert hasattr(template, name), name
    assert callable(template.root_render_func) and isinstance(template.blocks, dict)
    assert list(inspect.signature(env.context_class).parameters)[:5] == [
        "environment", "parent", "name", "blocks", "globals"]
    assert env.concat is not None and callable(env.handle_exception)
    # jinja's render still makes its context the way fastrender does (new_context over the globals)
    assert "new_context" in inspect.getsource(jinja2.Template.render)


def test_fastrender_gives_what_render_gives_with_globals_and_errors() -> None:
    from app.templates.fastrender import render

    env = jinja2.Environment()
    env.globals["g"] = "G"
    template = env.from_string("{{ g }}{{ x }}{% for i in range(2) %}{{ i }}{% endfor %}{{ self_check() }}",
                               globals={"self_check": lambda: "!"})
    assert render(template, {"x": 1}) == template.render(x=1) == "G101!"
    failing = env.from_string("{{ 1 / 0 }}")
    with pytest.raises(ZeroDivisionError):
        render(failing, {})


# ------------------------------------------------------------------ jinja: app/templates/chat_template.py


def test_jinja_mutable_spec_is_what_the_sandbox_filter_covers() -> None:
    """``_Sandbox`` checks ``modifies_known_mutable`` only for names in ``_MUTATORS``, which it asks
    of jinja for one list, dict, set and deque: jinja must know no other kind of mutable."""
    from jinja2.sandbox import modifies_known_mutable

    from app.templates.chat_template import _MUTATORS

    samples = {MutableSet: set(), MutableMapping: {}, MutableSequence: [], deque: deque()}
    spec = getattr(jinja2.sandbox, "_mutable_spec", None)
    if spec is not None:  # the private table behind the public function: the kinds it knows
        assert {kind for kind, _ in spec} == set(samples)
        for kind, names in spec:
            assert {n for n in names if modifies_known_mutable(samples[kind], n)} <= _MUTATORS
    for obj in samples.values():
        assert {n for n in dir(obj) if modifies_known_mutable(obj, n)} <= _MUTATORS
    assert {"append", "update", "pop", "add", "setdefault"} <= _MUTATORS


def test_jinja_namespace_keeps_its_attributes_where_the_sandbox_reads_them() -> None:
    """``_Sandbox.getattr`` and ``resume`` read a namespace's attributes from its private
    ``_Namespace__attrs`` dict (past ``Namespace.__getattribute__``)."""
    from jinja2.utils import Namespace

    from app.templates.chat_template import _environment

    ns = Namespace(flag=True, items=[1])
    assert object.__getattribute__(ns, "_Namespace__attrs") == {"flag": True, "items": [1]}
    ns["flag"] = False  # what {% set ns.flag = … %} does
    assert object.__getattribute__(ns, "_Namespace__attrs")["flag"] is False
    env = _environment()
    general = jinja2.sandbox.SandboxedEnvironment.getattr
    for attribute in ("flag", "items", "missing"):
        fast, slow = env.getattr(ns, attribute), general(env, ns, attribute)
        assert fast == slow or (isinstance(fast, jinja2.Undefined) and isinstance(slow, jinja2.Undefined))
    rendered = env.from_string("{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}"
                               "{% endfor %}{{ ns.n }}").render()
    assert rendered == "3"


# ------------------------------------------------------------------ jinja: app/templates/resume/


def test_jinja_nodes_and_compile_are_what_resume_rewrites_with() -> None:
    """``resume`` builds and rewrites template ASTs (node constructors by field order), compiles
    the tree with ``Environment.compile`` and makes the template with ``Template.from_code`` and
    ``Environment.make_globals``."""
    from jinja2.visitor import NodeTransformer

    layouts = {nodes.Call: ("node", "args", "kwargs", "dyn_args", "dyn_kwargs"), nodes.Name: ("name", "ctx"),
               nodes.Getattr: ("node", "attr", "ctx"), nodes.Getitem: ("node", "arg", "ctx"),
               nodes.Slice: ("start", "stop", "step"), nodes.Output: ("nodes",), nodes.List: ("items",),
               nodes.For: ("target", "iter", "body", "else_", "test", "recursive"),
               nodes.CondExpr: ("test", "expr1", "expr2"), nodes.Compare: ("expr", "ops"),
               nodes.Operand: ("op", "expr"), nodes.And: ("left", "right"), nodes.Add: ("left", "right"),
               nodes.Sub: ("left", "right"), nodes.Const: ("value",), nodes.Macro: ("name", "args", "defaults", "body"),
               nodes.Assign: ("target", "node"), nodes.Filter: ("node", "name", "args", "kwargs", "dyn_args",
                                                                  "dyn_kwargs")}
    for node, fields in layouts.items():
        assert node.fields == fields, node.__name__
    assert callable(nodes.Node.set_environment) and callable(nodes.Node.set_lineno)
    assert callable(NodeTransformer.visit) and callable(NodeTransformer.generic_visit)
    assert list(inspect.signature(jinja2.Template.from_code).parameters) == [
        "environment", "code", "globals", "uptodate"]
    env = jinja2.Environment()
    ast = env.parse("{% for m in messages %}[{{ m }}]{% endfor %}")
    loop = next(ast.find_all(nodes.For))
    loop.iter = nodes.Getitem(nodes.Name("messages", "load"), nodes.Slice(nodes.Const(1), None, None), "load")
    loop.set_environment(env)
    template = env.template_class.from_code(env, env.compile(ast), env.make_globals(None), None)
    assert template.render(messages=["a", "b", "c"]) == "[b][c]"
