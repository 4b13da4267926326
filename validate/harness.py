"""The execution harness: run one function in a fresh, isolated worker process.

``run_in_worker("pkg.module:function", payload, timeout_s=..., device=...)`` starts a new Python
process (never forked from this one: a fresh interpreter, or by default a fork of a warm zygote
that only imported torch, triton and numpy, see ``zygote.py``) in its own session and process
group, in an empty temporary folder, hands it the payload over a pipe and waits for the dict the
function returns. Whatever
happens inside (exception, segfault, ``os._exit``, infinite loop, out of memory, a child process
left sleeping) the caller gets a ``WorkerResult``: either ``ok`` with ``value``, or an ``error``
``{"stage", "message"}`` naming the stage the worker had marked last
(``kernelmill.validate.harness_worker.mark_stage``).

Trust: results come back over a private pipe whose every frame carries an HMAC under a key made
for this run, and are decoded with ``torch.load(weights_only=True)`` (no arbitrary unpickling in
the trusted process). Frames that fail the check, or anything after the final frame, mark the
result ``tampered``. stdout/stderr are kept only as text tails for error messages. After the
worker ends, its whole process group is killed, and any process still carrying this run's token
in its environment (a child that called ``setsid``) is killed too.

Confinement: where the kernel has Landlock (``sandbox.py``), the worker may write only inside
its temporary folder and the folders the caller names in ``writable``, and may not signal or
ptrace processes outside its sandbox; ``WorkerResult.sandbox`` says which Landlock ABI applied.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import io
import json
import mmap
import os
import pickle
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .harness_worker import (
    HEADER,
    KIND_ERROR,
    KIND_HELLO,
    KIND_REPORT,
    KIND_RESULT,
    KIND_STAGE,
    MAC_SIZE,
    TensorSlot,
    mark_stage,
)
from .reaper import WATCHER
from .zygote_worker import descendants, pgid_of

TOKEN_VAR = "KERNELMILL_RUN_TOKEN"
MAX_FRAME = 4 << 30  # 4 GiB: larger claims are treated as a broken channel
# Frames other than the result (hello, stage marks, reports, the error) are small: each at most
# SMALL_FRAME bytes and SMALL_TOTAL together per run, or the channel is broken (``tampered``).
# The frames are signed in the worker's process, where a submission's code runs too: a signed
# frame's size is no promise (a submission can send huge stage names to grow the parent).
SMALL_FRAME = 1 << 20
SMALL_TOTAL = 64 << 20
STAGE_NAME_CHARS = 200
# Variables a worker must not see: credentials for hubs and LLM endpoints.
_SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "API_KEY", "ACCESS_KEY", "CREDENTIAL")
_DEFAULT_CPU_ADDRESS_SPACE = 16 << 30
_DEFAULT_FILE_SIZE = 4 << 30  # no single file (stdout log included) may grow past this


@dataclass
class WorkerResult:
    """What came back from one worker run."""

    ok: bool
    value: dict | None = None
    error: dict | None = None  # {"stage": str, "message": str}
    wall_s: float = 0.0
    stages: list[tuple[str, float]] = field(default_factory=list)  # (stage, parent clock, s)
    # ``harness_worker.report`` messages of a run without a control pipe, in order: facts the
    # worker sent the moment it saw them, before any later code of the run could edit them
    reports: list[dict] = field(default_factory=list)
    returncode: int | None = None
    timed_out: bool = False
    tampered: bool = False  # a frame failed authentication or arrived after the final one
    leaked_processes: int = 0  # processes of this run still alive after the worker ended
    sandbox: int | None = None  # Landlock ABI the worker confined itself with; None: unconfined
    warm: bool = False  # forked from a zygote that had imported torch (``validate.zygote``)
    cpu_s: float | None = None  # the worker's user + system CPU seconds (warm workers)
    stdout_tail: str = ""
    stderr_tail: str = ""

    def stage_time(self, name: str) -> float | None:
        """Parent-clock arrival time (s since start) of the first mark of ``name``."""
        for stage, at in self.stages:
            if stage == name:
                return at
        return None


class Control:
    """A parent's line to a running worker: ``send`` writes a command line the worker reads with
    ``harness_worker.receive``; ``next_report`` waits for what it sends with
    ``harness_worker.report``, stamped with the parent's monotonic clock. Pass one to
    ``run_in_worker(control=...)`` (which blocks: run it in a thread)."""

    def __init__(self):
        self._fd: int | None = None
        self._cond = threading.Condition()
        self.reports: list[tuple[float, dict]] = []
        self._next = 0
        self.ended = False
        self.waited_s = 0.0  # time the parent kept the worker waiting (``extend``)
        self._late: _LateFile | None = None  # the run's late data (``release_late``)
        self.late_released: list[int] = []  # the parts written, in the order asked
        self.pid: int | None = None  # the worker's, which leads its own process group
        self.token = ""  # the run's, in the environment of every process it started
        self.strays: list[int] = []  # its processes outside that group (``find_strays``)
        self.paused = False

    def find_strays(self) -> list[int]:
        """The worker's processes that left its process group (a child that called ``setsid``:
        ``killpg`` does not reach it), by the run's token and by descent; from here on
        ``pause`` and ``resume`` signal each of them too. Looked for once, as a window begins to
        time: no process of a candidate may start after its first call."""
        if self.pid is None or self.ended:
            return []
        found = set(_proc_with_token(self.token)) if self.token else set()
        found.update(descendants(self.pid))
        with self._cond:
            self.strays = sorted(p for p in found if pgid_of(p) not in (None, self.pid))
        return self.strays

    def pause(self) -> None:
        """Stop every process of the worker's group (SIGSTOP): outside its turn in a timing
        window nothing of it runs, not a thread it left spinning to slow another member's turn
        (T-15) nor a runtime's idle spin. A worker waiting for its next command
        loses nothing; ``resume`` (SIGCONT) goes on where it stood."""
        if not self.paused:
            self._signal(signal.SIGSTOP, True)

    def resume(self) -> None:
        if self.paused:
            self._signal(signal.SIGCONT, False)

    def _signal(self, sig: int, paused: bool) -> None:
        with self._cond:
            if self.pid is None or (self.ended and not self.paused):
                return
            try:
                os.killpg(self.pid, sig)
            except (ProcessLookupError, PermissionError):
                return
            for pid in self.strays:
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            self.paused = paused

    def extend(self, seconds: float) -> None:
        """Add ``seconds`` to the worker's time limit: time it spent waiting for the GPU on
        the parent's account (a lock held by other grades) is not the submission's."""
        with self._cond:
            self.waited_s += max(0.0, float(seconds))

    def _attach(self, fd: int) -> None:
        self._fd = fd

    def release_late(self, index: int) -> None:
        """Write part ``index`` of the run's late data (``run_in_worker(late=...)``) where the
        worker can read it: the worker asked for it (``harness_worker.late_payload``)."""
        with self._cond:
            late = self._late
            self.late_released.append(index)
        if late is not None:
            late.write(index)

    def _deliver(self, value: dict) -> None:
        with self._cond:
            self.reports.append((time.monotonic(), value))
            self._cond.notify_all()

    def _end(self) -> None:
        self.resume()  # a process group left stopped would outlive its run
        with self._cond:
            self.ended = True
            if self._fd is not None:
                try:
                    os.close(self._fd)
                except OSError:
                    pass
                self._fd = None
            self._cond.notify_all()

    def send(self, line: str) -> bool:
        """Write one command line; False when the worker is gone."""
        with self._cond:
            fd = self._fd
        if fd is None:
            return False
        data = (line.rstrip("\n") + "\n").encode()
        try:
            while data:
                data = data[os.write(fd, data):]
        except OSError:
            return False
        return True

    def pending(self) -> bool:
        """A report is waiting to be taken: the worker said something and waits for an answer."""
        with self._cond:
            return self._next < len(self.reports)

    def wait_report(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for a report not yet taken (True) or the worker's end."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._next >= len(self.reports) and not self.ended:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return self._next < len(self.reports)

    def next_report(self, timeout: float | None = None) -> tuple[float, dict] | None:
        """The next report not yet taken, or None when the worker ended or ``timeout`` passed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._next >= len(self.reports):
                if self.ended:
                    return None
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._cond.wait(remaining)
            self._next += 1
            return self.reports[self._next - 1]


def worker_env(device: str, env: dict | None = None, token: str = "", tmp: str = "") -> dict:
    """The environment of a worker: ours minus credentials, plus device pinning and the token."""
    base = {k: v for k, v in os.environ.items()
            if not any(marker in k.upper() for marker in _SECRET_MARKERS)}
    base.update({"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "PYTHONNOUSERSITE": "1"})
    if tmp:
        base["TMPDIR"] = tmp
        base["XDG_CACHE_HOME"] = os.path.join(tmp, "cache")
        base["TRITON_CACHE_DIR"] = os.path.join(tmp, "triton")
        base["CUDA_CACHE_PATH"] = os.path.join(tmp, "nv")
    if device.startswith("cpu"):
        base["TRITON_INTERPRET"] = "1"
        base["CUDA_VISIBLE_DEVICES"] = ""
    else:
        base.pop("TRITON_INTERPRET", None)
    if env:
        base.update({k: str(v) for k, v in env.items()})
    if token:
        base[TOKEN_VAR] = token
    return base


def _tail(handle, limit: int = 4000) -> str:
    try:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        handle.seek(max(0, size - limit))
        return handle.read().decode("utf-8", errors="replace")
    except (OSError, ValueError):
        return ""


class _Reader(threading.Thread):
    """Reads and authenticates frames; stamps each with the parent's clock."""

    def __init__(self, fd: int, key: bytes, start: float, control: Control | None = None):
        super().__init__(daemon=True)
        self.fd, self.key, self.start_time, self.control = fd, key, start, control
        self.stages: list[tuple[str, float]] = []
        self.result: bytes | _FrameFile | None = None
        self.error: dict | None = None
        self.hello = False
        self.sandbox: int | None = None
        self.tampered = False
        self.final_at: float | None = None
        self.small_bytes = 0  # bytes of frames other than the result so far (SMALL_TOTAL)
        self.reports: list[dict] = []  # reports of a run without a control pipe, as they came

    def _read_exact(self, n: int, file: bool = False):
        """``n`` bytes read straight into one buffer (None at end of stream). The buffer is a
        mapping: its pages take memory only as bytes arrive, so a forged header that claims
        gigabytes costs nothing until they are sent. With ``file`` (a result's data) the
        buffer is a ``_FrameFile``, which ``_decode`` maps instead of copying."""
        if n == 0:
            return b""
        holder = _FrameFile(n) if file and hasattr(os, "memfd_create") else None
        buffer = holder.map if holder is not None else mmap.mmap(-1, n)
        done = holder.splice_from(self.fd) if holder is not None else 0
        with memoryview(buffer) as view:
            while done < n:
                got = os.readv(self.fd, [view[done:done + (1 << 22)]])
                if not got:
                    break
                done += got
        if done < n:
            if holder is not None:
                holder.close()
            return None
        return holder if holder is not None else buffer

    def run(self) -> None:
        try:
            self._loop()
        finally:
            os.close(self.fd)

    def _loop(self) -> None:
        final = False
        while True:
            header = self._read_exact(HEADER.size + MAC_SIZE)
            if header is None:
                return
            (length,) = HEADER.unpack(header[:HEADER.size])
            if length == 0 or length > MAX_FRAME:
                self.tampered = True
                return
            kind = self._read_exact(1)
            kind = bytes(kind[:1]) if kind is not None else None
            if kind != KIND_RESULT:
                self.small_bytes += length
                if length - 1 > SMALL_FRAME or self.small_bytes > SMALL_TOTAL:
                    self.tampered = True
                    return
            # a result's data goes to a file-backed buffer; the rest is small
            body = self._read_exact(length - 1, file=kind == KIND_RESULT)
            if body is None:
                self.tampered = True  # a truncated frame is not something the harness writes
                return
            mac = hmac.new(self.key, kind, hashlib.sha256)
            mac.update(body.map if isinstance(body, _FrameFile) else body)
            if not hmac.compare_digest(mac.digest(), header[HEADER.size:]) or final:
                if isinstance(body, _FrameFile):
                    body.close()
                self.tampered = True
                return
            data = body if kind == KIND_RESULT else bytes(body)
            now = time.monotonic() - self.start_time
            if kind == KIND_HELLO:
                self.hello = True
                self.sandbox = json.loads(data).get("sandbox")
            elif kind == KIND_STAGE:
                self.stages.append((str(json.loads(data)["stage"])[:STAGE_NAME_CHARS], now))
            elif kind == KIND_RESULT:
                self.result, final, self.final_at = data, True, now
            elif kind == KIND_ERROR:
                self.error, final, self.final_at = json.loads(data), True, now
            elif kind == KIND_REPORT:
                try:
                    value = json.loads(data)
                except ValueError:
                    value = None
                if not isinstance(value, dict):
                    self.tampered = True
                    return
                if self.control is not None:
                    self.control._deliver(value)
                else:  # kept: what the worker said when it saw it, whatever it reports later
                    self.reports.append(value)
            else:
                self.tampered = True
                return


def _proc_with_token(token: str) -> list[int]:
    needle = f"{TOKEN_VAR}={token}".encode()
    me, uid, found = os.getpid(), os.getuid(), []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if needle in handle.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def kill_run(pgid: int, token: str) -> int:
    """Kill the worker's process group and every process carrying the run token.

    Returns how many had escaped the group (a new session or group: ``setsid``, ``setpgid``)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    escaped: set[int] = set()
    for _ in range(5):
        live = []
        for pid in _proc_with_token(token):
            try:
                with open(f"/proc/{pid}/stat", "rb") as handle:
                    fields = handle.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if fields[0] in (b"Z", b"X"):
                continue  # already dead, waiting to be reaped
            live.append(pid)
            if int(fields[2]) != pgid:
                escaped.add(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if not live:
            break
        time.sleep(0.05)
    return len(escaped)


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (out of memory?)" if -code == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exited with status {code} before reporting a result"


def _last_error_line(text: str) -> str:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line and not line.startswith(("File ", "Current thread", "Thread ", "Fatal Python")):
            return line[:300]
    return ""


def run_in_worker(target: str, payload: dict, *, timeout_s: float, device: str,
                  env: dict | None = None, limits: dict | None = None,
                  writable: list[str] | None = None, sandbox: bool = True,
                  python: str | None = None, control: Control | None = None,
                  warm: bool = True, late: list | None = None) -> WorkerResult:
    """Run ``target`` ("module:function") on ``payload`` in a fresh isolated worker.

    ``device`` "cpu" sets ``TRITON_INTERPRET=1`` and hides GPUs; ``env`` adds variables (e.g. the
    slot's ``CUDA_VISIBLE_DEVICES``). ``limits`` may set ``address_space`` and ``file_size``
    (bytes; RLIMIT_AS defaults to 16 GiB on CPU, none on CUDA where the driver maps large ranges)
    and ``cpu_s`` (RLIMIT_CPU: the worker dies of SIGXCPU past that many CPU seconds).
    With ``sandbox`` (default) the worker may write only in its temporary folder and ``writable``.
    Triton's cache is private to the run unless ``env`` sets ``TRITON_CACHE_DIR``.
    ``control`` opens a second pipe for a parent that drives the worker while it runs.
    ``warm`` forks the worker from a process that has already imported torch (``zygote``),
    unless ``KERNELMILL_WARM=0``; it falls back to a fresh interpreter when none can serve.
    ``late`` (with ``control``) is a list of parts the worker may not hold before it uses them
    (inputs a submission must not have seen before it is called on them): their memory file is
    passed empty and part ``i`` written when the worker asks (``harness_worker.late_payload``).
    """
    limits = dict(limits or {})
    limits.setdefault("file_size", _DEFAULT_FILE_SIZE)
    if device.startswith("cpu"):
        limits.setdefault("address_space", _DEFAULT_CPU_ADDRESS_SPACE)
    key, token = secrets.token_bytes(32), secrets.token_hex(12)
    tmp = tempfile.mkdtemp(prefix="kernelmill-run-")
    workdir = os.path.join(tmp, "cwd")
    os.mkdir(workdir)
    allowed = [tmp, *(os.path.abspath(p) for p in writable or ())] if sandbox else None
    payload, tensor_fd = _tensor_file(payload)
    late_file = _LateFile(late) if late and control is not None and \
        hasattr(os, "memfd_create") else None
    late_fd = late_file.fd if late_file is not None else None
    r_ctl, w_ctl = os.pipe() if control is not None else (None, None)
    extra = {name: fd for name, fd in (("control", r_ctl), ("tensors", tensor_fd),
                                       ("late", late_fd))
             if fd is not None}  # the worker's descriptors after its job's two pipes
    job = pickle.dumps({"target": target, "payload": payload, "key": key, "limits": limits,
                        "writable": allowed, "fds": list(extra),
                        "late": late_file.table if late_file is not None else None},
                       protocol=pickle.HIGHEST_PROTOCOL)
    r_in, w_in = os.pipe()
    r_out, w_out = os.pipe()
    for fd in (w_in, w_out):
        _widen_pipe(fd)
    stdout = tempfile.TemporaryFile(dir=tmp)
    stderr = tempfile.TemporaryFile(dir=tmp)
    code = ("import sys; from kernelmill.validate.harness_worker import main; "
            "main(sys.argv[1:])")
    start = time.monotonic()
    child_env = worker_env(device, env, token, tmp)
    proc = None
    if warm and python in (None, sys.executable):
        from .zygote import ZYGOTES

        proc = ZYGOTES.spawn(device, worker_env(device), child_env, workdir,
                             [stdout.fileno(), stderr.fileno(), r_in, w_out, *extra.values()])
    try:
        if proc is None:
            proc = subprocess.Popen(
                [python or sys.executable, "-c", code, str(r_in), str(w_out),
                 *map(str, extra.values())],
                cwd=workdir, env=child_env, stdin=subprocess.DEVNULL, stdout=stdout,
                stderr=stderr, start_new_session=True, pass_fds=(r_in, w_out, *extra.values()))
    except OSError as exc:
        if late_file is not None:
            late_file.close()
        for fd in (r_in, w_in, r_out, w_out, r_ctl, w_ctl, tensor_fd, late_fd):
            if fd is not None:
                os.close(fd)
        shutil.rmtree(tmp, ignore_errors=True)
        if control is not None:
            control._end()
        return WorkerResult(False, error={"stage": "spawn", "message": str(exc)})
    WATCHER.started(token, proc.pid)  # killed with their children should this process die
    os.close(r_in)
    os.close(w_out)
    if tensor_fd is not None:
        os.close(tensor_fd)
    if late_fd is not None:
        os.close(late_fd)
    if control is not None:
        os.close(r_ctl)
        control.pid = proc.pid  # a new session each (start_new_session; the zygote's setsid)
        control.token = token
        control._attach(w_ctl)
        control._late = late_file
    reader = _Reader(r_out, key, start, control)
    reader.start()

    def feed() -> None:
        try:
            view = memoryview(job)
            while view:
                view = view[os.write(w_in, view[:1 << 20]):]
        except OSError:
            pass  # the worker died before reading its job; its exit status tells why
        finally:
            os.close(w_in)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    timed_out = False
    while True:
        waited = control.waited_s if control is not None else 0.0
        try:
            proc.wait(timeout=max(0.0, start + timeout_s + waited - time.monotonic()))
            break
        except subprocess.TimeoutExpired:
            if control is None or control.waited_s == waited:
                timed_out = True
                break
    wall = time.monotonic() - start
    if late_file is not None:
        late_file.close()
    if isinstance(proc, subprocess.Popen):
        leaked = kill_run(proc.pid, token)
        proc.wait()
    else:  # a warm worker: its zygote kills the group and every escaped descendant
        proc.kill()
        proc.wait()
        leaked = proc.leaked
    WATCHER.ended(token)
    reader.join(timeout=10)
    feeder.join(timeout=1)
    if control is not None:
        control._end()
    result = WorkerResult(ok=False, wall_s=wall, stages=list(reader.stages),
                          reports=list(reader.reports),
                          returncode=proc.returncode, timed_out=timed_out,
                          tampered=reader.tampered, leaked_processes=leaked,
                          sandbox=reader.sandbox, warm=not isinstance(proc, subprocess.Popen),
                          cpu_s=getattr(proc, "cpu_s", None),
                          stdout_tail=_tail(stdout), stderr_tail=_tail(stderr))
    stdout.close()
    stderr.close()
    shutil.rmtree(tmp, ignore_errors=True)
    last_stage = result.stages[-1][0] if result.stages else ("startup" if not reader.hello
                                                             else "import target")
    if result.tampered:
        result.error = {"stage": last_stage, "message": "result channel tampered with "
                        "(unauthenticated or extra frames)"}
    elif timed_out:
        waited = f" (plus {control.waited_s:.0f}s waiting for the GPU)" \
            if control is not None and control.waited_s >= 1 else ""
        # ``timed_out`` is the harness's own word: a worker's error frame carries only a stage
        # and a message, whose text the code under test chooses
        result.error = {"stage": last_stage, "timed_out": True,
                        "message": f"timed out after {timeout_s:g}s{waited}"}
    elif reader.error is not None:
        result.error = {"stage": str(reader.error.get("stage", last_stage)),
                        "message": str(reader.error.get("message", ""))}
    elif reader.result is not None and proc.returncode != 0:
        # The harness exits 0 right after its result frame; a result followed by a crash was
        # sent by someone else.
        result.tampered = True
        result.error = {"stage": last_stage, "message": "a result frame, then "
                        f"{_describe_exit(proc.returncode)}: channel not trusted"}
    elif reader.result is not None:
        try:
            result.value = _decode(reader.result)
            result.ok = True
        except Exception as exc:  # noqa: BLE001 — an undecodable result is a failed run
            result.error = {"stage": last_stage, "message": f"result not decodable: {exc}"}
    else:
        detail = _last_error_line(result.stderr_tail)
        message = _describe_exit(proc.returncode)
        result.error = {"stage": last_stage,
                        "message": f"{message}: {detail}" if detail else message}
    return result


SHARED_TENSOR_BYTES = 1 << 16  # smaller tensors travel in the job's pickle
_SEALS = ("F_SEAL_SEAL", "F_SEAL_SHRINK", "F_SEAL_GROW", "F_SEAL_WRITE")


def _slotted(value, takes) -> tuple[Any, list, int]:
    """``value`` with each tensor that ``takes`` returns a tensor for (the tensor to store)
    replaced by a ``TensorSlot`` at a 64-byte-aligned offset (one object, one slot: the worker
    gets one tensor too); also the (offset, tensor) chunks and their end."""
    chunks: list[tuple[int, Any]] = []
    slots: dict[int, TensorSlot] = {}
    end = 0

    def walk(item):
        nonlocal end
        if id(item) in slots:
            return slots[id(item)]
        stored = takes(item)
        if stored is not None:
            offset = -(-end // 64) * 64
            nbytes = stored.numel() * stored.element_size()
            chunks.append((offset, stored))
            end = offset + nbytes
            slots[id(item)] = TensorSlot((offset, nbytes, str(stored.dtype)[6:],
                                          tuple(stored.shape)))
            return slots[id(item)]
        if type(item) in (dict, list, tuple):
            values = [walk(v) for v in (item.values() if type(item) is dict else item)]
            return dict(zip(item, values)) if type(item) is dict else type(item)(values)
        return item

    return walk(value), chunks, end


def _tensor_file(payload):
    """``payload`` with its large CPU tensors replaced by ``TensorSlot``s, and a sealed memory
    file holding their bytes (its descriptor, or None when there are none or no ``memfd``).

    Pickling a tensor copies it three times while holding the interpreter lock: a 640 MB
    payload took 3.5 s and stalled the grader's other threads (window clocks among them) 0.2 s
    at a time, and the worker spent 2 s unpickling it. Writing it here takes 0.2 s with the
    lock released, and the worker maps it. The file is sealed before any worker sees it:
    nobody can change it, so a worker's copy-on-write mapping is all it can touch. A tensor
    that is not contiguous keeps its strides through the pickle instead."""
    import torch

    if not hasattr(os, "memfd_create"):
        return payload, None

    def shareable(v) -> torch.Tensor | None:
        return v if (type(v) is torch.Tensor and v.device.type == "cpu"
                     and v.layout == torch.strided and not v.requires_grad and not v.is_quantized
                     and not v.is_conj() and not v.is_neg() and v.is_contiguous()
                     and v.numel() * v.element_size() >= SHARED_TENSOR_BYTES) else None

    moved, chunks, end = _slotted(payload, shareable)
    if not chunks:
        return payload, None
    fd = os.memfd_create("kernelmill-payload", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, end)
        for offset, tensor in chunks:
            with memoryview(tensor.reshape(-1).view(torch.uint8).numpy()) as view:
                done = 0
                while done < len(view):
                    done += os.pwrite(fd, view[done:], offset + done)
        seals = 0
        for name in _SEALS:
            seals |= getattr(fcntl, name, 0)
        fcntl.fcntl(fd, getattr(fcntl, "F_ADD_SEALS", 1033), seals)
    except BaseException:
        os.close(fd)
        raise
    return moved, fd


class _LateFile:
    """Data a worker may not hold before it uses it, in parts, in a memory file passed to the
    worker empty: part ``i`` is written when the worker asks for it (``write``).

    Anything in a worker's memory is within its submission's reach (native code reads any
    address; ``/proc/self/map_files`` maps any memory file again): a submission could read the
    inputs of the unseen-input check from the job's tensor file at import and have every answer
    ready (T-14). So each unseen input arrives just before its own call. The file is sealed against
    resizing (the worker cannot take its pages away). A part: 8 bytes giving its pickle's
    length, the pickle (every tensor a ``TensorSlot``, offsets from the part's start), the
    tensors' bytes. ``table``: each part's (offset, size), for the worker."""

    def __init__(self, parts: list):
        import torch

        self.table: list[tuple[int, int]] = []
        self._parts: list[tuple[bytes, list]] = []
        end = 0
        for part in parts:
            moved, chunks, size = _slotted(
                part, lambda v: v.detach().to("cpu").contiguous() if type(v) is torch.Tensor
                else None)
            structure = pickle.dumps(moved, protocol=pickle.HIGHEST_PROTOCOL)
            head = -(-(8 + len(structure)) // 64) * 64
            self._parts.append((len(structure).to_bytes(8, "little") + structure,
                                [(head + offset, tensor) for offset, tensor in chunks]))
            self.table.append((end, head + size))
            end += head + size
        self.fd = os.memfd_create("kernelmill-late", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self.fd, max(end, 1))
            # its pages allocated now, before any window: written on request, inside a timing
            # window, they cost a copy only (a first write of 128 MB took 61 ms, 15 ms after)
            with contextlib.suppress(OSError, AttributeError):
                os.posix_fallocate(self.fd, 0, max(end, 1))
            fcntl.fcntl(self.fd, getattr(fcntl, "F_ADD_SEALS", 1033),
                        getattr(fcntl, "F_SEAL_SHRINK", 2) | getattr(fcntl, "F_SEAL_GROW", 4)
                        | getattr(fcntl, "F_SEAL_SEAL", 1))
            self._writer: int | None = os.dup(self.fd)  # ours: ``fd`` is closed once passed
        except BaseException:
            os.close(self.fd)
            raise
        self._lock = threading.Lock()

    def write(self, index: int) -> None:
        import torch

        with self._lock:
            if self._writer is None or not 0 <= index < len(self._parts):
                return
            base = self.table[index][0]
            head, chunks = self._parts[index]
            self._parts[index] = (b"", [])  # written once
            os.pwrite(self._writer, head, base)
            for offset, tensor in chunks:
                with memoryview(tensor.reshape(-1).view(torch.uint8).numpy()) as view:
                    done = 0
                    while done < len(view):
                        done += os.pwrite(self._writer, view[done:], base + offset + done)

    def close(self) -> None:
        with self._lock:
            if self._writer is not None:
                os.close(self._writer)
                self._writer = None


def _widen_pipe(fd: int, size: int = 1 << 20) -> None:
    """A 1 MiB pipe (Linux's default ceiling for users) instead of 64 KiB: gigabyte results
    and jobs cross in fewer wake-ups (600 MB: 1.0 s -> 0.6 s on a 2-core machine)."""
    try:
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), size)
    except OSError:
        pass  # over the machine's pipe-max-size, or not Linux: the default works


class _FrameFile:
    """A result frame's data in an anonymous memory file (``memfd``), mapped for the reader to
    fill. ``torch.load(mmap=True)`` maps its tensors from it instead of copying them: copying
    holds the interpreter lock (a 320 MB result: 1 s in which no other thread of the grader
    ran, and on an H100 the parent's clock read an honest group member 2-3.6x slow)."""

    def __init__(self, n: int):
        self.fd = os.memfd_create("kernelmill-result", getattr(os, "MFD_CLOEXEC", 1))
        os.ftruncate(self.fd, n)
        self.map = mmap.mmap(self.fd, n)

    def __len__(self) -> int:
        return len(self.map)

    def splice_from(self, pipe: int) -> int:
        """Fill the file from ``pipe`` in the kernel (``splice``), as far as it goes; returns
        the bytes filled (the caller reads the rest, if any, through the mapping). Half the
        reader's CPU time of filling the mapping by ``readv`` (256 MB: 130 ms against 250 on a
        2-core host): no page faults on fresh pages of the mapping."""
        n, done = len(self.map), 0
        splice = getattr(os, "splice", None)
        while splice is not None and done < n:
            try:
                got = splice(pipe, self.fd, n - done, offset_dst=done)
            except OSError:  # not a pipe, or a kernel without it: readv does the rest
                break
            if not got:
                break
            done += got
        return done

    def load(self):
        import torch

        try:
            return torch.load(f"/proc/self/fd/{self.fd}", weights_only=True,
                              map_location="cpu", mmap=True)
        finally:
            self.close()

    def __del__(self):
        self.close()

    def close(self) -> None:
        if getattr(self, "fd", None) is not None:
            self.map.close()
            os.close(self.fd)
            self.fd = None


def _decode(data) -> dict:
    import torch

    if isinstance(data, _FrameFile):
        value = data.load()
    else:
        value = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    if not isinstance(value, dict):
        raise TypeError(f"expected a dict, got {type(value).__name__}")
    return value


def echo(payload: dict) -> dict:
    """A trivial target (tests, smoke checks): returns the payload with the worker's pid."""

    mark_stage("echo")
    return {**payload, "pid": os.getpid(), "cwd": os.getcwd(),
            "interpret": os.environ.get("TRITON_INTERPRET")}


def run_source(payload: dict) -> dict:
    """A target that executes ``payload["source"]`` and returns what its ``main()`` returns
    (``main(payload)`` when it takes an argument).

    For smoke checks and the harness's own tests (crashers, hangs, forgers)."""
    namespace: dict[str, Any] = {"__name__": "kernelmill_source"}
    exec(compile(payload["source"], "<source>", "exec"), namespace)
    main = namespace["main"]
    return main(payload) if main.__code__.co_argcount else main()
