"""The warm side of the harness: a process that has imported torch and forks one worker per run.

Started by ``zygote.Zygote`` (``python -c "...zygote_worker import main; main(FD)"``) with a
Unix socket on ``FD``. It imports the heavy modules once (torch, triton, numpy: never touching
the GPU, so every child initialises its device afresh), then serves requests from the trusted
parent, one JSON message each, with file descriptors attached:

- ``{"op": "fork", "id": N, "env": {...}, "cwd": PATH, "control": bool}`` with the fds
  ``[stdout, stderr, job-in, result-out, (control-in)]``: fork a child that starts a new
  session, takes those fds, its environment and folder, and runs ``harness_worker.main`` exactly
  as a fresh worker would. Answer ``{"op": "started", "id", "pid", "spare"}``.
- ``{"op": "kill", "id": N}``: SIGKILL that run's process group and its descendants.

Spares (``KERNELMILL_ZYGOTE_SPARES`` N > 0; ``zygote.spares`` says how many): after serving a fork
for an environment, the zygote keeps N children forked ahead for that environment's device
settings (``spare_key``), each of which has made its CUDA context (the driver makes contexts one
at a time, a few per second per host: grades that start together queued seconds there) and
waits for one job; the next fork for that key goes to a spare, which then becomes the run's
worker exactly as a fresh child would (its fds, folder and whole environment). A spare serves
one run; spares hold no other spare's socket, and die with the zygote.

When a run's child exits the zygote answers ``{"op": "exit", "id", "status", "leaked",
"cpu_s"}``. ``status`` is the child's exit status in ``Popen.returncode`` form; ``leaked``
counts the run's processes that had left its process group (``setsid``, ``setpgid``) and were
still alive; ``cpu_s`` is the child's user and system CPU seconds (with the children it reaped).

Escapes: the zygote and every run child are child subreapers (``PR_SET_CHILD_SUBREAPER``), so a
process a run leaves behind, whatever session it moved to and whatever it did to its environment,
stays a descendant of the run child, and after that child's exit, of the zygote, which kills it.
When the parent process goes (its socket reaches end of file) or sends SIGTERM, the zygote kills
every run and every stray, then exits.

The zygote's own death, by any means (SIGKILL included), is covered by its guardian: ``main``
first forks, and the parent stays behind as a small subreaper that imports nothing and runs no
user code. Run children die with the zygote (their parent-death signal); what they had started
is then reparented to the guardian, which kills every process left under it and exits with the
zygote's status. Should the guardian die first, the zygote gets SIGTERM (its parent-death signal)
and shuts down as above.

Worker-side: the standard library at start; torch, triton and numpy only as preloads.
"""
from __future__ import annotations

import collections
import faulthandler
import gc
import importlib
import json
import os
import select
import signal
import socket
import sys
import time

from .zygote_child import (  # noqa: F401 — the child side, importable from here as before
    MAX_FDS,
    MAX_MESSAGE,
    MAX_SPARE_KEYS,
    PR_SET_CHILD_SUBREAPER,
    PR_SET_PDEATHSIG,
    _child,
    _forget_environment_caches,
    _prctl,
    _spare,
    spare_key,
)

PRELOAD = ("torch", "triton", "numpy")


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (all its threads'), from /proc."""
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as handle:
                found.extend(int(p) for p in handle.read().split())
        except OSError:
            continue
    return found


def pgid_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def descendants(root: int):
    """``root`` and every process below it, each yielded once its children are listed (a
    caller may kill it then without losing them)."""
    seen, stack = set(), [root]
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        stack.extend(children(pid))
        yield pid


def kill_tree(root: int) -> list[int]:
    """SIGKILL ``root`` and every descendant; returns the pids killed (live ones only)."""
    killed = []
    for pid in descendants(root):
        if _alive(pid):
            killed.append(pid)
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return killed


class Zygote:
    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.runs: dict[int, int] = {}  # child pid -> request id
        self.killed: dict[int, int] = {}  # child pid -> escapees found while it ran
        self.stopping = False
        self.outbox: collections.deque[bytes] = collections.deque()
        self.spare_count = max(0, int(os.environ.get("KERNELMILL_ZYGOTE_SPARES") or 0))
        self.cuda = os.environ.get("KERNELMILL_ZYGOTE_KIND") == "cuda"
        self.spares: dict[tuple, list[tuple[int, socket.socket]]] = {}  # key -> (pid, socket)
        self.due: list[tuple[tuple, dict]] = []  # settings whose spares are to be forked

    # ---------------------------------------------------------------- messages

    def send(self, message: dict) -> None:
        """Queue a message; ``flush`` sends it when the socket takes it. The zygote never
        blocks on its parent: a parent busy sending fork requests while its reader waits could
        otherwise deadlock with a zygote blocked sending to it."""
        self.outbox.append(json.dumps(message).encode())
        self.flush()

    def flush(self) -> None:
        while self.outbox:
            try:
                self.sock.send(self.outbox[0])
            except BlockingIOError:
                return
            except OSError:
                self.stopping = True
                return
            self.outbox.popleft()

    def serve(self) -> None:
        self.sock.setblocking(False)
        while not self.stopping:
            try:
                ready, _, _ = select.select([self.sock], [self.sock] if self.outbox else [],
                                            [], 0.05)
            except InterruptedError:
                ready = []
            if ready:
                self.receive()
            while self.due:  # no frame of a run's request is on a spare's stack
                self._refill(*self.due.pop(0))
            self.flush()
            self.reap()
        self.shutdown()

    def receive(self) -> None:
        try:
            data, fds, flags, _addr = socket.recv_fds(self.sock, MAX_MESSAGE, MAX_FDS)
        except BlockingIOError:
            return
        except OSError:
            data, fds, flags = b"", [], 0
        if data and flags & getattr(socket, "MSG_CTRUNC", 8):
            # descriptors dropped by the kernel: a run forked without them would read others
            for fd in fds:
                os.close(fd)
            print(f"zygote: a request's descriptors were cut at {MAX_FDS}: not forked",
                  file=sys.stderr, flush=True)
            return
        if not data:
            for fd in fds:
                os.close(fd)
            self.stopping = True
            return
        try:
            message = json.loads(data)
            if message.get("op") == "fork":
                self.fork(message, fds)
            elif message.get("op") == "kill":
                for pid, rid in list(self.runs.items()):
                    if rid == message.get("id"):
                        self._kill_run(pid)
        finally:
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass

    # ---------------------------------------------------------------- runs

    def fork(self, message: dict, fds: list[int]) -> None:
        env = {str(k): str(v) for k, v in (message.get("env") or {}).items()}
        key = spare_key(env)
        pid = self._hand_to_spare(key, message, fds)
        spare = pid is not None
        if pid is None:
            try:
                pid = os.fork()
            except OSError as exc:
                self.send({"op": "error", "id": message.get("id"), "message": f"fork: {exc}"})
                return
            if pid == 0:  # the child never returns from here
                self._close_in_child()
                _child(message, fds)
        self.runs[pid] = message.get("id")
        self.send({"op": "started", "id": message.get("id"), "pid": pid, "spare": spare})
        if self.spare_count:  # forked from the serving loop (``serve``), knowing the key alone
            self.due.append((key, dict(key)))

    # ---------------------------------------------------------------- spares

    def _hand_to_spare(self, key: tuple, message: dict, fds: list[int]) -> int | None:
        """A spare of ``key`` given this job (its pid), or None where none is alive."""
        waiting = self.spares.get(key) or []
        while waiting:
            pid, channel = waiting.pop(0)
            try:
                socket.send_fds(channel, [json.dumps(message).encode()], fds)
                return pid
            except OSError:  # it died, or will: reaped here
                kill_tree(pid)
            finally:
                channel.close()
        return None

    def _refill(self, key: tuple, env: dict) -> None:
        """Fork spares for ``key`` until ``spare_count`` wait (``key`` now the most recently
        served setting; past ``MAX_SPARE_KEYS`` settings, the oldest one's spares end)."""
        if not self.spare_count:
            return
        waiting = self.spares.pop(key, [])
        self.spares[key] = waiting
        while len(self.spares) > MAX_SPARE_KEYS:
            oldest = next(iter(self.spares))
            for pid, channel in self.spares.pop(oldest):
                channel.close()  # it reads end of file and exits
                kill_tree(pid)
        while len(waiting) < self.spare_count and not self.stopping:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            zygote = os.getpid()
            try:
                pid = os.fork()
            except OSError:
                ours.close()
                theirs.close()
                return
            if pid == 0:  # never returns
                ours.close()
                self._close_in_child()
                _spare(theirs, env, self.cuda, zygote)
            theirs.close()
            waiting.append((pid, ours))

    def spare_pids(self) -> set[int]:
        return {pid for waiting in self.spares.values() for pid, _channel in waiting}

    def _close_in_child(self) -> None:
        """In a child forked here: the zygote's socket and every spare's channel closed (a
        run that held a spare's channel could hand it a job of its own)."""
        self.sock.close()
        for waiting in self.spares.values():
            for _pid, channel in waiting:
                channel.close()

    def _drop_spare(self, pid: int) -> None:
        for waiting in self.spares.values():
            for entry in list(waiting):
                if entry[0] == pid:
                    waiting.remove(entry)
                    entry[1].close()

    def _kill_run(self, pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        self.killed[pid] = self.killed.get(pid, 0) + sum(
            1 for p in kill_tree(pid) if p != pid and pgid_of(p) not in (None, pid))

    def reap(self) -> None:
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.runs:
                self._finish(pid, status, usage.ru_utime + usage.ru_stime)
            else:
                self._drop_spare(pid)

    def _finish(self, pid: int, status: int, cpu_s: float | None = None) -> None:
        rid = self.runs.pop(pid)
        try:
            os.killpg(pid, signal.SIGKILL)  # whatever stayed in the run's group
        except OSError:
            pass
        leaked = self.killed.pop(pid, 0) + self.strays(pid)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        self.send({"op": "exit", "id": rid, "status": code, "leaked": leaked,
                   "cpu_s": None if cpu_s is None else round(cpu_s, 3)})

    def strays(self, group: int | None = None) -> int:
        """Kill the zygote's children that are not runs (orphans reparented here). Returns how
        many had left ``group``."""
        escaped: set[int] = set()
        for _ in range(20):
            spares = self.spare_pids()
            found = [p for p in children(os.getpid())
                     if p not in self.runs and p not in spares and _alive(p)]
            if not found:
                break
            for pid in found:
                for victim in kill_tree(pid):
                    if pgid_of(victim) != group:
                        escaped.add(victim)
            time.sleep(0.01)
        self.reap_strays()
        return len(escaped)

    def reap_strays(self) -> None:
        spares = self.spare_pids()
        for pid in children(os.getpid()):
            if pid not in self.runs and pid not in spares:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except OSError:
                    pass

    def shutdown(self) -> None:
        self.stopping = True
        for pid in self.spare_pids():
            kill_tree(pid)
        for waiting in self.spares.values():
            for _pid, channel in waiting:
                channel.close()
        self.spares = {}
        for pid in list(self.runs):
            self._kill_run(pid)
        self.strays()
        for pid in list(self.runs):
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass
        os._exit(0)


def sweep() -> None:
    """Kill every process under this one and reap it."""
    for _ in range(200):
        found = [p for p in children(os.getpid()) if _alive(p)]
        if not found:
            break
        for pid in found:
            kill_tree(pid)
        time.sleep(0.01)
        _reap_all()
    _reap_all()


def _reap_all() -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def guard(zygote: int) -> None:
    """The guardian: wait until the zygote has gone, however it went, then kill what its runs
    left (reparented here: this process is a subreaper, the zygote's parent) and exit with the
    zygote's status. SIGTERM is passed on to the zygote, which then shuts down cleanly."""
    def on_term(_signum, _frame):
        try:
            os.kill(zygote, signal.SIGTERM)
        except OSError:
            pass

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the zygote through its socket
    status = 0
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == zygote:
            break
    sweep()
    os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


def _warm_keys() -> None:
    """Cached keys that hash installed files, computed once here and inherited by every fork:
    Triton's (``triton_key``: libtriton and the compiler's sources), which each worker that
    compiled a kernel computed again: 0.6 CPU-s of a grade on an H100 host, 0.36 s on a 2-core
    CPU host."""
    cache = sys.modules.get("triton.runtime.cache")
    key = getattr(cache, "triton_key", None)
    if key is None:
        return
    try:
        key()
    except Exception:  # noqa: BLE001 — a key not warmed is computed where it is needed
        pass


def _import_without_cuda(name: str):
    """Import ``name`` with ``torch.cuda.is_available`` answering from the device files rather
    than the driver. ``torch.utils.cpp_extension`` asks it at import (only to warn when a CUDA
    toolkit has no runtime), and asking the driver initialises CUDA: driver threads in the
    zygote (measured on the H100 host), which may then fork no worker."""
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    probe = getattr(cuda, "is_available", None)
    if probe is None:
        return importlib.import_module(name)
    cuda.is_available = lambda: cuda._is_compiled() and os.path.exists("/dev/nvidiactl")
    try:
        return importlib.import_module(name)
    finally:
        cuda.is_available = probe


def _warm_preloads(names: list[str]) -> None:
    """Each preloaded module's ``zygote_warm()``, where it defines one: work done once here that
    every fork inherits (the grader's worker lists the modules it watches)."""
    for name in names:
        warm = getattr(sys.modules.get(name), "zygote_warm", None)
        if callable(warm):
            try:
                warm()
            except Exception:  # noqa: BLE001 — a fork then does that work itself
                pass


def main(argv: list[str]) -> None:
    sock = socket.socket(fileno=int(argv[0]))
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    guardian = os.getpid()
    child = os.fork()
    if child:
        sock.close()  # the parent must see end of file when the zygote goes
        guard(child)
    # The zygote. Its guardian is single-threaded, so a parent-death signal tied to it is safe
    # (the kernel sends it when the *thread* that forked ends): SIGTERM, then a clean shutdown.
    # The guardian has none: the grader starts it from whichever thread needs it first. The
    # socket is the parent's lifeline instead: it reaches end of file when the parent process
    # is gone, however it went, and the zygote then kills every run and exits.
    _prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
    if os.getppid() != guardian:
        os._exit(1)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)  # not inherited across fork

    def on_term(_signum, _frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # where is it? (stderr)
    preloaded, failed, threaded_by = [], {}, None
    for name in (argv[1].split(",") if len(argv) > 1 and argv[1] else PRELOAD):
        try:
            _import_without_cuda(name)
            preloaded.append(name)
        except Exception as exc:  # noqa: BLE001 — a missing preload only costs speed
            failed[name] = f"{type(exc).__name__}: {exc}"[:200]
        if len(os.listdir("/proc/self/task")) != 1:  # the parent retries without this one
            threaded_by = name
            break
    _warm_keys()
    _warm_preloads(preloaded)
    # What the preloads made (450,000 objects), moved out of the collector's generations: a
    # child's full collection would otherwise write to every inherited object's header and so
    # copy each page holding one (22,000 pages, 0.2 CPU-s, on a 2-core host). Graded workers
    # seldom make one (none in a CPU grade of a Triton softmax or a 268 MB LayerNorm): this
    # keeps the pages shared in those that do.
    gc.collect()
    gc.freeze()
    threads = len(os.listdir("/proc/self/task"))
    zygote = Zygote(sock)
    zygote.send({"op": "ready", "pid": os.getpid(), "guardian": guardian,
                 "threads": threads, "preloaded": preloaded, "failed": failed,
                 "threaded_by": threaded_by})
    if threads != 1:
        os._exit(2)  # forking a multi-threaded process is unsafe: the parent falls back
    try:
        zygote.serve()
    except SystemExit:
        zygote.shutdown()
