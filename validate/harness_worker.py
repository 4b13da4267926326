"""The worker side of the execution harness: runs one target function and reports over a pipe.

Started by ``harness.run_in_worker`` (``python -c "...harness_worker import main; main(...)"``,
so this module is imported under its own name and ``mark_stage`` reaches it) in a fresh session and an empty temporary folder. It reads its job (target, payload,
per-run key) from the pipe ``IN``, calls ``module:function(payload)`` and sends the returned dict
back over the pipe ``OUT``. Every frame on ``OUT`` carries an HMAC under the per-run key, so bytes
that code inside the worker writes to the pipe without the key are recognised as forged; stdout
and stderr are kept only as text for error messages and never parsed.

A target may call ``mark_stage(name)`` before each step, so that a crash (segfault,
``os._exit``, timeout) is reported with the stage it died in.

This module imports only the standard library at start; torch is imported lazily to encode a
result (``torch.save``, which the parent reads back with ``weights_only=True``).
"""
from __future__ import annotations

import contextlib
import faulthandler
import hashlib
import hmac
import io
import json
import os
import pickle
import random
import resource
import socket
import struct
import sys
import time
import traceback
import types

from . import schedstat
from .tensor_slots import (  # noqa: F401
    LATE_PART,
    ResultsFile,
    ShownSlot,
    SlotError,
    TensorSlot,
    recv_fds,
    restore_slots,
    send_fds,
    slot_tensors,
    write_part,
)

# Frame: 4-byte big-endian body length, 32-byte HMAC-SHA256(key, body), body.
# Body: one kind byte, then data. Kinds: H hello, S stage (JSON), R result (torch.save),
# E error (JSON), T a report to a parent that drives the worker over the control pipe (JSON),
# D a trusted run's results delivered before its end (torch.save, as R; ``deliver``).
HEADER = struct.Struct(">I")
MAC_SIZE = 32
KIND_HELLO, KIND_STAGE, KIND_RESULT, KIND_ERROR, KIND_REPORT = b"H", b"S", b"R", b"E", b"T"
KIND_DELIVERED = b"D"

_channel = [False]  # set by main() once the channel's writer is installed
_control = None  # set by main() when the parent opened a control pipe: a line reader
_late: dict = {}  # set by main() when the job has late parts: {"fd", "table"}
_delivered = [False]  # set by ``deliver``: the run's files are the parent's, sealed
_delivered_shown: list = [None]  # the shown file's descriptor once delivered (``shown_values``)
_parts_out: list = [None]  # set by main(): a trusted run's socket for its late parts
_parts_made = [0]
_stage = "startup"

# Bound before any user code can run, so later patches of os/hmac do not reach the channel.
_os_write = os.write
_hmac_new = hmac.new
_sha256 = hashlib.sha256
_audit_event = sys.audit
_getframe = sys._getframe
FRAME_EVENT = "kernelmill.frame"  # (kind, data): the channel's writer sends a frame
# (code, synchronize, clock): raised before the strict mode (``require_trusted_senders``), names
# the one code object that may send ``ASIDE_REPORTS`` with a submission's code on the stack (the
# grade worker's wrapper of Triton's compile, which steps its GPU work aside for the compile's
# host work: ``grade.worker.observers.launches``), the device's synchronize and the clock the
# profiler's records keep. Those two reports, exactly, in turn: the writer itself synchronises
# the device before each (none of the worker's GPU work is queued as it steps aside, nor as it
# comes back) and keeps when each aside began and ended, out of Python's reach.
ASIDE_SENDER_EVENT = "kernelmill.aside_sender"
# A member's report that its GPU work is done and a compile (host work) begins, and the point
# after the compile, where it waits for the parent's answer (``step_aside.StepAside``)
ASIDE_REPORTS = (b'{"aside": 1}', b'{"between": 1}')
# (box,): the writer puts into ``box`` (a list) each aside's (began, ended) by that clock, an
# aside still open ending now: what the witness holds the worker's kernels to
ASIDE_SPANS_EVENT = "kernelmill.aside_spans"
# A value the target returns under this key is called (no arguments) after the target and
# before the result is encoded; a non-empty list it returns is reported as an error
# (``ResultGuardError``) instead of the result: the target's last check, made where nothing
# the target ran since can see or edit the result (``torch.save`` runs Python that a
# submission may have rebound on its module).
RESULT_GUARD = "_guard_before_encode"


class ResultGuardError(RuntimeError):
    """The target's result guard found something wrong; the result was not encoded."""


class ChannelTamperError(RuntimeError):
    """Code that is not the harness's asked the channel for a frame (the run ends there)."""


def _not_json(value):
    raise TypeError(f"{type(value).__name__} is not JSON")


def _json_encoder():
    """``value -> bytes``, the JSON of ``json.dumps(value)``, bound now to the C encoder: the
    channel's messages go through no Python function a submission can rebind on ``json``'s
    modules (wrapping ``json.dumps`` would let it rewrite the timing reports: T-02). Exact
    dicts, lists, strings and numbers are encoded in C alone."""
    from json.encoder import c_encode_basestring_ascii, c_make_encoder

    if c_make_encoder is None or c_encode_basestring_ascii is None:  # no C accelerator
        return lambda value, _dumps=json.dumps: _dumps(value).encode()
    chunks = c_make_encoder(None, _not_json, c_encode_basestring_ascii, None, ": ", ", ",
                            False, False, True)
    join = "".join

    def encode(value) -> bytes:
        return join(chunks(value, 0)).encode()

    return encode


encode_json = _json_encoder()


def frame_parts(key: bytes, kind: bytes, data) -> tuple[bytes, memoryview]:
    """A frame as its head (length, MAC, kind) and its data, never joined: a result of a
    gigabyte is written from where ``torch.save`` left it, not copied twice more."""
    mac = _hmac_new(key, kind, _sha256)
    mac.update(data)
    return HEADER.pack(1 + len(data)) + mac.digest() + kind, memoryview(data)


def _install_writer(fd: int, key: bytes) -> None:
    """The channel's writer, as an audit hook on ``FRAME_EVENT``: a hook is held by the
    interpreter alone, so its closure (the descriptor, the key) is out of every Python
    code's reach, where a sender function's closure is one attribute away (``__closure__``
    reads raise no audit event: a target read the key there, signed a result of its own and
    exited). It writes a frame only for the code that sends that kind (the code object that
    raised the event): a result or an error for ``main``, a report for ``report``, a stage for
    ``mark_stage``; and the two ``ASIDE_REPORTS``, exactly and in turn, for the one code object
    registered before the strict mode (``ASIDE_SENDER_EVENT``), whatever code is on the stack,
    each after it synchronised the device itself, keeping when each aside began and ended
    (``ASIDE_SPANS_EVENT``). It calls only what it bound here: HMAC in C where the interpreter
    has it."""
    senders = {KIND_HELLO: main.__code__, KIND_RESULT: main.__code__,
               KIND_ERROR: main.__code__, KIND_REPORT: report.__code__,
               KIND_STAGE: mark_stage.__code__, KIND_DELIVERED: deliver.__code__}
    try:
        from _hashlib import hmac_new as mac_new  # C: no Python looked up per frame
    except ImportError:  # an interpreter without OpenSSL
        mac_new = _hmac_new
    pack, write, getframe, view_of, size = HEADER.pack, _os_write, _getframe, memoryview, len
    refused, trusted_stack, type_of, to_json = RuntimeError, _trusted_stack, _type, encode_json
    frame_event, strict_event, find_roots, end = FRAME_EVENT, STRICT_EVENT, _trusted_roots, _exit
    aside_event, aside_reports, code_type = ASIDE_SENDER_EVENT, ASIDE_REPORTS, types.CodeType
    spans_event, report_kind, list_type = ASIDE_SPANS_EVENT, KIND_REPORT, list
    roots: list[tuple[str, ...]] = []  # set by STRICT_EVENT: where the harness's code lives
    # set by ASIDE_SENDER_EVENT before the strict mode: [code (by identity), synchronize, clock]
    aside_sender: list = []
    asides: list = []  # each aside's [began, ended] by that clock; ended None while it lasts
    first: list = []  # the frame of the run's main (its hello), and its last frame once sent
    tamper = f"{ChannelTamperError.__name__}: "

    def send(kind: bytes, data) -> None:
        mac = mac_new(key, kind, "sha256")
        mac.update(data)
        for part in (pack(1 + size(data)) + mac.digest() + kind, view_of(data)):
            view = view_of(part)
            while view:
                view = view[write(fd, view):]

    def aside_events(event: str, args: tuple) -> None:
        """The aside sender's registration (before the strict mode, once), and the spans
        asked for (an aside still open ends now)."""
        if event == aside_event:
            if not roots and not aside_sender and type_of(args) is tuple and \
                    type_of(args[0]) is code_type:
                aside_sender.extend(args[:3])
        elif type_of(args) is tuple and args and type_of(args[0]) is list_type:
            args[0].extend([(began, ended if ended is not None else aside_sender[2]())
                            for began, ended in asides])

    def aside_frame(kind: bytes, data, caller) -> bool:
        """Whether the frame is one of the registered wrapper's two reports: then in turn (or
        refused), each after the worker's GPU work is done (the synchronize raises inside a
        graph's capture), its span kept."""
        if not (aside_sender and kind == report_kind and type_of(data) is bytes and
                data in aside_reports and aside_sender[0] is caller.f_code):
            return False
        opening = data == aside_reports[0]
        if opening == (asides[-1][1] is None if asides else False):
            raise refused("kernelmill: refused an aside report out of turn")
        aside_sender[1]()
        if opening:
            asides.append([aside_sender[2](), None])
        else:
            asides[-1][1] = aside_sender[2]()
        return True

    def writer(event: str, args: tuple) -> None:
        if event == strict_event and not roots:
            roots.append(find_roots())
            return
        if event == aside_event or event == spans_event:
            aside_events(event, args)
            return
        if event != frame_event:
            return
        kind, data = args
        caller = getframe(1)
        if type_of(kind) is not bytes:
            raise refused("kernelmill: refused a channel frame not sent by the harness")
        # its kind's sender, or a compile's aside and the point after it from the one wrapper
        # registered
        aside = senders.get(kind) is not caller.f_code
        if aside and not aside_frame(kind, data, caller):
            raise refused("kernelmill: refused a channel frame not sent by the harness")
        why = ""
        if kind == KIND_HELLO:  # once per process: a second main (a submission calling it
            if first:           # with a job of its own) would have its result signed
                why = "a second hello"
            else:
                first.append(caller)
        elif not first or len(first) > 1:
            why = "a frame after the final one" if first else "a frame before the hello"
        elif roots and not aside and not trusted_stack(caller, roots[0], first[0]):
            why = f"a {kind.decode()} frame sent with a submission's code on the stack"
        if why:
            if roots:  # a grade: the run ends here, said to the parent as tampering
                send(KIND_ERROR, to_json({"stage": "channel", "message": tamper + why}))
                end(1)
            raise refused(f"kernelmill: refused {why}")
        if kind in (KIND_RESULT, KIND_ERROR):
            first.append(None)
        send(kind, data)

    sys.addaudithook(writer)
    _channel[0] = True


_type = type
STRICT_EVENT = "kernelmill.strict"  # from now on, frames only from a stack of trusted code


def require_trusted_senders() -> None:
    """From now on the channel writes a frame only when no code but the standard library's,
    installed libraries' and kernelmill's is on the stack: the grade worker calls this before a
    submission's import. A submission that calls ``report`` itself, or the window's own
    ``serve_window`` with a timer of its own, from its forward is refused (else it could answer
    the parent's timing commands with samples of its choosing). Raising the event again
    changes nothing."""
    _audit_event(STRICT_EVENT)


def _trusted_roots() -> tuple[str, ...]:
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    folders = [paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    folders += list(site.getsitepackages())
    folders += [folder for name, module in list(sys.modules.items())
                if name.startswith("kernelmill.") and name.count(".") == 1
                for folder in list(getattr(module, "__path__", None) or [])]
    # as imported and as resolved: a code object's file name is the path it was imported by
    return tuple({os.path.join(form, "") for f in folders if f
                  for form in (os.path.abspath(f), os.path.realpath(f))})


def _trusted_stack(frame, roots: tuple[str, ...], bottom) -> bool:
    """``frame`` is on the stack of ``bottom`` (the frame of the run's ``main``: not another
    thread's, whose frames never reach it) and every frame from it down to ``bottom`` runs
    code from a file under ``roots``, by its name alone (no path is resolved: resolving runs
    Python a submission may have rebound) with no ``/.`` in it (``.../site-packages/../../tmp``
    is not under site-packages)."""
    seen: dict[str, bool] = {}
    while frame is not bottom:
        if frame is None:
            return False
        name = frame.f_code.co_filename
        if name not in seen:
            seen[name] = name.startswith("<frozen ") or \
                (name.startswith(roots) and "/." not in name)
        if not seen[name]:
            return False
        frame = frame.f_back
    return True


# What ``mark_stage`` and ``report`` call is bound where they are defined (keyword defaults,
# which no submission may read or write): a name looked up in this module at call time can be
# made to answer with a submission's function for those calls alone (a module-dict key of its
# own, equal to ``encode_json``, could rescale every timing sample: T-02, T-15)
def _cpu_seconds(_process=time.process_time, _usage=resource.getrusage,
                 _children=resource.RUSAGE_CHILDREN) -> float:
    """The process's CPU seconds so far (all its threads) and those of the children it has
    reaped (a compiler the first forward ran: its CPU is the stage's that ran it, not the
    run's last one, where the whole run's CPU, children included, ends the count)."""
    usage = _usage(_children)
    return _process() + usage.ru_utime + usage.ru_stime


def mark_stage(name: str, *, _channel=_channel, _send=_audit_event, _event=FRAME_EVENT,
               _kind=KIND_STAGE, _encode=encode_json, _str=str,
               _cpu=_cpu_seconds) -> None:
    """Record the stage the worker is in; a crash from here on is reported with this name.
    The mark carries the CPU seconds so far (``_cpu_seconds``), for the profile."""
    global _stage
    _stage = _str(name)
    if _channel[0]:
        _send(_event, _kind, _encode({"stage": _stage, "cpu": round(_cpu(), 4)}))


def current_stage() -> str:
    return _stage


def report(value: dict, *, _channel=_channel, _send=_audit_event, _event=FRAME_EVENT,
           _kind=KIND_REPORT, _encode=encode_json, _error=RuntimeError) -> None:
    """Send ``value`` (JSON) to the parent while the target runs (answers to ``receive``)."""
    if not _channel[0]:
        raise _error("no harness channel")
    _send(_event, _kind, _encode(value))


def receive() -> str:
    """The parent's next command line on the control pipe ("" when the parent closed it)."""
    if _control is None:
        raise RuntimeError("this run has no control pipe")
    return _control()


def _make_receiver(fd: int, _read=os.read):
    """The control pipe's line reader, bound here: the late part's reading calls it while the
    parent's descriptor waits on the late socket (``late_read``)."""
    buffered = [b""]

    def read_line() -> str:
        while b"\n" not in buffered[0]:
            chunk = _read(fd, 4096)
            if not chunk:
                line, buffered[0] = buffered[0], b""
                return line.decode()
            buffered[0] += chunk
        line, _, buffered[0] = buffered[0].partition(b"\n")
        return line.decode()

    return read_line


def _save_without_crc() -> None:
    """No CRC-32 of each record in results: the frame's HMAC covers every byte (the CRC was a
    quarter of the save's CPU, 0.06 s per 256 MB on the 2-core host). Set before the target
    runs, where torch is loaded already (a warm worker): nothing is looked up after the
    submission ran (T-05), and a submission that turns the CRCs back on only
    slows its own result."""
    if "torch" not in sys.modules:
        return
    try:
        from torch.utils.serialization import config
        config.save.compute_crc32 = False
    except (ImportError, AttributeError):  # an older torch: the CRCs are written
        pass


def _encode_result(value: dict, results_fd: int | None = None, _pickler=pickle.Pickler,
                   _type=type, _table=types.MappingProxyType, _slot=slot_tensors,
                   _fstat=os.fstat) -> bytes:
    """``torch.save`` of ``value`` through a pickler made now, whose dispatch table is its own,
    empty and read-only: the standard pickler consults ``copyreg.dispatch_table``, a registry a
    submission can fill in place (a reducer for tensors could pickle PyTorch's answer in place
    of the kernel's output, after every check had run: T-02). Its large tensors go to the run's
    results file first (``tensor_slots.slot_tensors``): the frame carries their slots."""
    import torch

    # after what a trusted task wrote there (``result_slot``): the file's own size, read from
    # the kernel (no object a submission could reach decides where the slots go)
    start = -(-_fstat(results_fd).st_size // 64) * 64 if results_fd is not None else 0
    value = _slot(value, results_fd, start=start)

    pickler = _type("ResultPickler", (_pickler,), {"dispatch_table": _table({})})
    buffer = io.BytesIO()
    torch.save(value, buffer, pickle_module=_type("ResultPickle", (), {"Pickler": pickler}))
    return buffer.getbuffer()  # a view: no copy of what may be gigabytes


# The run's results file, for a trusted task to write tensors into as it makes them
# (``result_slot``; only where the parent asked for it, ``run_in_worker(early_results=True)``:
# a candidate's run never holds its descriptor here); ``_encode_result`` puts the rest after.
_results = ResultsFile(None)
# The run's shown file (the same runs only): what the task marks ``shown`` (a candidate may be
# given it as it is; ``tensor_slots.ShownSlot``)
_shown = ResultsFile(None, ShownSlot)


def result_slot(tensor, look=None, shown: bool = False):
    """``tensor`` written into the run's results file now, as the ``TensorSlot`` the result
    carries in its place (the parent gets the tensor); None where it is not (no file, a small
    tensor): the task keeps a host copy instead. ``shown``: into the run's shown file instead,
    which the parent passes on as it is to a candidate's worker, so only what a candidate may
    see goes there. For tasks that run no submission's code (a reference run): a candidate's
    results are written only once its code has finished."""
    return (_shown if shown else _results).put(tensor, look)


def deliver(value: dict, *, _send=_audit_event, _event=FRAME_EVENT,
            _kind=KIND_DELIVERED) -> None:
    """A trusted run's results (a run that executes no submission's code and whose parent
    asked for them ahead: ``harness.run_in_worker(on_delivered=...)``) sent now, before the
    run ends: the parent seals the run's results and shown files and reads them while the
    task goes on with what the parent asks next over the control pipe (a fresh reference run
    that then times the reference in its grade's window). Once per run; what the task
    returns at its end carries no tensors in those files (they are sealed by then)."""
    if _results.fd is None or _delivered[0]:
        raise RuntimeError("this run has no results file to deliver, or delivered already")
    data = _encode_result(value, _results.fd)
    _send(_event, _kind, data)
    _delivered[0] = True
    _delivered_shown[0] = _shown.fd
    _results.fd = _shown.fd = None


def shown_values(value):
    """``value`` (part of what the run delivered) with each ``ShownSlot`` read back from the
    run's shown file, sealed since: the very bytes the parent passes on to a candidate (a
    tensor of its own per slot, on the host). After ``deliver`` only."""
    import mmap

    fd = _delivered_shown[0]
    size = os.fstat(fd).st_size if fd is not None else 0
    data = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE) \
        if size else None
    return restore_slots(value, None, shown=data)


def late_part(value, look=None):
    """``value`` (a trial of the unseen-input check: what a candidate may hold only once it is
    called on it) written as one late part (``tensor_slots.write_part``) into a memory file of
    its own, handed to the parent at once over the run's parts socket and closed here. Returns
    the marker the result carries in its place, which the parent replaces with that file,
    sealed (``payload_files.LatePart``) and passed on to the candidate's worker as it is: the
    grader never copies it. None where the run has no such socket (a run not asked for parts:
    the caller keeps ``value``). For trusted runs (``run_in_worker(late_parts=True)``)."""
    channel = _parts_out[0]
    if channel is None:
        return None
    fd = os.memfd_create("kernelmill-late", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        # the run's writer (``_results.write``)
        write_part(fd, value, look or (lambda t: t.detach().to("cpu")), _results.write)
        index = _parts_made[0]
        _parts_made[0] += 1
        send_fds(channel, index.to_bytes(4, "little"), [fd])
    finally:
        os.close(fd)
    return {LATE_PART: index}


def result_mark() -> tuple[int, int]:
    """Where the next ``result_slot`` writes (for ``result_rewind``)."""
    return _results.end, _shown.end


def result_rewind(mark: tuple[int, int]) -> None:
    """Drop what ``result_slot`` wrote since ``result_mark`` returned ``mark``."""
    _results.rewind(mark[0])
    _shown.rewind(mark[1])


def _hide_fd(fd: int) -> int:
    """Move the result pipe to a random high descriptor that children do not inherit."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = max(256, min(soft, 4096) - 1)
    for _ in range(50):
        target = random.SystemRandom().randrange(100, top)
        try:
            os.fstat(target)
            continue  # in use
        except OSError:
            pass
        os.dup2(fd, target, inheritable=False)
        os.close(fd)
        return target
    os.set_inheritable(fd, False)
    return fd


def _apply_limits(limits: dict) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limits.get("address_space"):
        size = int(limits["address_space"])
        resource.setrlimit(resource.RLIMIT_AS, (size, size))
    if limits.get("file_size"):
        size = int(limits["file_size"])
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    if limits.get("files"):  # below the grader's (``harness.WORKER_FILES``), for good
        files = int(limits["files"])
        soft, hard = (files if v == resource.RLIM_INFINITY else min(files, v)
                      for v in resource.getrlimit(resource.RLIMIT_NOFILE))
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    if limits.get("cpu_s"):  # SIGXCPU at the budget, SIGKILL a few seconds later
        seconds = max(1, -int(-float(limits["cpu_s"]) // 1))
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 5))


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def _payload_later(fd: int) -> dict:
    """A deferred payload (``deferred_payload``): its tensors mapped, its late parts' table
    kept; raises where the parent withdrew it."""
    from .deferred_payload import receive_payload

    blob, tensor_fd = receive_payload(fd)
    part = pickle.loads(blob)
    if "fd" in _late:
        _late["table"] = part.get("late") or []
    payload = part["payload"]
    return attach_tensors(payload, tensor_fd) if tensor_fd is not None else payload


def attach_tensors(value, fd: int):
    """``value`` with every ``TensorSlot`` replaced by a tensor mapped from the file ``fd``
    (private, copy-on-write: writing to an input never reaches the file)."""
    import mmap

    size = os.fstat(fd).st_size
    if size == 0:
        os.close(fd)
        return value
    data = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    os.close(fd)
    return restore_slots(value, data)


def _ieee_fp32() -> None:
    """float32 means IEEE float32 in every worker. cuDNN's convolutions and RNNs run TF32 by
    default (10-bit mantissas): a reference computed that way makes the validator's fp32 noise
    floor TF32's (0.02-0.17 on deep CNNs, 2e-4 without it), inflates the calibrated tolerance
    tenfold, and lets a candidate with lower-precision operands pass an fp32 problem. References,
    candidates and timings alike run with it off (matmul's TF32 is off by default already).
    ``KERNELMILL_FP32=library`` keeps the library's defaults (to measure what they change)."""
    if os.environ.get("KERNELMILL_FP32") == "library":
        return
    try:
        import torch
    except ImportError:
        return
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


def _init_cuda(lock_path: str | None, marks: list) -> None:
    """This process's CUDA context, made under the GPU's lock where ``lock_path`` names it
    (``run_in_worker(init_lock=...)``; ``GpuLock.outside_windows``: while no timing window holds
    the GPU alone, never queued behind a waiting one, which may wait for this worker's own
    grade): a context made while another process timed the GPU alone left that window's
    samples wide (KernelBench grades, H100 and H200: 32% of the windows beside one read
    imprecise, against 0.9% of the others). ``marks`` gets ``cuda init wait`` (the wait for the
    lock) and ``cuda init``."""
    try:
        import torch
    except Exception:  # noqa: BLE001 — reported by the target's own stage
        return
    marks.append(["cuda init wait" if lock_path else "cuda init", time.monotonic()])
    try:
        with contextlib.ExitStack() as held:
            if lock_path:
                from .gpu_lock import GpuLock

                try:
                    held.enter_context(GpuLock(lock_path).outside_windows())
                except OSError:  # its files cannot be opened here: the context is made as is
                    pass
                marks.append(["cuda init", time.monotonic()])
            if torch.cuda.is_available():
                from .cuda_wait import init_cuda

                init_cuda(torch)  # with the wait the job's environment asks for
    except Exception:  # noqa: BLE001 — a broken device is reported by the target's own stage
        pass


def _die_with_parent() -> None:
    """Ask the kernel to SIGKILL this worker if the grader dies (Ctrl-C, kill): no orphan keeps
    running without the parent that enforces its timeout."""
    import ctypes
    import signal

    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


# A folder of the libraries' bytecode the parent picked (``worker_budgets._worker_env``)
BYTECODE_VAR = "KERNELMILL_PYCACHE"


def use_bytecode_cache() -> None:
    """Read the bytecode of modules imported from here on under the folder ``BYTECODE_VAR``
    names, where set (``validate.bytecode``: written by a trusted process only; a library
    installed without its bytecode is otherwise compiled from source by every worker). Never
    written from here."""
    folder = os.environ.get(BYTECODE_VAR)
    if folder:
        sys.pycache_prefix = folder
        sys.dont_write_bytecode = True


def main(argv: list[str]) -> None:
    global _control
    began = time.monotonic()  # the host's clock, the parent's too: its stages say when
    _die_with_parent()
    use_bytecode_cache()
    fd_in, fd_out = int(argv[0]), int(argv[1])
    faulthandler.enable(file=sys.stderr, all_threads=True)
    job = pickle.loads(_read_all(fd_in))
    key = job.pop("key")
    _install_writer(_hide_fd(fd_out), key)
    extra = dict(zip(job.get("fds") or (), (int(fd) for fd in argv[2:])))
    if "control" in extra:
        _control = _make_receiver(_hide_fd(extra["control"]))
    if "tensors" in extra:
        job["payload"] = attach_tensors(job["payload"], extra["tensors"])
    results_fd = _hide_fd(extra["results"]) if "results" in extra else None
    if job.get("early_results") is True:
        _results.fd = results_fd
        if "shown" in extra:
            _shown.fd = _hide_fd(extra["shown"])
    elif "shown" in extra:
        os.close(extra["shown"])
    if "parts" in extra:  # a trusted run's late parts go to the parent over it (``late_part``)
        parts = _hide_fd(extra["parts"])
        if job.get("early_results") is True:
            _parts_out[0] = socket.socket(fileno=parts)
        else:
            os.close(parts)
    if "late" in extra:  # its parts come over it when asked for (``late_read.late_payload``)
        _late.update(fd=_hide_fd(extra["late"]), table=job.get("late") or [])
    later = _hide_fd(extra["payload"]) if "payload" in extra else None
    del key
    _apply_limits(job.get("limits") or {})
    sandbox = None
    marks = [["worker main", began]]  # where the time before the hello went
    # The CUDA driver fails to initialise inside Landlock (error 304, seen on H100/H200
    # images): a confined worker opens it first, so the confined process reuses its device
    # handles; an unconfined one given the GPU's lock makes its context under it all the same
    if os.environ.get("TRITON_INTERPRET") != "1" and \
            (job.get("writable") is not None or job.get("init_lock")):
        _init_cuda(job.get("init_lock"), marks)
    if job.get("writable") is not None:
        from .sandbox import confine

        marks.append(["confine", time.monotonic()])
        schedstat.hold()  # the main thread's wait for a core, read by timed calls on CPU
        sandbox = confine(job["writable"], job.get("hidden") or ())
    _audit_event(FRAME_EVENT, KIND_HELLO, encode_json({"pid": os.getpid(), "sandbox": sandbox,
                                                      "marks": marks}))
    # what runs after the target, bound before it: the target may import a submission, whose
    # code can reach this module's globals and replace the encoder (T-02)
    send, encode, finish, to_json = _audit_event, _encode_result, _exit, encode_json
    _save_without_crc()
    _ieee_fp32()
    try:
        if later is not None:  # started before its payload existed: it comes now
            mark_stage("payload wait")
            job["payload"] = _payload_later(later)
        mark_stage("import target")
        module_name, _, function_name = job["target"].partition(":")
        module = __import__(module_name, fromlist=[function_name])
        function = getattr(module, function_name)
        mark_stage("run target")
        value = function(job["payload"])
        if not isinstance(value, dict):
            raise TypeError(f"target returned {type(value).__name__}, not dict")
        guard = value.pop(RESULT_GUARD, None)
        problems = guard() if guard is not None else None
        if problems:
            raise ResultGuardError("; ".join(str(p) for p in problems)[:1500])
        data = encode(value, None if _delivered[0] else results_fd)
        too_large = _too_large(len(data))
        if too_large:
            raise ResultTooLarge(too_large)
    except BaseException as exc:  # noqa: BLE001 — every failure becomes a reported verdict
        try:
            tail = traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:]
        except Exception:  # noqa: BLE001 — the message alone still says what went wrong
            tail = []
        message = f"{type(exc).__name__}: {exc}"
        send(FRAME_EVENT, KIND_ERROR, to_json({"stage": str(_stage)[:200],
                                               "message": message[:2000],
                                               "traceback": "".join(tail)[-4000:]}))
        finish(1)
    mark_stage("send")  # the result's frame, then the process's exit (its memory unmapped)
    send(FRAME_EVENT, KIND_RESULT, data)
    finish(0)


# A frame's length is 4 bytes (``HEADER``) and counts its kind byte: the largest result body.
MAX_RESULT_BYTES = (1 << 32) - 2


class ResultTooLarge(RuntimeError):
    """The run's result cannot cross the channel in one frame."""


def _too_large(size: int, limit: int = MAX_RESULT_BYTES) -> str | None:
    """Why a result of ``size`` bytes cannot be sent (None when it can): said as what to do,
    not as a broken channel (a frame over the limit would read as tampering)."""
    if size <= limit:
        return None
    return (f"the run's result is {size / 2**30:.1f} GiB, over the {limit / 2**30:.0f} GiB a "
            "result may be: its tensors (each trial's inputs and outputs) are too large to "
            "grade at this size; shrink the problem's sizes")


def _exit(code: int) -> None:
    # os._exit: no atexit handler or finalizer registered by user code runs after the report.
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass
    os._exit(code)


