"""A late part's reading in the candidate's worker: asked of the parent, taken off the late
socket, mapped and read into tensors, each step through functions bound before the candidate's
import.

A late part (``payload_files._LateFile``) holds a trial the unseen-input check times: its bytes
must reach nothing of the submission's before the call they are for. The reading runs while
the submission's objects live in the process, so a function it looked up at call time (the
harness's own ``read_part``, ``torch.frombuffer``, ``mmap.mmap``, ``socket._socket``, the
``array`` module that ``socket.recv_fds`` imports) could be the submission's, rebound for that
one call and put back before any patch check looks, and would see the bytes or the part's
descriptor. Here every function the reading calls is a keyword default, bound when this module
is imported (no submission has run then; none may read or write a function's keyword
defaults), and the run's state (the late socket, the parts' table, the control pipe's reader
and the harness's reporter) is taken into ``_BOUND`` by ``bind``. The worker calls ``bind``
and ``late_payload`` of its private copy of this module (``grade.worker.guards.private``),
before the candidate's import: what the public module's names and list hold is not what the
reading uses.
"""
from __future__ import annotations

import _socket
import io
import mmap
import os
import pickle
import signal
import socket
import types

import torch

from . import harness_worker as _harness
from .tensor_slots import PART_TRAILER, ShownSlot, TensorSlot, _replaced, recv_fds

# one dict once ``bind`` ran: the run's late socket (its descriptor and the inode it was then),
# its table, the control pipe's reader and the harness's reporter, as they were before the
# candidate's import
_BOUND: list = []
# Signals held back while a part is asked for and read: a Python handler runs in this thread
# between any two bytecodes (or when a wait is interrupted), so a submission's handler, set off
# by a timer of its own, could peek at the late socket's descriptor. A fault (these) is
# delivered whatever the mask says.
_FAULTS = (signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGKILL,
           signal.SIGSTOP)
_HELD = frozenset(signal.valid_signals()) - frozenset(_FAULTS)
# torch's dtypes by name, read-only (a proxy whose dict nothing else holds: a keyword default
# that is a plain dict would be the public module's, and writable)
_DTYPES = types.MappingProxyType({str(value)[6:]: value for value in vars(torch).values()
                                  if type(value) is torch.dtype})


def bind(*, _tuple=tuple, _fstat=os.fstat, _dict=dict) -> None:
    """Take the run's late-part state from the harness worker: call it in the private copy,
    before the candidate's import (what the list held before is replaced, never shared)."""
    late = _harness._late
    fd = late.get("fd")
    _BOUND[:] = [_dict(fd=fd, inode=None if fd is None else _tuple(_fstat(fd)[1:3]),
                       table=_tuple(_tuple(entry) for entry in late.get("table") or ()),
                       receive=_harness._control, report=_harness.report)]


def late_payload(index: int, *, _mask=signal.pthread_sigmask, _block=signal.SIG_BLOCK,
                 _setmask=signal.SIG_SETMASK, _held=_HELD, _fstat=os.fstat, _tuple=tuple,
                 _len=len, _error=RuntimeError, _oserror=OSError):
    """Part ``index`` of the job's late data (``harness.run_in_worker(late=...)``), asked of the
    parent now: it was not in this process before (None where the job has no such part, or
    ``bind`` never ran). The parent hands its memory file over the late socket, then says so on
    the control pipe. Signals are held back until the part is read (``_FAULTS`` aside), and a
    late socket whose descriptor now names another file is refused."""
    if not _BOUND:
        return None
    bound = _BOUND[0]
    table, receive, fd = bound["table"], bound["receive"], bound["fd"]
    if not 0 <= index < _len(table) or receive is None or fd is None:
        return None
    try:
        same = _tuple(_fstat(fd)[1:3]) == bound["inode"]
    except _oserror:
        same = False
    if not same:
        raise _error("the late socket's descriptor was replaced")
    before = _mask(_block, _held)
    try:
        return _received(index, bound, receive, fd, table)
    finally:
        _mask(_setmask, before)


def _received(index: int, bound: dict, receive, fd: int, table: tuple, *, _recv_fds=recv_fds,
              _socket_type=_socket.socket, _dup=os.dup, _close=os.close, _len=len,
              _error=RuntimeError, _blocking=BlockingIOError, _dontwait=socket.MSG_DONTWAIT):
    """``late_payload``'s asking, receipt and reading, with signals held back."""
    bound["report"]({"late": index})
    if receive().strip() != f"late {index}":
        raise _error(f"the parent did not send late part {index}")
    channel = _socket_type(fileno=_dup(fd))
    try:  # the parent sent it before the command: already here, or never coming
        said, fds = _recv_fds(channel, 16, 1, _dontwait)
    except _blocking:
        said, fds = b"", []
    finally:
        channel.close()
    if _len(fds) != 1 or said != index.to_bytes(4, "little"):
        for got in fds:
            _close(got)
        raise _error(f"the parent did not hand over late part {index}")
    offset, size = table[index]
    # mapped, not read: its tensors lie over the file's pages (private, copy-on-write), so a
    # part of 128 MB costs no copy and no fresh pages inside the timing window (a read into a
    # new buffer took about 0.1 s there, per part and member)
    try:
        data = map_part(fds[0], offset, size)
    finally:
        _close(fds[0])
    return read_part(data, size)


def map_part(fd: int, offset: int, size: int, *, _mmap=mmap.mmap, _fstat=os.fstat,
             _view=memoryview, _grain=mmap.ALLOCATIONGRANULARITY, _private=mmap.MAP_PRIVATE,
             _prot=mmap.PROT_READ | mmap.PROT_WRITE, _error=RuntimeError) -> memoryview:
    """Bytes ``[offset, offset + size)`` of the file ``fd``, mapped privately (writable,
    never written back)."""
    start = offset - offset % _grain
    if _fstat(fd).st_size < offset + size:
        raise _error(f"late data ends before {offset + size} bytes")
    # (not ``MAP_POPULATE``: on a private writable mapping it copies every page, 126 ms for
    # 192 MB where the device copy's own faults cost less; H200 host: the worker's wait for a
    # KernelBench-size part went 10 -> 80-90 ms with it)
    mapped = _mmap(fd, offset + size - start, flags=_private, prot=_prot, offset=start)
    return _view(mapped)[offset - start:]


class _LateSlot(tuple):
    """A ``tensor_slots.TensorSlot`` as the late read builds it: a class of this module's, so
    the worker's private copy of it (``guards.private``) is what the unpickler makes, not the
    public ``TensorSlot``, whose ``__new__`` a submission could replace to run its own code
    while an unseen trial's part is mapped."""

    __slots__ = ()


class _LateShownSlot(_LateSlot):
    """A ``tensor_slots.ShownSlot`` as the late read builds it (``_LateSlot``)."""

    __slots__ = ()


# The names a part's structure may hold, bound at import: its slots (as this module's
# classes), torch's dtypes (a trial's non-tensor inputs may name one), ``torch.Size``,
# ``torch.device`` and the builtins pickle names by their module (a complex number, a slice, a
# range; a bytearray has an opcode of its own). Each is a type built in C or a slot class of
# this module's, whose building calls nothing of a module's names; ``torch.device``'s goes
# through torch's function-mode stack, and a part is asked for only with no mode pushed
# (``grade.worker.probes._mode_would_see_new_inputs``).
_PART_GLOBALS = types.MappingProxyType({
    (TensorSlot.__module__, "TensorSlot"): _LateSlot,
    (ShownSlot.__module__, "ShownSlot"): _LateShownSlot,
    **{("torch", name): value for name, value in _DTYPES.items()},
    ("torch", "Size"): torch.Size, ("torch", "device"): torch.device,
    **{("builtins", kind.__name__): kind for kind in (complex, slice, range)}})


class _PartUnpickler(pickle.Unpickler):
    """A part's structure unpickled with the names a part may hold (``_PART_GLOBALS``) as
    bound at import, never found by name in ``sys.modules`` (where a submission could have put
    a class or function of its own, whose code would run while the part is mapped). Any other
    name is refused: a function found by a name bound ahead would still read its own module's
    names when called, which a submission may have rebound (``tensor_slots.part_fault``, the
    grader's own check of each part before it hands one over, refuses such a part first)."""

    def find_class(self, module, name, *, _known=_PART_GLOBALS,
                   _error=pickle.UnpicklingError):
        found = _known.get((module, name))
        if found is None:
            raise _error(f"it names {module}.{name}, which a late part may not hold")
        return found


def read_part(data, size: int, *, _unpickler=_PartUnpickler, _file=io.BytesIO, _bytes=bytes,
              _int=int, _replace=_replaced, _type=type, _slot=_LateSlot,
              _frombuffer=torch.frombuffer, _view=torch.Tensor.view, _uint8=torch.uint8,
              _dtypes=_DTYPES,
              _tuple=tuple, _error=RuntimeError, _exception=Exception):
    """The structure of the late part in ``data`` (``size`` bytes) with its tensors over
    ``data`` (``tensor_slots.write_part`` wrote it), each slot a storage of its own;
    ``RuntimeError`` for a part that does not hold one."""
    if size < PART_TRAILER:
        raise _error(f"a late part of {size} bytes holds no structure")
    length = _int.from_bytes(data[size - PART_TRAILER:size], "little")
    if length > size - PART_TRAILER:
        raise _error(f"a late part is malformed ({length} of {size} bytes)")
    at = size - PART_TRAILER - length
    try:
        structure = _unpickler(_file(_bytes(data[at:at + length]))).load()
    except _exception as exc:  # said as what it is
        raise _error(f"a late part's structure does not load: {exc}") from None
    made: dict = {}

    def restore(item):
        if _type(item) is not _slot:
            return NotImplemented
        offset, nbytes, dtype, shape = item
        # one tensor per slot: two views that start at the same byte keep their shapes
        key = (offset, nbytes, dtype, _tuple(shape))
        if key not in made:
            if dtype not in _dtypes:
                raise _error(f"a late part names no dtype of torch's: {dtype!r}")
            raw = _frombuffer(data, dtype=_uint8, count=nbytes, offset=offset)
            made[key] = _view(_view(raw, _dtypes[dtype]), _tuple(shape))
        return made[key]

    return _replace(structure, restore)
