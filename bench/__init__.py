"""toolwire's benchmarks (``make bench`` = ``python -m bench.run``). Not part of the package.

Sections (``bench.run.SECTIONS``; each is a module with ``TITLE`` and ``run(ctx) -> Section``):

* ``bench.parsers`` — parser µs per chunk and growth 64 KB / 16 KB, per detector family;
* ``bench.sglang``  — the same chunk sequences through SGLang 0.5.23's parsers, in a venv the bench
  creates (``bench/out/sglang-venv``), alternating with toolwire in one process;
* ``bench.proxy``   — added time to first token, tokens/s at 1/16/64 streams, CPU per 1 000 tokens,
  through toolwire vs straight from a scripted backend; plus app-side what-ifs (``bench.experiments``).

To add a benchmark (issue 8's 500-stream load test: ``bench/load.py``), write such a module and
append its name to ``SECTIONS``; its figures (with targets) land in the report and
``bench/out/summary.json``. Helpers: ``bench.backend`` (fast scripted vLLM backend, optional pacing),
``bench.proxy`` (process management, raw asyncio SSE client, ``load()``), ``bench.report``
(``Figure``, ``Section``, targets, tables).

Tools outside ``make bench``: ``python -m bench.profile …`` (cProfile of the parsers or of the proxy
under load) and ``python -m bench.compare REF`` (parser timings of a committed version vs the
working tree, alternating). Everything is written under ``bench/out/`` (git-ignored).
"""
