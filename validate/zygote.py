"""Warm workers: per device kind, one pre-started process that has imported torch forks each run.

A fresh worker spends seconds importing torch before it does anything; a child forked from a
process that already has (``zygote_worker``) starts in milliseconds and is otherwise the same
fresh worker: its own session, folder, environment, limits and sandbox, a new CUDA context (the
zygote never touches the GPU), and the same authenticated result pipe, which goes straight from
this process to the child (the zygote only passes the descriptors on).

``ZYGOTES.spawn(device, env, cwd, fds)`` returns a ``WarmProcess`` (``pid``, ``wait``,
``kill``, ``returncode``, ``leaked``) or None when no zygote can serve (``KERNELMILL_WARM=0``, a
different interpreter, a zygote that failed to start); ``run_in_worker`` then starts a fresh
process as before.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading

from .zygote_child import MAX_FDS

READY_TIMEOUT_S = 180.0
_log = logging.getLogger(__name__)


class WarmProcess:
    """A run's child as seen from here (the zygote is its parent and reports its exit)."""

    def __init__(self, zygote: Zygote, rid: int):
        self.zygote, self.rid = zygote, rid
        self.pid: int | None = None
        self.returncode: int | None = None
        self.leaked = 0
        self.cpu_s: float | None = None  # the run's CPU seconds, user and system
        self.spare = False  # served by a child forked (and its CUDA context made) ahead
        self.started = threading.Event()
        self.exited = threading.Event()
        self.error: str | None = None

    def wait(self, timeout: float | None = None) -> int | None:
        if not self.exited.wait(timeout):
            raise subprocess.TimeoutExpired("warm worker", timeout)
        return self.returncode

    def kill(self) -> None:
        """Kill the run's group and descendants (the zygote reports the exit)."""
        if not self.exited.is_set():
            self.zygote.request({"op": "kill", "id": self.rid})


class Zygote:
    def __init__(self, python: str, env: dict, preload: tuple[str, ...] = ()):
        self.python, self.env, self.preload = python, env, preload
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.runs: dict[int, WarmProcess] = {}
        self.next_id = 0
        self.lock = threading.Lock()
        self.ready = threading.Event()
        self.info: dict = {}
        self.failed: str | None = None
        self.warned = False

    def start(self) -> None:
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        code = ("import sys; from kernelmill.validate.zygote_worker import main; "
                "main(sys.argv[1:])")
        log = _log_file()
        try:
            self.proc = subprocess.Popen(
                [self.python, "-c", code, str(child_sock.fileno()), ",".join(self.preload)],
                env=self.env, pass_fds=(child_sock.fileno(),), start_new_session=True,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, cwd="/")
        except OSError as exc:
            self.failed = f"zygote did not start: {exc}"
            parent_sock.close()
            return
        finally:
            child_sock.close()
            if log is not subprocess.DEVNULL:
                log.close()
        self.sock = parent_sock
        threading.Thread(target=self._listen, daemon=True).start()
        if not self.ready.wait(READY_TIMEOUT_S):
            self.failed = "zygote not ready in time"
            self.stop()
        elif self.info.get("threads", 1) != 1:
            self.failed = f"zygote has {self.info['threads']} threads after its imports"
            self.stop()

    @property
    def alive(self) -> bool:
        return self.failed is None and self.proc is not None and self.proc.poll() is None

    def request(self, message: dict, fds: list[int] = ()) -> bool:
        try:
            socket.send_fds(self.sock, [json.dumps(message).encode()], list(fds))
            return True
        except (OSError, AttributeError):
            return False

    def spawn(self, env: dict, cwd: str, fds: list[int]) -> WarmProcess | None:
        if len(fds) > MAX_FDS:  # more than a request carries: a fresh interpreter instead
            return None
        with self.lock:  # never held across socket I/O: the reader thread takes it too
            self.next_id += 1
            run = self.runs[self.next_id] = WarmProcess(self, self.next_id)
        sent = self.request({"op": "fork", "id": run.rid, "env": env, "cwd": cwd}, fds)
        if not sent or not run.started.wait(30) or run.pid is None:
            with self.lock:
                self.runs.pop(run.rid, None)
            if not run.started.is_set():
                self.failed = "zygote stopped answering"
                self.stop()
            return None
        return run

    def _listen(self) -> None:
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                break
            try:
                message = json.loads(data)
            except ValueError:
                continue
            op, run = message.get("op"), self.runs.get(message.get("id"))
            if op == "ready":
                self.info = message
                self.ready.set()
            elif op == "started" and run is not None:
                run.pid = int(message["pid"])
                run.spare = message.get("spare") is True
                run.started.set()
            elif op == "error" and run is not None:
                run.error = message.get("message")
                run.started.set()
            elif op == "exit" and run is not None:
                run.returncode, run.leaked = message["status"], int(message.get("leaked", 0))
                cpu = message.get("cpu_s")
                run.cpu_s = float(cpu) if isinstance(cpu, (int, float)) else None
                with self.lock:
                    self.runs.pop(run.rid, None)
                run.exited.set()
        # The zygote is gone (its runs died with it: their parent-death signal; its guardian
        # kills what they had started); wake waiters.
        self.failed = self.failed or "zygote exited"
        try:
            self.proc.wait(timeout=10)  # reaped here, never left a zombie
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with self.lock:
            pending, self.runs = list(self.runs.values()), {}
        for run in pending:
            run.returncode = -9 if run.returncode is None else run.returncode
            run.started.set()
            run.exited.set()

    def stop(self) -> None:
        if self.sock is not None:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class ZygotePool:
    """One zygote per (interpreter, device kind), started on first use in this process or
    ahead of it (``prestart``). Kinds start apart: one kind's start (its imports, 13-14 s each
    on a GPU image without bytecode) never waits for another's (the pool's lock is not held
    while a zygote starts; each kind has a lock of its own)."""

    def __init__(self) -> None:
        self._zygotes: dict[tuple, Zygote] = {}
        self._starting: dict[tuple, threading.Lock] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def enabled(self) -> bool:
        return os.environ.get("KERNELMILL_WARM", "1") not in ("0", "false", "no", "")

    def get(self, device: str, base_env: dict, python: str | None = None) -> Zygote | None:
        python = python or sys.executable
        if not self.enabled() or python != sys.executable:
            return None
        key = (python, "cpu" if device.startswith("cpu") else "cuda")
        with self._lock:
            if self._pid != os.getpid():  # a forked copy of this process: not our zygotes
                self._zygotes, self._starting, self._pid = {}, {}, os.getpid()
            starting = self._starting.setdefault(key, threading.Lock())
        with starting:  # this kind's start alone: other kinds start and serve meanwhile
            with self._lock:
                zygote = self._zygotes.get(key)
            if zygote is not None and zygote.info.get("threads", 1) != 1:
                return None  # this interpreter cannot be forked safely: stay cold
            if zygote is None or not zygote.alive:
                # numpy's OpenBLAS starts a thread pool at import; a process is forked safely
                # only with one thread, so the zygote's BLAS stays single-threaded.
                env = {**base_env, "OPENBLAS_NUM_THREADS": "1", "KERNELMILL_ZYGOTE_KIND": key[1],
                       "KERNELMILL_ZYGOTE_SPARES": str(spares(key[1]))}
                zygote = self._start(python, env, preload())
                with self._lock:
                    self._zygotes[key] = zygote
            if not zygote.alive and not zygote.warned:
                zygote.warned = True
                _log.warning("warm workers unavailable (%s): starting a fresh interpreter per "
                             "run", zygote.failed)
            return zygote if zygote.alive else None

    @staticmethod
    def _start(python: str, env: dict, names: tuple[str, ...]) -> Zygote:
        """A started zygote; when one of the optional preloads (after torch, triton and numpy)
        started a thread (some do where a GPU driver is present), again without that one, as
        often as that happens: fewer preloads cost a worker seconds, no zygote costs it the
        whole import."""
        zygote = Zygote(python, env, names)
        zygote.start()
        culprit = zygote.info.get("threaded_by")
        while not zygote.alive and culprit in names[len(BASE_PRELOAD):]:
            _log.info("zygote preload %s starts a thread: preloading less", culprit)
            names = tuple(name for name in names if name != culprit)
            zygote = Zygote(python, env, names)
            zygote.start()
            culprit = zygote.info.get("threaded_by")
        return zygote

    def prestart(self, envs: dict[str, dict]) -> list[threading.Thread]:
        """Start the zygotes of ``envs``' devices (device -> the base environment its runs
        pass, ``worker_processes.worker_env``) now, each in a thread of its own: a run's first
        workers then find them started, all kinds at once, instead of starting one kind after
        another as each is first asked for (a validation's CPU estimate, then its GPU probe)."""
        if not self.enabled():
            return []
        threads = [threading.Thread(target=self.get, args=(device, env), daemon=True,
                                    name=f"kernelmill-zygote-{device}")
                   for device, env in envs.items()]
        for thread in threads:
            thread.start()
        return threads

    def address_space(self, device: str, base_env: dict) -> int | None:
        """Bytes of address space a run forked for ``device`` starts with (its zygote's
        ``VmSize``: torch, triton and numpy mapped); None when no zygote serves it."""
        zygote = self.get(device, base_env)
        pid = zygote.info.get("pid") if zygote is not None else None
        try:
            with open(f"/proc/{int(pid)}/status") as handle:
                for line in handle:
                    if line.startswith("VmSize:"):
                        return int(line.split()[1]) * 1024
        except (OSError, TypeError, ValueError, IndexError):
            pass
        return None

    def spawn(self, device: str, base_env: dict, env: dict, cwd: str,
              fds: list[int]) -> WarmProcess | None:
        zygote = self.get(device, base_env)
        return zygote.spawn(env, cwd, fds) if zygote is not None else None

    def close(self) -> None:
        with self._lock:
            zygotes, self._zygotes = list(self._zygotes.values()), {}
        for zygote in zygotes:
            zygote.stop()


def _log_file():
    """Where a zygote's stderr goes: ``KERNELMILL_ZYGOTE_LOG`` (its stack on SIGUSR1 lands
    there), else nowhere."""
    path = os.environ.get("KERNELMILL_ZYGOTE_LOG")
    return open(path, "ab") if path else subprocess.DEVNULL


BASE_PRELOAD = ("torch", "triton", "numpy")

# Children a CUDA zygote keeps forked ahead per device setting, each with its CUDA context made
# (``zygote_worker``'s spares), by default: none until measured. A host's driver makes contexts
# one at a time, 6-7.5 per second (H200), and a grade's workers waited for theirs 4.5 s at the
# median with 16 grades at once. With 4 spares their start fell to 0.1-2.6 s, but whole runs
# were slower: each spare then also held the descriptors of the run whose fork made it, so that
# run's parent saw its end of file only when the spare's own run ended. Spares now close them.
# With that fixed, single grades at 16 slots (KernelBench and Triton answers, 8 copies, H200)
# graded 28.2-30.2 per minute with 4 spares against 30.5-34.1 without: the candidate's wait for
# its context moved into its start, and the rate is set elsewhere (grades reaching their
# windows), so none is still the default.
CUDA_SPARES = 0


def spares(kind: str) -> int:
    """Spares a zygote of ``kind`` keeps per device setting: ``KERNELMILL_SPARES`` where set,
    else ``CUDA_SPARES`` on CUDA and none on CPU (a CPU worker has no context to make)."""
    value = os.environ.get("KERNELMILL_SPARES")
    if value is not None and value.strip().isdigit():
        return int(value)
    return CUDA_SPARES if kind == "cuda" else 0


def preload() -> tuple[str, ...]:
    names = os.environ.get("KERNELMILL_WARM_PRELOAD")
    if names is not None:
        return tuple(n for n in names.split(",") if n)
    # torch._dynamo (with Inductor's config) and the flop counter are imported lazily by the
    # meta estimate and the probe's trace: 1-4 s per worker when each imports them. (Inductor's
    # compile_fx is not: on a GPU machine its import starts a thread, measured on an H100.)
    # Triton's interpreter and gluon are imported by every candidate worker, and compiled from
    # source there (no writable bytecode cache in the sandbox): 0.27 CPU-s of each grade,
    # sampled with py-spy on an H100 host. So is torch.utils.cpp_extension (0.54-0.79 CPU-s),
    # which every candidate's loaders wrap and the grader watches: its import asks whether CUDA
    # is available, which on a GPU host started the driver's threads, so the zygote imports it
    # with that question answered from the device files (``zygote_worker._import_without_cuda``).
    # The grader's worker last: its ``zygote_warm`` lists the modules loaded by then, which its
    # candidate runs watch (run by the zygote, ``zygote_worker._warm_preloads``).
    return (*BASE_PRELOAD, "kernelmill.validate.harness_worker", "kernelmill.validate.sandbox",
            "torch.utils.flop_counter", "torch._dynamo", "triton.runtime.interpreter",
            "triton.experimental.gluon", "torch.utils.cpp_extension", "kernelmill.grade.worker")


ZYGOTES = ZygotePool()
