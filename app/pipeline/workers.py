"""Worker processes: run a function on its arguments in another process, from asyncio, without the
caller's interpreter lock ever being held by the work (the mechanism; ``app.pipeline.offload``
decides what runs there and how long it may wait and take).

A worker is a child process forked from a fork server that has the work's modules imported
(``PRELOAD``), so a new worker is a fork, not an interpreter start; the parent holds one end of a
socket pair to it. It runs one job at a time. What crosses the socket, and how it is kept small:

* **Constants** — objects the process keeps for its lifetime (the settings, the served model), picked
  out by type (``constants``) — go to each worker once, the first time a job refers to them, pickled
  with the caller's ``reducers`` (so the model goes without its HTTP clients and with its chat
  template as source, compiled once in the worker); a job refers to them by name.
* **The result refers back to the arguments.** An object of the job's arguments (the ``Ask``, its
  tools, their specs — ``handles()`` lists them, in the same order on both sides) or of a constant
  that the result holds is sent back as a handle, and the caller's own object takes its place. So
  a plan comes back without the request it plans. The job must not mutate its arguments: it ran
  on copies, and what it changed there stays there.
* **An exception the job raises** is raised by ``Worker.call``, rebuilt from its class and
  attributes, with the worker's traceback as a note. ``WorkerLost`` means the worker died.

Frames: one byte of kind, eight of length (big-endian), the pickle.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import multiprocessing
import pickle
import signal
import socket
import struct
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields, is_dataclass
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

HEAD = struct.Struct("!cQ")
INSTALL, JOB, RESULT, ERROR = b"I", b"J", b"R", b"E"
#: modules a worker needs, imported once in the fork server
PRELOAD = ["app.pipeline.workers", "app.api.answer"]
#: how deep ``handles`` looks into a job's arguments (argument → Ask → tools → Tool → spec → parameters)
HANDLE_DEPTH = 5
_LEAVES = (str, bytes, int, float, bool, type(None))

Reducers = Mapping[type, Callable[[Any], tuple[Any, ...]]]


class WorkerLost(Exception):
    """The worker process died (killed, crashed, out of memory) before it answered."""


def context() -> BaseContext:
    """The fork server where there is one (Linux, macOS), else fresh interpreters."""
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(PRELOAD)
    return ctx


def handles(args: Iterable[Any], skip: Iterable[Any] = (), depth: int = HANDLE_DEPTH) -> list[Any]:
    """The objects of ``args`` a result may refer back to: the arguments, and the objects in their
    dataclass fields, lists and tuples, ``depth`` levels down — never strings or numbers, nor the
    objects in ``skip`` (the constants, which travel by name) or what they hold. Both sides walk
    their own copy of the arguments the same way, so position ``i`` names the same object."""
    found: list[Any] = []
    seen: set[int] = {id(s) for s in skip}
    level = [a for a in args if not isinstance(a, _LEAVES)]
    for _ in range(depth):
        below: list[Any] = []
        for obj in level:
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            found.append(obj)
            below.extend(child for child in _children(obj) if not isinstance(child, _LEAVES))
        level = below
    return found


_FIELDS: dict[type, tuple[str, ...]] = {}


def _children(obj: Any) -> Iterable[Any]:
    kind = type(obj)
    if kind is list or kind is tuple:
        return obj  # type: ignore[no-any-return]
    names = _FIELDS.get(kind)
    if names is None:  # a dict is a handle, what is inside it travels by value; so do other objects
        names = tuple(f.name for f in fields(obj)) if is_dataclass(kind) else ()
        _FIELDS[kind] = names
    return [getattr(obj, name) for name in names]


# ------------------------------------------------------------------------------- frames


def _send(sock: socket.socket, kind: bytes, data: bytes) -> None:
    sock.sendall(HEAD.pack(kind, len(data)))
    sock.sendall(data)


def _recv_exactly(sock: socket.socket, size: int) -> bytes | None:
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if n == 0:
            return None
        got += n
    return bytes(buffer)


def _recv(sock: socket.socket) -> tuple[bytes, bytes] | None:
    head = _recv_exactly(sock, HEAD.size)
    if head is None:
        return None
    kind, size = HEAD.unpack(head)
    data = _recv_exactly(sock, size)
    return None if data is None else (kind, data)


# ------------------------------------------------------------------------------- the worker side


#: in a worker: the constants it was sent, by name
_CONSTANTS: dict[str, Any] = {}


def _constant(name: str) -> Any:
    """A constant by name (what a job's pickle holds in its place)."""
    return _CONSTANTS[name]


class _ResultPickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, refs: Mapping[int, tuple[Any, ...]]) -> None:
        super().__init__(file, pickle.HIGHEST_PROTOCOL)
        self.refs = refs

    def persistent_id(self, obj: Any) -> Any:
        return self.refs.get(id(obj))


def _constant_refs(constants: Mapping[str, Any]) -> dict[int, tuple[Any, ...]]:
    refs: dict[int, tuple[Any, ...]] = {}
    for name, value in constants.items():
        refs[id(value)] = ("c", name)
        attributes = ([f.name for f in fields(value)] if is_dataclass(value) and not isinstance(value, type)
                      else list(getattr(value, "__dict__", {})))
        for attribute in attributes:
            part = getattr(value, attribute, None)
            if not isinstance(part, _LEAVES):
                refs.setdefault(id(part), ("a", name, attribute))
    return refs


def _error_frame(exc: BaseException) -> bytes:
    note = "".join(traceback.format_exception(exc))
    state = {k: v for k, v in vars(exc).items() if k != "__notes__"}
    try:
        return pickle.dumps((type(exc), exc.args, state, note), pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 — an exception that does not pickle still reaches the caller
        return pickle.dumps((RuntimeError, (f"{type(exc).__name__}: {exc}",), {}, note), pickle.HIGHEST_PROTOCOL)


class OverBudget(BaseException):
    """The job used up its CPU time (a ``BaseException``: the job's own ``except Exception`` blocks
    do not catch it). The worker's state may be half-changed: the caller replaces the worker."""


def _over_budget(_signum: int, _frame: Any) -> None:
    raise OverBudget


def serve(sock: socket.socket, cpu_budget_s: float | None = None) -> None:
    """A worker's life: install constants, run jobs — each for at most ``cpu_budget_s`` of CPU time —
    until the parent's end of the socket closes."""
    # the parent decides when a worker stops (its socket closes, or SIGKILL): a Ctrl-C or a SIGTERM to
    # the whole process group (systemd's default) must not cut the requests the server still drains
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGPROF, _over_budget)
    constants = _CONSTANTS
    refs: dict[int, tuple[Any, ...]] = {}
    with sock:
        while (frame := _recv(sock)) is not None:
            kind, data = frame
            if kind == INSTALL:
                name, value = pickle.loads(data)
                constants[name] = value
                refs = _constant_refs(constants)
                continue
            try:
                fn, args = pickle.loads(data)
                if cpu_budget_s:
                    signal.setitimer(signal.ITIMER_PROF, cpu_budget_s)
                try:
                    result = fn(*args)
                finally:
                    signal.setitimer(signal.ITIMER_PROF, 0)
                job_refs = dict(refs)
                job_refs.update({id(obj): ("h", i, type(obj).__qualname__)
                                 for i, obj in enumerate(handles(args, constants.values()))})
                buffer = io.BytesIO()
                _ResultPickler(buffer, job_refs).dump(result)
                reply = RESULT, buffer.getvalue()
            except (Exception, OverBudget) as exc:  # noqa: BLE001 — every failure of the job goes back to its caller
                reply = ERROR, _error_frame(exc)
            _send(sock, *reply)


# ------------------------------------------------------------------------------- the parent side


class _ConstantPickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, reducers: Reducers) -> None:
        super().__init__(file, pickle.HIGHEST_PROTOCOL)
        self.reducers = reducers

    def reducer_override(self, obj: Any) -> Any:
        for kind, reduce in self.reducers.items():
            if isinstance(obj, kind):
                return reduce(obj)
        return NotImplemented


class _JobPickler(pickle.Pickler):
    """A job: constants by name. (``reducer_override`` is not called for strings, numbers, lists,
    tuples and dicts — most of a request — so it costs next to nothing, unlike ``persistent_id``.)"""

    def __init__(self, file: io.BytesIO, constants: tuple[type, ...]) -> None:
        super().__init__(file, pickle.HIGHEST_PROTOCOL)
        self.constant_types = constants
        self.used: dict[str, Any] = {}

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, self.constant_types):
            name = type(obj).__qualname__
            self.used[name] = obj
            return (_constant, (name,))
        return NotImplemented


class _ResultUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, args: tuple[Any, ...], constants: Mapping[str, Any]) -> None:
        super().__init__(io.BytesIO(data))
        self.args = args
        self.constants = constants
        self._handles: list[Any] | None = None

    def persistent_load(self, pid: Any) -> Any:
        if pid[0] == "h":
            if self._handles is None:
                self._handles = handles(self.args, self.constants.values())
            found = self._handles[pid[1]] if pid[1] < len(self._handles) else None
            if type(found).__qualname__ != pid[2]:  # the two walks disagree: never substitute the wrong object
                raise pickle.UnpicklingError(f"result handle {pid[1]} names a {pid[2]}, here a {type(found).__qualname__}")
            return found
        value = self.constants[pid[1]]
        return value if pid[0] == "c" else getattr(value, pid[2])


def _rebuild_error(data: bytes) -> BaseException:
    kind, args, state, note = pickle.loads(data)
    exc: BaseException = kind.__new__(kind)
    exc.args = args
    exc.__dict__.update(state)
    exc.add_note("in the worker process:\n" + note)
    return exc


class Worker:
    """One worker process and the parent's end of its socket (see the module docstring)."""

    def __init__(self, process: BaseProcess, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.process = process
        self.reader = reader
        self.writer = writer
        self.installed: dict[str, Any] = {}  # constant name → the object the worker has

    @classmethod
    async def start(cls, ctx: BaseContext, name: str = "toolwire-worker", cpu_budget_s: float | None = None) -> Worker:
        """Start a worker (``serve``; the blocking part, the fork server's answer, in a thread)."""
        parent, child = socket.socketpair()
        process = ctx.Process(target=serve, args=(child, cpu_budget_s), name=name, daemon=True)  # type: ignore[attr-defined]
        try:
            await asyncio.to_thread(process.start)
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        reader, writer = await asyncio.open_unix_connection(sock=parent, limit=2**16)
        return cls(process, reader, writer)

    async def call(self, fn: Callable[..., Any], args: tuple[Any, ...], constants: tuple[type, ...] = (),
                   reducers: Reducers | None = None) -> Any:
        """``fn(*args)`` in the worker. Instances of the ``constants`` types travel once per worker
        (pickled with ``reducers``) and by name after that. Raises what ``fn`` raised, or
        ``WorkerLost``; cancelling it leaves the worker out of step: kill it."""
        buffer = io.BytesIO()
        pickler = _JobPickler(buffer, constants)
        pickler.dump((fn, args))
        for name, value in pickler.used.items():
            if self.installed.get(name) is not value:
                shipped = io.BytesIO()
                _ConstantPickler(shipped, reducers or {}).dump((name, value))
                self._write(INSTALL, shipped.getvalue())
                self.installed[name] = value
        self._write(JOB, buffer.getvalue())
        try:
            await self.writer.drain()
            head = await self.reader.readexactly(HEAD.size)
            kind, size = HEAD.unpack(head)
            data = await self.reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise WorkerLost(f"worker process {self.process.pid} died (exit code {self.process.exitcode})") from exc
        if kind == ERROR:
            raise _rebuild_error(data)
        return _ResultUnpickler(data, args, self.installed).load()

    def _write(self, kind: bytes, data: bytes) -> None:
        self.writer.write(HEAD.pack(kind, len(data)))
        self.writer.write(data)

    def kill(self) -> None:
        """Stop the worker at once (SIGKILL) and close its socket (also once the loop is gone)."""
        if self.process.pid is not None and self.process.exitcode is None:
            self.process.kill()
        with contextlib.suppress(RuntimeError):  # the loop closed already: the process's exit closes it
            self.writer.close()
