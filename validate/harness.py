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
Nor may it read other runs' temporary folders or the files other kernelmill processes ``flock``
(``hidden_folders``).
"""
from __future__ import annotations

import functools
import os
import pickle
import resource
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from .deferred_payload import DeferredPayload, payload_part, send_payload

# Names of the worker's side, the result channel, the control pipe, the payload files and the
# worker's processes that callers import from here (moved out of this module; re-exported).
from .harness_worker import (
    HEADER,  # noqa: F401
    KIND_ERROR,  # noqa: F401
    KIND_HELLO,  # noqa: F401
    KIND_REPORT,  # noqa: F401
    KIND_RESULT,  # noqa: F401
    KIND_STAGE,  # noqa: F401
    MAC_SIZE,  # noqa: F401
    TensorSlot,  # noqa: F401
    mark_stage,
)
from .payload_files import (
    _SEALS,  # noqa: F401
    SHARED_TENSOR_BYTES,  # noqa: F401
    LatePart,  # noqa: F401
    _LateFile,
    _tensor_file,
    attach_parts,
    receive_parts,
)
from .reaper import WATCHER
from .result_channel import (
    MAX_FRAME,  # noqa: F401
    SMALL_FRAME,  # noqa: F401
    SMALL_TOTAL,  # noqa: F401
    STAGE_NAME_CHARS,  # noqa: F401
    _decode,
    _FrameFile,  # noqa: F401
    _Reader,
    _widen_pipe,
    undecodable,
)
from .sandbox import abi_version as landlock_abi
from .tensor_slots import SealedFile, SlotError, attach_slots, has_slots
from .worker_control import Control
from .worker_processes import (
    _SECRET_MARKERS,  # noqa: F401
    TOKEN_VAR,  # noqa: F401
    _proc_with_token,  # noqa: F401
    kill_run,
    worker_env,
)
from .zygote_worker import descendants, pgid_of  # noqa: F401

# A worker's time waiting for the GPU on the parent's account (``Control.extend``) moves its
# limit on by at most this many times the limit itself: a member that holds its own window
# back (the GPU's lock taken by its code, its process stopped) ends all the same. Grades wait
# seconds for windows and points of stepping aside; a 300 s limit credited 300 s more means a
# GPU held by something else for minutes.
WAIT_CREDIT_CAP = 1.0
_DEFAULT_CPU_ADDRESS_SPACE = 16 << 30
WORKER_FILE_BYTES = 4 << 30  # no single file (stdout log included) may grow past this
# Descriptors a worker may hold at most. Descriptors sent over a socket and not yet received
# count against their user's open-file limit, checked against the sender's limit (Linux's
# ``too_many_unix_fds``; root is exempt): a worker that parked its descriptors in sockets it never
# reads would make this process's hand-over of a late part (``payload_files._LateFile``) fail for
# every run of the user. A worker's limit sits below this process's by more than one message's
# descriptors (``SCM_MAX_FD``), so what workers park stays under what this process may send.
WORKER_FILES = 4096
# How long the end of a run waits for its reader thread (a delivery being read is waited for
# whole: it uses the run's files)
READER_JOIN_S = 10
_SCM_MAX_FD = 253


@dataclass
class WorkerResult:
    """What came back from one worker run."""

    ok: bool
    value: dict | None = None
    error: dict | None = None  # {"stage": str, "message": str}
    wall_s: float = 0.0
    stages: list[tuple[str, float]] = field(default_factory=list)  # (stage, parent clock, s)
    # (stage, the worker's CPU seconds at its mark, as it says): the profile's CPU by stage
    stage_cpu: list[tuple[str, float]] = field(default_factory=list)
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
    spare: bool = False  # a warm worker forked ahead, its CUDA context made before its run
    # a trusted run's shown file (``tensor_slots.SealedFile``), held while its tensors may be
    # passed on to another worker as they are
    shown: object = field(default=None, repr=False, compare=False)
    stdout_tail: str = ""
    stderr_tail: str = ""

    def stage_time(self, name: str) -> float | None:
        """Parent-clock arrival time (s since start) of the first mark of ``name``."""
        for stage, at in self.stages:
            if stage == name:
                return at
        return None


def _tail(handle, limit: int = 4000) -> str:
    try:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        handle.seek(max(0, size - limit))
        return handle.read().decode("utf-8", errors="replace")
    except (OSError, ValueError):
        return ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        name = _signal_name(-code)
        hint = " (out of memory?)" if -code == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exited with status {code} before reporting a result"


def _last_error_line(text: str) -> str:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line and not line.startswith(("File ", "Current thread", "Thread ", "Fatal Python")):
            return line[:300]
    return ""


def prestart_workers(devices: list[str]) -> list:
    """Start the warm workers' zygotes of ``devices`` now, all at once (``zygote.ZygotePool.
    prestart``), for the runs ``run_in_worker`` will fork on them; returns their threads."""
    from .zygote import ZYGOTES

    return ZYGOTES.prestart({device: worker_env(device) for device in dict.fromkeys(devices)})


def runs_folder() -> str:
    """The folder of every worker's temporary folder (``kernelmill-runs-<uid>`` in the
    temporary folder): hidden from confined workers (``hidden_folders``), each of which is
    granted its own folder alone, so no run reads what another leaves in its folder while both
    run. Made here for this user alone (mode 0700); one another user made is refused."""
    from .bytecode import _own_folder

    folder = os.path.join(tempfile.gettempdir(), f"kernelmill-runs-{os.getuid()}")
    if not _own_folder(folder):
        raise OSError(f"{folder} is not a folder of this user's alone: remove it, or set TMPDIR")
    return folder


# The folders every validation worker of this host shares (its Inductor and Triton caches,
# its lock files): theirs to write (``worker_budgets._writable``), hidden from every other
# confined worker (``hidden_folders``): a submission's could read the problems' compiled
# Inductor kernels there, or hold a validation lock.
VALIDATION_FOLDERS = ("locks", "cache")


def validation_folder(name: str) -> str:
    """A folder of ``VALIDATION_FOLDERS`` (not made here)."""
    return os.path.join(tempfile.gettempdir(), f"kernelmill-{name}")


def validation_folders() -> list[str]:
    return [validation_folder(name) for name in VALIDATION_FOLDERS]


def hidden_folders(payload) -> list[str]:
    """The folders a confined worker may not read: those of the files kernelmill's processes
    ``flock`` to share the machine. A worker that could open such a file could hold a lock on it
    (``flock`` needs only a descriptor, and a lock held shared keeps every timing window out)
    and stall every grader on that GPU, or make a gone process's memory read as still held
    (T-15). The host's memory ledger (``host_admission.ledger_folder``) and the GPUs'
    (``admission.GPU_LEDGER_VAR``) are hidden from every worker; the GPUs' locks (``gpus.runtime_folder``) from every worker but a run that takes one
    itself, whose payload names it (``payload["lock"]``: a trusted reference or validation
    run). A worker that makes its CUDA context under the lock (``init_lock``) opens it before
    it confines itself. Other runs' temporary folders (``runs_folder``) are hidden as well, and
    validation's shared folders (``VALIDATION_FOLDERS``), which its own workers are granted."""
    from .admission import GPU_LEDGER_VAR
    from .gpus import runtime_folder
    from .host_admission import ledger_folder

    folders = [str(ledger_folder()), runs_folder(), *validation_folders()]
    if os.environ.get(GPU_LEDGER_VAR):  # the GPUs' memory ledgers of a grade's processes
        folders.append(os.environ[GPU_LEDGER_VAR])
    if not (isinstance(payload, dict) and payload.get("lock")):
        folders.append(runtime_folder())
    return folders


def run_in_worker(target: str, payload: dict | DeferredPayload, *, timeout_s: float,
                  device: str,
                  env: dict | None = None, limits: dict | None = None,
                  writable: list[str] | None = None, sandbox: bool = True,
                  python: str | None = None, control: Control | None = None,
                  warm: bool = True, late: list | None = None,
                  early_results: bool = False, on_delivered=None,
                  late_parts: bool = False, init_lock: str | None = None,
                  hidden: list[str] | tuple[str, ...] = ()) -> WorkerResult:
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
    (inputs a submission must not have seen before it is called on them): each is copied into a
    memory file of its own as the run starts, and part ``i``'s file handed to the worker when it
    asks (``payload_files._LateFile``, ``late_read.late_payload``).
    ``early_results`` lets a trusted target (one that runs no submission's code) write result
    tensors into the run's results file as it makes them (``harness_worker.result_slot``).
    ``on_delivered(result)`` (with ``early_results``): such a target may deliver its results
    before its end (``harness_worker.deliver``); they are read then, the run's files sealed, and
    passed to ``on_delivered`` as a ``WorkerResult`` (from the reader's thread) while the worker
    goes on; the run's own result, at its end, is what the target returned after that.
    ``init_lock``: the GPU's lock (``gpu_lock.GpuLock``'s path) a CUDA worker holds shared
    while it makes its CUDA context, before anything else runs (``GpuLock.outside_windows``: it
    waits for a window holding the GPU, not for one waiting), so that no context is made while a
    timing window holds the GPU alone (one made in another process disturbed the window's
    samples). Never pass it while this process holds that lock exclusively: the worker would
    wait for it.
    ``late_parts`` (with ``early_results``): such a target may write parts of its result in
    memory files of their own (``harness_worker.late_part``); the result holds each as a sealed
    ``payload_files.LatePart``, to be handed on as ``late`` data of another run, never copied.
    ``hidden``: folders the confined worker may not read, besides ``hidden_folders``' (a
    grader's caches and other submissions' builds); a folder in ``writable`` beneath one stays
    the worker's.
    ``payload`` may be a ``DeferredPayload``: the worker starts, makes its CUDA context and
    confines itself, then waits for it (and for ``late``, which goes with it: ``give``) before
    it runs ``target``; its time limit does not run from its hello until the payload is given,
    and while it is not given the run does not time out. Its payload may name no GPU lock
    (``hidden_folders``).
    """
    deferred = payload if isinstance(payload, DeferredPayload) else None
    if deferred is not None:
        if late:
            raise ValueError("a deferred payload's late parts come with it (``give``)")
        payload = {}
        deferred.started_at = time.monotonic()
    limits = dict(limits or {})
    limits.setdefault("file_size", WORKER_FILE_BYTES)
    files = worker_files()
    if files is not None:
        limits.setdefault("files", files)
    if device.startswith("cpu"):
        limits.setdefault("address_space", _DEFAULT_CPU_ADDRESS_SPACE)
    key, token = secrets.token_bytes(32), secrets.token_hex(12)
    tmp = tempfile.mkdtemp(prefix="run-", dir=runs_folder())
    workdir = os.path.join(tmp, "cwd")
    os.mkdir(workdir)
    allowed = [tmp, *(os.path.abspath(p) for p in writable or ())] if sandbox else None
    made: list[int] = []  # what the setup opened, closed should it fail before the worker runs
    late_file = parts_in = parts_fd = payload_in = late_pair = None
    try:
        payload, tensor_fd = _tensor_file(payload)
        made.append(tensor_fd)
        late_file = _LateFile(late, ahead=late_ahead(sandbox)) \
            if late and control is not None and hasattr(os, "memfd_create") else None
        late_fd = late_file.fd if late_file is not None else None
        payload_fd = None
        if deferred is not None:  # its payload, and its late parts' socket, come over these
            payload_in, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            payload_fd = theirs.detach()
            made.append(payload_fd)
            if control is not None and hasattr(os, "memfd_create"):
                late_pair, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                late_fd = theirs.detach()
                made.append(late_fd)
        r_ctl, w_ctl = os.pipe() if control is not None else (None, None)
        made += [r_ctl, w_ctl]
        # the worker's large result tensors come back in this file (``tensor_slots``)
        results_fd = os.memfd_create("kernelmill-results",
                                     os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING) \
            if hasattr(os, "memfd_create") else None
        made.append(results_fd)
        # and what a trusted run marks for a candidate to be given as it is (``passed_on``)
        shown_fd = os.memfd_create("kernelmill-shown", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING) \
            if early_results and results_fd is not None else None
        made.append(shown_fd)
        if late_parts and early_results:  # the worker's late parts come over it
            parts_in, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            parts_fd = theirs.detach()
            made.append(parts_fd)
        extra = {name: fd for name, fd in (("control", r_ctl), ("tensors", tensor_fd),
                                           ("late", late_fd), ("results", results_fd),
                                           ("shown", shown_fd), ("parts", parts_fd),
                                           ("payload", payload_fd))
                 if fd is not None}  # the worker's descriptors after its job's two pipes
        job = pickle.dumps({"target": target, "payload": payload, "key": key, "limits": limits,
                            "writable": allowed, "fds": list(extra),
                            "hidden": [*hidden_folders(payload),
                                       *(os.path.abspath(p) for p in hidden)] if sandbox else [],
                            "late": late_file.table if late_file is not None else None,
                            "early_results": bool(early_results),
                            "init_lock": init_lock if device.startswith("cuda") else None,
                            "payload_later": deferred is not None},
                           protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException:
        if late_file is not None:
            late_file.close()
            os.close(late_file.fd)
        for fd in made:
            if fd is not None:
                os.close(fd)
        for sock in (parts_in, payload_in, late_pair):
            if sock is not None:
                sock.close()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    r_in = w_in = r_out = w_out = stdout = stderr = proc = None
    code = ("import sys; from kernelmill.validate.harness_worker import main; "
            "main(sys.argv[1:])")
    start = time.monotonic()
    try:  # whatever fails up to the spawn closes what the run opened (its late parts too)
        r_in, w_in = os.pipe()
        r_out, w_out = os.pipe()
        for fd in (w_in, w_out):
            _widen_pipe(fd)
        stdout = tempfile.TemporaryFile(dir=tmp)
        stderr = tempfile.TemporaryFile(dir=tmp)
        child_env = worker_env(device, env, token, tmp)
        if warm and python in (None, sys.executable):
            from .zygote import ZYGOTES

            proc = ZYGOTES.spawn(device, worker_env(device), child_env, workdir,
                                 [stdout.fileno(), stderr.fileno(), r_in, w_out,
                                  *extra.values()])
        if proc is None:
            proc = subprocess.Popen(
                [python or sys.executable, "-c", code, str(r_in), str(w_out),
                 *map(str, extra.values())],
                cwd=workdir, env=child_env, stdin=subprocess.DEVNULL, stdout=stdout,
                stderr=stderr, start_new_session=True, pass_fds=(r_in, w_out, *extra.values()))
    except BaseException as exc:
        if late_file is not None:
            late_file.close()
        for fd in (r_in, w_in, r_out, w_out, r_ctl, w_ctl, tensor_fd, late_fd, results_fd,
                   shown_fd, parts_fd, payload_fd):
            if fd is not None:
                os.close(fd)
        for sock in (parts_in, payload_in, late_pair):
            if sock is not None:
                sock.close()
        for handle in (stdout, stderr):
            if handle is not None:
                handle.close()
        shutil.rmtree(tmp, ignore_errors=True)
        if control is not None:
            control._end()
        if not isinstance(exc, OSError):
            raise
        return WorkerResult(False, error={"stage": "spawn", "message": str(exc)})
    WATCHER.started(token, proc.pid)  # killed with their children should this process die
    os.close(r_in)
    os.close(w_out)
    if tensor_fd is not None:
        os.close(tensor_fd)
    if late_fd is not None:
        os.close(late_fd)
    if parts_fd is not None:
        os.close(parts_fd)
    if payload_fd is not None:
        os.close(payload_fd)
    if control is not None:
        os.close(r_ctl)
        control.pid = proc.pid  # a new session each (start_new_session; the zygote's setsid)
        control.started_at = start  # the clock its stages are read against (s since then)
        control.token = token
        control._attach(w_ctl)
        control._late = late_file
    shown = SealedFile(shown_fd) if shown_fd is not None else None
    delivered: list[WorkerResult] = []
    parts: dict = {}  # the worker's late parts received, by index (``receive_parts``)

    def with_parts(value):
        """``value`` with its late parts' markers replaced by their sealed files (a run asked
        for parts only)."""
        if parts_in is None:
            return value
        receive_parts(parts_in, parts)
        return attach_parts(value, parts)

    delivering = threading.Lock()  # held while a delivery is read: the end waits for it

    def deliver(data, at: float) -> None:
        """The run's results, delivered before its end (a trusted target's)."""
        with delivering:
            _deliver(data, at)

    def _deliver(data, at: float) -> None:
        reader = reader_ref()  # (the reader holds this callback: a weak reference, no cycle)
        got = WorkerResult(ok=False, wall_s=at, stages=[*reader.start_marks, *reader.stages],
                           stage_cpu=list(reader.stage_cpu), sandbox=reader.sandbox,
                           warm=not isinstance(proc, subprocess.Popen),
                           spare=getattr(proc, "spare", False) is True)
        try:
            value = with_parts(attach_slots(_decode(data), results_fd, shown))
            got.cpu_s = value.pop("_cpu_s", None) if isinstance(value, dict) else None
            got.value, got.ok = value, isinstance(value, dict)
            got.shown = shown if shown is not None and shown.size else None
        except SlotError as exc:
            got.tampered = True
            got.error = {"stage": "deliver", "message": f"result tensors not trusted: {exc}"}
        except Exception as exc:  # noqa: BLE001 — an undecodable delivery is a failed run
            got.error = {"stage": "deliver", "message": undecodable(exc)}
        delivered.append(got)
        try:
            on_delivered(got)
        except Exception:  # noqa: BLE001 — the caller's; the reader goes on
            pass

    reader = _Reader(r_out, key, start, control,
                     on_delivered=deliver if on_delivered is not None and early_results and
                     results_fd is not None else None)
    # ``deliver`` reads the reader through a weak reference: had its closure held the reader,
    # which holds ``deliver``, every delivered run's files (its shown file, its results and
    # parts) would wait for a full cyclic collection, which a busy grader runs rarely (a GPU
    # host's shared memory filled with finished grades' files and the grader was killed)
    reader_ref = weakref.ref(reader)
    reader.start()

    later: list = []  # a deferred payload's late parts, once given (``_LateFile``)
    handing: list = []  # why its hand-over failed, if it did

    def feed() -> None:
        try:
            view = memoryview(job)
            while view:
                view = view[os.write(w_in, view[:1 << 20]):]
        except OSError:
            pass  # the worker died before reading its job; its exit status tells why
        finally:
            os.close(w_in)
        if deferred is not None:
            _hand_over(deferred, payload_in, late_pair, sandbox, control, later, handing)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    timed_out = False

    def credited() -> float:  # a deferred payload's wait is the parent's, not the run's
        return _credited(control, timeout_s) + \
            (deferred.waiting_s(reader.hello_at) if deferred is not None else 0.0)

    while True:
        waited = credited()
        try:
            proc.wait(timeout=max(0.0, start + timeout_s + waited - time.monotonic()))
            break
        except subprocess.TimeoutExpired:
            if credited() == waited and not (deferred is not None and deferred.pending):
                timed_out = True
                break
    wall = time.monotonic() - start
    if deferred is not None:
        deferred.cancel()  # (given already: nothing) the feeder hands nothing over now
    if isinstance(proc, subprocess.Popen):
        leaked = kill_run(proc.pid, token)
        proc.wait()
    else:  # a warm worker: its zygote kills the group and every escaped descendant
        proc.kill()
        proc.wait()
        leaked = proc.leaked
    if deferred is not None:  # the worker gone, a hand-over under way fails at once
        feeder.join(READER_JOIN_S)
        late_file = later[0] if later else None
    if late_file is not None:
        late_file.close()
    WATCHER.ended(token)
    reader.join(timeout=READER_JOIN_S)
    feeder.join(timeout=1)
    with delivering:  # a delivery still being read uses the run's files: closed after it
        pass
    if control is not None:
        control._end()
    result = WorkerResult(ok=False, wall_s=wall, stages=[*reader.start_marks, *reader.stages],
                          stage_cpu=list(reader.stage_cpu), reports=list(reader.reports),
                          returncode=proc.returncode, timed_out=timed_out,
                          tampered=reader.tampered, leaked_processes=leaked,
                          sandbox=reader.sandbox, warm=not isinstance(proc, subprocess.Popen),
                          cpu_s=getattr(proc, "cpu_s", None),
                          spare=getattr(proc, "spare", False) is True,
                          stdout_tail=_tail(stdout), stderr_tail=_tail(stderr))
    stdout.close()
    stderr.close()
    shutil.rmtree(tmp, ignore_errors=True)
    last_stage = reader.stages[-1][0] if reader.stages else ("startup" if not reader.hello
                                                             else "import target")
    if result.tampered:
        result.error = {"stage": last_stage, "message": "result channel tampered with "
                        "(unauthenticated or extra frames)"}
    elif handing:  # the grader's own failure, not the worker's: said as one (a spawn's)
        result.error = {"stage": "spawn", "message": "the payload could not be handed to the "
                        f"worker: {handing[0]}"[:500]}
    elif timed_out:
        credited = _credited(control, timeout_s)
        waited = f" (plus {credited:.0f}s waiting for the GPU)" if credited >= 1 else ""
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
            # the worker and every process of its run are gone: its results file is read now
            # (after a delivery, its files are the delivered result's: the end holds no slot)
            value = _decode(reader.result)
            if delivered and has_slots(value):
                raise SlotError("a result after the run's delivery names tensors in its files")
            result.value = with_parts(attach_slots(value, results_fd, shown)
                                      if not delivered else value)
            result.ok = True
            result.shown = shown if shown is not None and shown.size and not delivered else None
        except SlotError as exc:  # the file is not the one the result's frame describes
            result.tampered = True
            result.error = {"stage": last_stage, "message": f"result tensors not trusted: {exc}"}
        except Exception as exc:  # noqa: BLE001 — an undecodable result is a failed run
            result.error = {"stage": last_stage, "message": undecodable(exc)}
    else:
        detail = _last_error_line(result.stderr_tail)
        message = _describe_exit(proc.returncode)
        result.error = {"stage": last_stage,
                        "message": f"{message}: {detail}" if detail else message}
        if proc.returncode is not None and proc.returncode < 0:
            # the harness's own word, as ``timed_out`` (a worker's frame names no signal)
            result.error["signal"] = _signal_name(-proc.returncode)
    if results_fd is not None:
        os.close(results_fd)  # the tensors attached keep their own mapping of it
    if parts_in is not None:
        parts_in.close()
        for part in parts.values():  # received, and named by no result
            part.close()
    if shown is not None and result.shown is None and \
            not any(got.shown is shown for got in delivered):
        shown.close()
    return result


def echo(payload: dict) -> dict:
    """A trivial target (tests, smoke checks): returns the payload with the worker's pid."""

    mark_stage("echo")
    return {**payload, "pid": os.getpid(), "cwd": os.getcwd(),
            "interpret": os.environ.get("TRITON_INTERPRET")}


def late_ahead(sandbox: bool) -> bool:
    """Whether a run's late parts are copied as it starts (``payload_files._LateFile``): only
    where Landlock keeps the worker out of this process's descriptors."""
    return bool(sandbox) and landlock_abi() > 0


@functools.lru_cache(maxsize=1)
def worker_files() -> int | None:
    """A worker's open-file limit (``WORKER_FILES`` at most), this process's own raised to its
    hard limit first; None where the two cannot be kept apart by ``2 * SCM_MAX_FD``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    room = soft - 2 * _SCM_MAX_FD if soft != resource.RLIM_INFINITY else WORKER_FILES
    return min(WORKER_FILES, room) if room >= 256 else None


def _hand_over(deferred: DeferredPayload, sock: socket.socket, late_pair, sandbox: bool,
               control: Control | None, later: list, failed: list) -> None:
    """A deferred payload, once given, to its worker over ``sock``: its tensors in a sealed
    file, its late parts' table (their files made ahead, ``_LateFile``, over ``late_pair``);
    withdrawn, or unsendable (why in ``failed``: the grader's failure, unless the worker was
    gone), the socket closes and the worker ends at ``payload wait``."""
    tensor_fd = late_file = None
    try:
        deferred.wait()
        if deferred.cancelled:
            return
        payload, tensor_fd = _tensor_file(deferred.payload)
        late = deferred.late
        if late and late_pair is not None:
            late_file = _LateFile(late, ahead=late_ahead(sandbox), pair=late_pair)
            late_pair = None
            later.append(late_file)
            if control is not None:
                control._late = late_file
        send_payload(sock, payload_part(payload, late_file.table if late_file else None),
                     tensor_fd)
    except (BrokenPipeError, ConnectionError):
        pass  # the worker is gone: its run says why
    except Exception as exc:  # noqa: BLE001 — the worker ends at its wait; the run says why
        failed.append(f"{type(exc).__name__}: {exc}")
    finally:
        if tensor_fd is not None:
            os.close(tensor_fd)
        sock.close()
        if late_pair is not None:
            late_pair.close()


def _credited(control: Control | None, timeout_s: float) -> float:
    """The seconds ``control``'s waits for the GPU add to a worker's limit (``WAIT_CREDIT_CAP``)."""
    return 0.0 if control is None else min(control.waited_s, timeout_s * WAIT_CREDIT_CAP)


def run_source(payload: dict) -> dict:
    """A target that executes ``payload["source"]`` and returns what its ``main()`` returns
    (``main(payload)`` when it takes an argument).

    For smoke checks and the harness's own tests (crashers, hangs, forgers)."""
    namespace: dict[str, Any] = {"__name__": "kernelmill_source"}
    exec(compile(payload["source"], "<source>", "exec"), namespace)
    main = namespace["main"]
    return main(payload) if main.__code__.co_argcount else main()
