"""Worker processes: run a function on its arguments in another process, from asyncio, without the
caller's interpreter lock ever being held by the work (the mechanism; ``app.pipeline.offload``
decides what runs there and how long it may wait and take).

A worker is forked from a fork server (``fork_server``: ``python -c``, started on first use, its own
session) that has the work's modules imported (``PRELOAD``), so a new worker is a fork, not an
interpreter start; the parent holds one end of a socket pair to it. Workers and the fork server
ignore SIGINT and SIGTERM — a signal to the whole process group must not cut the requests a
draining server still prepares — and end when their socket closes (the server exits, or closes
it) or on SIGKILL. A worker runs one job at a time. What crosses the socket, and how it is kept
small:

* **Constants** — objects the process keeps for its lifetime (the settings, the served model), picked
  out by type (``constants``) — go to each worker once, the first time a job refers to them, pickled
  with the caller's ``reducers`` (so the model goes without its HTTP clients and with its chat
  template as source, compiled once in the worker); a job refers to them by name.
* **The result refers back to the arguments.** An object of the job's arguments (the ``Ask``, its
  tools, their specs — ``handles()`` finds them in the worker) or of a constant that the result
  holds is sent back as its path from the arguments (``resolve``: ``args[0].tools[3].spec``), and
  the caller's own object takes its place. So a plan comes back without the request it plans.
  The job must not mutate its arguments: it ran on copies, and what it changed there stays there.
* **An exception the job raises** is raised by ``Worker.call``, rebuilt from its class and
  attributes, with the worker's traceback as a note. ``OverBudget``: the job used up its CPU time
  (``serve``'s ``cpu_budget_s``, a CPU timer in the worker); ``WorkerLost``: the worker died.

Frames: one byte of kind, eight of length (big-endian), the pickle.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import io
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import fields, is_dataclass
from typing import Any

HEAD = struct.Struct("!cQ")
BUDGET = struct.Struct("!d")  # a fork request's CPU budget (0: none)
PID = struct.Struct("!q")
INSTALL, JOB, RESULT, ERROR = b"I", b"J", b"R", b"E"
#: modules a worker needs, imported once in the fork server
PRELOAD = ["app.api.answer"]
#: how deep ``handles`` looks into a job's arguments (argument → Ask → tools → Tool → spec → parameters)
HANDLE_DEPTH = 5
_LEAVES = (str, bytes, int, float, bool, type(None))

Reducers = Mapping[type, Callable[[Any], tuple[Any, ...]]]
Path = tuple[int | str, ...]


class WorkerLost(Exception):
    """The worker process died (killed, crashed, out of memory) before it answered."""


# ------------------------------------------------------------------------------- the fork server


def fork_server(control_fd: int) -> None:
    """The fork server's life (``python -c``, started by ``ForkServer``): import ``PRELOAD``, then for
    each request on the control socket — one byte, the CPU budget as a double, and the worker's end
    of its socket pair passed alongside — fork a worker running ``serve`` and answer its pid, until
    the control socket closes. Single-threaded, so forking is safe; children are reaped by the
    kernel (``SIGCHLD`` ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    for module in PRELOAD:
        importlib.import_module(module)
    gc.freeze()  # what every worker shares stays shared: the collector never writes to it
    control = socket.socket(fileno=control_fd)
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, BUDGET.size + 1, 1)
        except OSError:
            return
        if not message or not fds:
            return
        (budget,) = BUDGET.unpack(message[1:])
        pid = os.fork()
        if pid == 0:  # the worker
            control.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            code = 0
            try:
                serve(socket.socket(fileno=fds[0]), budget or None)
            except BaseException:  # noqa: BLE001 — a worker never returns into the fork server's loop
                code = 1
            os._exit(code)
        os.close(fds[0])
        control.sendall(PID.pack(pid))


class ForkServer:
    """The parent's handle on its fork server (started on first use, again if it died)."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._lock = threading.Lock()

    def fork(self, worker_end: socket.socket, cpu_budget_s: float | None) -> int:
        """A new worker serving ``worker_end`` (blocking: call it in a thread); its pid."""
        with self._lock:
            for _attempt in (1, 2):
                control = self._running()
                try:
                    socket.send_fds(control, [b"F" + BUDGET.pack(cpu_budget_s or 0.0)], [worker_end.fileno()])
                    answer = _recv_exactly(control, PID.size)
                except OSError:
                    answer = None
                if answer is not None:
                    return int(PID.unpack(answer)[0])
                self._stop()  # it died: start another
            raise OSError("the fork server does not answer")

    def _running(self) -> socket.socket:
        if self._process is not None and self._process.poll() is None and self._control is not None:
            return self._control
        self._stop()
        ours, theirs = socket.socketpair()
        # its own session: signals to the server's process group (a terminal's Ctrl-C) do not reach it;
        # it ends when the control socket closes, with this process
        path = os.pathsep.join(p for p in sys.path if p)
        self._process = subprocess.Popen(
            [sys.executable, "-c", f"from app.pipeline.workers import fork_server; fork_server({theirs.fileno()})"],
            pass_fds=(theirs.fileno(),), start_new_session=True,
            env={**os.environ, "PYTHONPATH": path})
        theirs.close()
        self._control = ours
        return ours

    def _stop(self) -> None:
        if self._control is not None:
            self._control.close()
            self._control = None
        if self._process is not None:
            with contextlib.suppress(OSError):
                self._process.kill()
            self._process.wait()
            self._process = None


#: this process's fork server
FORK_SERVER = ForkServer()


def handles(args: Sequence[Any], skip: Iterable[Any] = (), depth: int = HANDLE_DEPTH) -> list[tuple[Any, Path]]:
    """The objects of ``args`` a result may refer back to, each with its path from the arguments
    (``resolve``): the arguments, and the objects in their dataclass fields, lists and tuples,
    ``depth`` levels down — never strings or numbers, nor the objects in ``skip`` (the constants,
    which travel by name) or what they hold. A dict is a handle; what is inside it is not."""
    seen = {id(s) for s in skip}
    found: list[tuple[Any, Path]] = []
    level: list[tuple[Any, Path]] = [(a, (i,)) for i, a in enumerate(args) if not isinstance(a, _LEAVES)]
    for remaining in range(depth - 1, -1, -1):
        below: list[tuple[Any, Path]] = []
        for obj, path in level:
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            found.append((obj, path))
            if not remaining:
                continue
            kind = type(obj)
            if kind is list or kind is tuple:
                below.extend((child, (*path, i)) for i, child in enumerate(obj) if not isinstance(child, _LEAVES))
                continue
            for name in _field_names(kind):
                child = getattr(obj, name)
                if not isinstance(child, _LEAVES):
                    below.append((child, (*path, name)))
        level = below
    return found


def resolve(args: Sequence[Any], path: Path) -> Any:
    """The object at ``path`` in ``args`` (an index into a list or tuple, else a field's name)."""
    obj: Any = args
    for step in path:
        obj = obj[step] if isinstance(step, int) else getattr(obj, step)
    return obj


_FIELDS: dict[type, tuple[str, ...]] = {}


def _field_names(kind: type) -> tuple[str, ...]:
    """A dataclass's field names (none for anything else: a dict, what is inside travels by value)."""
    names = _FIELDS.get(kind)
    if names is None:
        names = tuple(f.name for f in fields(kind)) if is_dataclass(kind) else ()
        _FIELDS[kind] = names
    return names


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
                job_refs.update({id(obj): ("h", path, type(obj).__qualname__)
                                 for obj, path in handles(args, constants.values())})
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

    def persistent_load(self, pid: Any) -> Any:
        if pid[0] == "h":
            try:
                found = resolve(self.args, pid[1])
            except (AttributeError, IndexError, TypeError):
                found = None
            if type(found).__qualname__ != pid[2]:  # never substitute the wrong object
                here = type(found).__qualname__
                raise pickle.UnpicklingError(f"result handle {pid[1]} names a {pid[2]}, here a {here}")
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

    def __init__(self, pid: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.pid = pid
        self.reader = reader
        self.writer = writer
        self.installed: dict[str, Any] = {}  # constant name → the object the worker has

    @classmethod
    async def start(cls, cpu_budget_s: float | None = None, server: ForkServer = FORK_SERVER) -> Worker:
        """A new worker forked by ``server`` (the blocking part, its answer, in a thread)."""
        parent, child = socket.socketpair()
        try:
            pid = await asyncio.to_thread(server.fork, child, cpu_budget_s)
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        reader, writer = await asyncio.open_unix_connection(sock=parent, limit=2**16)
        return cls(pid, reader, writer)

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
            raise WorkerLost(f"worker process {self.pid} died") from exc
        if kind == ERROR:
            raise _rebuild_error(data)
        return _ResultUnpickler(data, args, self.installed).load()

    def _write(self, kind: bytes, data: bytes) -> None:
        self.writer.write(HEAD.pack(kind, len(data)))
        self.writer.write(data)

    def kill(self) -> None:
        """Stop the worker at once (SIGKILL) and close its socket (also once the loop is gone)."""
        with contextlib.suppress(OSError):  # gone already
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(RuntimeError):  # the loop closed already: the process's exit closes it
            self.writer.close()
