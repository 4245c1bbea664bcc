"""Section: the first token, toolwire against SGLang's Rust gateway (SMG), in four rigs (issue 35,
goal 4: "at parity with SMG is enough").

``../shared/peers/smg/run_all.sh ttft`` compares the two proxies with scripted backends that write
a whole answer at once, every process free to run on any CPU. On a machine of few CPUs that rig
measures the kernel's placement as much as the proxies: toolwire's one thread, woken by the
backend's first bytes, waits for the CPU the backend is still writing the rest on (~1 ms on a
2-core VM, gone when the two are pinned apart; SMG runs threads on every CPU). Here the same
harness's parts — its scripted vLLM-dialect backend and SGLang worker, SMG, its tokenizer and
template, from ``$BENCH_SMG_DIR`` (default ``/tmp/smg``, made by ``run_all.sh setup``) — serve the
same requests in four rigs, one after the other, the two proxies asked in turn request by request:

* ``burst``: as ``run_all.sh ttft`` (the backends write their answer at once; nothing pinned);
* ``burst, pinned``: the backends on one CPU, the proxies on the other (two CPUs or more);
* ``paced``: the backends pause ``PACE_MS`` after each token, as an engine's decoding steps do;
* ``burst, --sched-slice-us 100``: as ``burst``, toolwire asking the kernel for a 100 µs slice
  (``app.sched``: a thread that wakes with a short slice may take the CPU from one that runs on).

Without the harness the section says so and measures nothing.
"""

from __future__ import annotations

import importlib.util
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.first_token import chat_request, first_token
from bench.proxy import answers, free_port
from bench.report import Section, at_most, fmt, table

TITLE = "First token against SMG: a burst backend, the same pinned, a paced backend, a short slice"
ROOT = Path(__file__).resolve().parent.parent
#: milliseconds a paced backend waits after each token
PACE_MS = 1.0
#: the harness's first-token request: ``plain200``'s text answers it (its first token is text)
SCENARIO = "plain200"
#: the model names each proxy serves the scripted backends under
MODELS = {"toolwire": "m", "smg": "smollm2-fake"}


def _tools(base: Path) -> list[Any] | None:
    """The harness's tools (``correctness.TOOLS``, the ones its first-token request carries), if it
    is set up."""
    path = base / "bench" / "correctness.py"
    if not (path.exists() and (base / "venv" / "bin" / "smg").exists() and (base / "tok").exists()):
        return None
    spec = importlib.util.spec_from_file_location("smg_correctness", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.TOOLS)


def request(port: int, model: str, tools: list[Any] | None) -> bytes:
    """The harness's first-token request: one user message naming ``SCENARIO``, streamed."""
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": f"Go. SCENARIO:{SCENARIO}"}],
                            "stream": True, "max_tokens": 16000}
    if tools is not None:
        body["tools"] = tools
    return chat_request(port, body)


#: a delta with text, reasoning or a call in a ``chat.completion.chunk`` (the first token shown)
SHOWN = re.compile(rb'"(?:content|reasoning_content|reasoning)":"[^"]|"tool_calls":\[')


def pin(process: subprocess.Popen[bytes], cpu: int) -> None:
    """Every thread of ``process`` onto ``cpu``."""
    for task in os.listdir(f"/proc/{process.pid}/task"):
        os.sched_setaffinity(int(task), {cpu})


class Rig:
    """The two scripted backends, SMG and toolwire (this checkout), started for one rig."""

    def __init__(self, base: Path, workdir: Path, pace_ms: float, flags: tuple[str, ...] = ()) -> None:
        python, bench = str(base / "venv" / "bin" / "python"), base / "bench"
        scripted = ["--tokenizer", str(base / "tok"), "--scenarios", str(bench / "scenarios.json"),
                    "--pace-ms", str(pace_ms)]
        worker, vllm, self.ports = free_port(), free_port(), {"toolwire": free_port(), "smg": free_port()}
        self.log = log = open(workdir / "peers.log", "ab")  # noqa: SIM115  # (closed in stop)

        def spawn(cmd: list[str]) -> subprocess.Popen[bytes]:
            return subprocess.Popen(cmd, stdout=log, stderr=log, cwd=bench)

        self.backends = [spawn([python, "fake_sglang_worker.py", "--port", str(worker), *scripted]),
                         spawn([python, "fake_vllm_backend.py", "--port", str(vllm), *scripted])]
        time.sleep(2)  # (the scripted backends tokenize their scenarios first)
        template = str(base / "qwen25_template.jinja")
        self.proxies = {
            "smg": spawn([str(base / "venv" / "bin" / "smg"), "launch", "--host", "127.0.0.1", "--port",
                          str(self.ports["smg"]), "--prometheus-host", "127.0.0.1", "--prometheus-port",
                          str(free_port()), "--worker-urls", f"grpc://127.0.0.1:{worker}", "--model-path",
                          str(base / "tok"), "--tokenizer-path", str(base / "tok"), "--chat-template", template,
                          "--tool-call-parser", "qwen", "--reasoning-parser", "qwen3", "--policy", "round_robin",
                          "--log-level", "warn"]),
            "toolwire": subprocess.Popen(
                [sys.executable, "-m", "app.cli", "serve", "--backend", f"http://127.0.0.1:{vllm}", "--backend-type",
                 "vllm", "--chat-template", template, "--tool-call-parser", "qwen25", "--reasoning-parser", "qwen3",
                 "--host", "127.0.0.1", "--port", str(self.ports["toolwire"]), "--log-level", "warning",
                 "--state-dir", str(workdir / "state"), *flags], stdout=log, stderr=log, cwd=ROOT),
        }
        if not (answers(f"http://127.0.0.1:{self.ports['toolwire']}/health")
                and answers(f"http://127.0.0.1:{self.ports['smg']}/v1/models", expect=MODELS["smg"].encode())):
            self.stop()
            raise RuntimeError("toolwire or SMG did not start")

    def pin(self) -> None:
        """The backends on CPU 0, the proxies on CPU 1."""
        for process in self.backends:
            pin(process, 0)
        for process in self.proxies.values():
            pin(process, 1)

    def stop(self) -> None:
        for process in (*self.proxies.values(), *self.backends):
            process.terminate()
        for process in (*self.proxies.values(), *self.backends):
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
        self.log.close()


#: the rigs, in turn: (name, the backends' pause after each token in ms, pinned, toolwire's flags)
RIGS: tuple[tuple[str, float, bool, tuple[str, ...]], ...] = (
    ("burst", 0.0, False, ()), ("burst, pinned", 0.0, True, ()), ("paced", PACE_MS, False, ()),
    ("burst, --sched-slice-us 100", 0.0, False, ("--sched-slice-us", "100")))


def run(ctx: Any) -> Section:
    section = Section(__name__, TITLE)
    base = Path(os.environ.get("BENCH_SMG_DIR", "/tmp/smg"))
    tools = _tools(base)
    if tools is None:
        section.notes.append(f"skipped: no SMG harness in {base} (../shared/peers/smg/run_all.sh setup makes it)")
        return section
    workdir = ctx.out / "peers"
    workdir.mkdir(parents=True, exist_ok=True)
    rounds = 30 if ctx.quick else 100
    rows = []
    for name, pace_ms, pinned, flags in RIGS:
        if pinned and len(os.sched_getaffinity(0)) < 2:
            section.notes.append(f"{name}: skipped (one CPU)")
            continue
        rig = Rig(base, workdir, pace_ms, flags)
        try:
            if pinned:
                rig.pin()
            for with_tools in (True, False):
                label = "with tools" if with_tools else "without tools"
                ctx.log(f"peers: {name}, {label}")
                got = _rounds(rig.ports, tools if with_tools else None, rounds // 3 if pace_ms else rounds)
                p50 = {proxy: statistics.median(times) * 1e3 for proxy, times in got.items()}
                ratio = p50["toolwire"] / p50["smg"]
                key = "peers.toolwire_over_smg." + ("tools" if with_tools else "no_tools") + "." + re.sub(
                    r"\W+", "_", name).strip("_")
                section.figure(key, f"first token, toolwire ÷ SMG at p50: {name}, {label}", ratio, "×",
                               at_most(1.0), f"{fmt(p50['toolwire'])} vs {fmt(p50['smg'])} ms")
                rows.append((name, label, fmt(p50["toolwire"]), fmt(p50["smg"]), fmt(ratio)))
                section.data[f"{name}, {label}"] = {"p50_ms": p50, "ratio": ratio}
        finally:
            rig.stop()
    section.tables.append(table(("backend", "request", "toolwire p50 ms", "SMG p50 ms", "toolwire ÷ SMG"), rows))
    section.notes.append(
        f"Each request on a new connection, to one proxy then the other, the order alternating each round; {rounds} "
        f"rounds, a third of them paced (a paced answer takes ~1 s). Paced: the scripted backends wait {PACE_MS:g} ms "
        "after each token. Pinned: the backends on CPU 0, "
        "the proxies on CPU 1, this client anywhere.")
    return section


def _rounds(ports: dict[str, int], tools: list[Any] | None, rounds: int) -> dict[str, list[float]]:
    """Each proxy's first-token times, one request to each per round (after a warm-up)."""
    raws = {proxy: request(port, MODELS[proxy], tools) for proxy, port in ports.items()}
    names = list(ports)
    for _ in range(5):
        for proxy in names:
            first_token(ports[proxy], raws[proxy], SHOWN)
    got: dict[str, list[float]] = {proxy: [] for proxy in names}
    for r in range(rounds):
        for proxy in names if r % 2 == 0 else reversed(names):
            try:
                got[proxy].append(first_token(ports[proxy], raws[proxy], SHOWN))
            except RuntimeError:  # (no first token, or no end: left out)
                pass
            time.sleep(0.005)
    return got
