"""``toolwire`` command line.

    toolwire serve --backend http://vllm:8000 --reasoning-parser qwen3 --tool-call-parser qwen25
    toolwire serve --local-model embedded          # managed llama-server on SmolLM2 (built once)
    toolwire parsers                               # list parser names
    toolwire inspect-template PATH [--json]        # what `auto` would pick for a chat template

Every ``serve`` flag is generated from ``app.settings.Settings`` and has a ``TOOLWIRE_*``
environment variable twin; flags win over the environment.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import shutil
import signal
import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import SecretStr, ValidationError
from pydantic.fields import FieldInfo

from app.settings import Settings
from parsers.registry import AUTO_ALIASES, UnknownParserError, reasoning_parser_names, tool_parser_names


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _is_type(annotation: Any, kind: type) -> bool:
    if annotation is kind:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        return any(_is_type(a, kind) for a in typing.get_args(annotation))
    return origin is kind


def _choices(field: FieldInfo) -> list[str] | None:
    """A field's allowed values: its ``Literal``, or the ``choices`` a validator checks against."""
    extra = field.json_schema_extra
    listed = extra.get("choices") if isinstance(extra, dict) else None
    if isinstance(listed, list):
        return [str(choice) for choice in listed]
    for arg in (field.annotation, *typing.get_args(field.annotation)):
        if typing.get_origin(arg) is typing.Literal:
            return list(typing.get_args(arg))
    return None


def add_settings_flags(parser: argparse.ArgumentParser) -> None:
    for name, field in Settings.model_fields.items():
        env = "TOOLWIRE_" + name.upper()
        help_text = f"{field.description or name} [env {env}]"
        if _is_type(field.annotation, bool):
            parser.add_argument(_flag(name), dest=name, action=argparse.BooleanOptionalAction, default=None,
                                help=help_text)
        elif _is_type(field.annotation, list):
            parser.add_argument(_flag(name), dest=name, action="append", default=None, help=help_text)
        else:
            parser.add_argument(_flag(name), dest=name, default=None, choices=_choices(field),
                                help=help_text)


def settings_from_args(args: argparse.Namespace) -> Settings:
    overrides = {name: getattr(args, name) for name in Settings.model_fields if getattr(args, name, None) is not None}
    return Settings(**overrides)


def export_env(settings: Settings) -> None:
    """Make ``settings`` visible to uvicorn worker processes (they read ``TOOLWIRE_*``)."""
    for name, value in settings.model_dump().items():
        if value is None:
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if isinstance(value, list):
            value = json.dumps(value)  # a JSON array: an item may hold a comma
        os.environ["TOOLWIRE_" + name.upper()] = str(value)


def configure_logging(level: str) -> None:
    from app.logs import configure

    configure(level)


def store_problem(settings: Settings) -> str | None:
    """Why the configured response store cannot be opened (a bad ``--state-dir``, a corrupt file, a
    malformed ``--response-store``), or ``None``. A Redis that does not answer yet is not a problem
    at start: requests that need it get 503 until it does."""
    import asyncio

    from app.state import StoreUnavailable, open_stores

    try:
        stores = open_stores(settings)
    except (StoreUnavailable, ValueError) as exc:
        return str(exc)
    asyncio.run(stores.close())
    return None


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
    except ValidationError as exc:
        print(f"toolwire: invalid settings:\n{exc}", file=sys.stderr)
        return 2
    from app.runtime import NoTemplateError, ParserConfigError, validate_parser_names, validate_template_source

    try:
        validate_parser_names(settings)
        validate_template_source(settings)
    except (UnknownParserError, ParserConfigError, NoTemplateError) as exc:
        print(f"toolwire: {exc}", file=sys.stderr)
        return 2
    problem = store_problem(settings)
    if problem is not None:
        print(f"toolwire: {problem}", file=sys.stderr)
        return 2
    if not settings.backend and settings.local_model is None:
        print("toolwire: pass --backend URL (an existing backend) or --local-model PATH.gguf|embedded",
              file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    local = None
    if settings.local_model is not None:
        from app.local.artifacts import ensure_llama_server
        from app.local.llama_server import LlamaServerProcess, find_llama_server, resolve_model

        model = resolve_model(settings.local_model)
        binary = settings.llama_server
        if binary is None:
            try:
                binary = find_llama_server()
            except FileNotFoundError:
                binary = ensure_llama_server()
        local = LlamaServerProcess(find_llama_server(binary), model, settings.local_ctx, settings.local_threads)
        url = local.start()
        settings = settings.model_copy(update={"backend": url, "backend_type": "llamacpp"})

    def stop_on_signal(signum: int, _frame: Any) -> None:
        if local is not None:
            local.stop()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop_on_signal)
    try:
        import uvicorn

        from app.api.server import uvicorn_options

        if settings.workers > 1:
            if settings.response_store and settings.thinking_secret is None:
                from app.runtime import SHARED_STORE_WITHOUT_SECRET

                logging.getLogger("toolwire").warning(SHARED_STORE_WITHOUT_SECRET)
            if settings.thinking_secret is None:  # workers must agree on thinking-block signatures
                settings = settings.model_copy(update={"thinking_secret": SecretStr(secrets.token_urlsafe(32))})
            export_env(settings)
            from app.metrics import shared_folder

            metrics_folder, ours = shared_folder()  # one /metrics for the server, whichever worker answers
            try:
                uvicorn.run("app.api.server:app_from_env", factory=True, host=settings.host, port=settings.port,
                            workers=settings.workers, log_config=None, **uvicorn_options(settings))
            finally:
                if ours:
                    shutil.rmtree(metrics_folder, ignore_errors=True)
        else:
            from app.allocator import tune
            from app.api.server import create_app

            tune()  # the allocator's thresholds for a process that serves (``app.allocator``)
            uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_config=None,
                        **uvicorn_options(settings))
    finally:
        if local is not None:
            local.stop()
    return 0


def cmd_parsers(_: argparse.Namespace) -> int:
    print("reasoning parsers: " + ", ".join(reasoning_parser_names()))
    print("tool-call parsers: " + ", ".join(tool_parser_names()))
    print("auto (from the chat template), also spelled: " + ", ".join(sorted(AUTO_ALIASES)))
    return 0


def cmd_inspect_template(args: argparse.Namespace) -> int:
    from app.templates.autodetect import analyse_template_file

    report = analyse_template_file(Path(args.path))
    print(json.dumps(report.as_dict(), indent=2, ensure_ascii=False) if args.json else report.as_text())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolwire",
        description="OpenAI-compatible /v1/chat/completions over raw-completion backends (vLLM, llama.cpp, "
                    "OpenAI-style completions), with streaming reasoning and tool-call parsing.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the proxy", description="Run the proxy. Every flag can also be "
                           "set with its TOOLWIRE_* environment variable.")
    add_settings_flags(serve)
    serve.set_defaults(func=cmd_serve)
    names = sub.add_parser("parsers", help="list reasoning and tool-call parser names")
    names.set_defaults(func=cmd_parsers)
    inspect = sub.add_parser("inspect-template", help="analyse a chat template and show the parsers auto picks")
    inspect.add_argument("path", help="a .jinja file, tokenizer_config.json or model directory")
    inspect.add_argument("--json", action="store_true", help="print the analysis as JSON")
    inspect.set_defaults(func=cmd_inspect_template)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    logging.basicConfig()
    raise SystemExit(main())
