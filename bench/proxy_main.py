"""Run toolwire for the proxy benchmark: ``create_app(Settings(...))`` under uvicorn, the way
``toolwire serve`` does (one worker, toolwire's HTTP protocol and limits — ``uvicorn_options`` —, JSON logs at
``warning``), in its own process so its CPU time can be measured alone.

    python -m bench.proxy_main --backend http://127.0.0.1:PORT --port PORT [--profile FILE.prof]
                               [--experiment NAME ...]

``--profile`` runs the whole server under cProfile and writes the stats when the process gets
SIGTERM or SIGINT. ``--experiment`` applies an in-process what-if change from ``bench.experiments``
(the app's files are never modified) so a proposed app-side change can be measured.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "tests" / "data" / "templates" / "Qwen-Qwen3-0.6B.jinja"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tool-call-parser", default="hermes")
    parser.add_argument("--reasoning-parser", default="qwen3")
    parser.add_argument("--profile", default=None)
    parser.add_argument("--experiment", action="append", default=[])
    args = parser.parse_args(argv)

    import uvicorn

    from app.api.server import create_app, uvicorn_options
    from app.logs import configure
    from app.settings import Settings

    for name in args.experiment:
        from bench import experiments

        experiments.apply(name)

    configure("warning")
    settings = Settings(backend=args.backend, backend_type="vllm", chat_template=TEMPLATE,
                        tool_call_parser=args.tool_call_parser, reasoning_parser=args.reasoning_parser or None,
                        host="127.0.0.1", port=args.port, retries=0)
    app = create_app(settings)
    profiler: Any = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()

    def stop(signum: int, _frame: Any) -> None:  # uvicorn re-raises SIGTERM after its graceful shutdown
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    if profiler is not None:
        profiler.enable()
    try:
        options = {**uvicorn_options(settings), "timeout_graceful_shutdown": 1}  # toolwire's protocol and limits
        uvicorn.run(app, host="127.0.0.1", port=args.port, log_config=None, **options)
    finally:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
