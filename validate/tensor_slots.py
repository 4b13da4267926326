"""Tensors that cross between the parent and a worker in a memory file instead of a pickle.

A ``TensorSlot`` ``(offset, nbytes, dtype name, shape)`` stands for a tensor whose bytes lie in
the run's file at that offset. Both ways use them:

- the job's payload (``payload_files._tensor_file``): the parent writes the file and seals it
  before any worker sees it; the worker maps it privately (``restore_slots``);
- the worker's result (``slot_tensors``, ``attach_slots``): the worker copies each large tensor
  that owns its storage into the run's results file, and its result frame carries only slots.
  A result frame's bytes are saved by ``torch.save``, MACed and read back, each of those a pass
  over every byte: a reference run's gigabyte of inputs and outputs took 4 s to send on an H200
  host. Here the tensor bytes are copied once. The parent reads the file only once the worker
  and its processes are gone, after sealing it against every write: a seal refused (someone
  still maps it writable) is a tampered channel.

Standard library only at import (the worker side imports it before any target runs).
"""
from __future__ import annotations

import array
import fcntl
import mmap
import os
import resource
import socket
import sys
import threading
import weakref
from typing import ClassVar

SLOT_BYTES = 1 << 16  # smaller tensors stay in the frame's pickle
_SEALS = ("F_SEAL_SEAL", "F_SEAL_SHRINK", "F_SEAL_GROW", "F_SEAL_WRITE")


class TensorSlot(tuple):
    """``(offset, nbytes, dtype name, shape)`` of a tensor that travels in a run's memory file
    (the job's payload file or the worker's results file) instead of a pickle: mapped, never
    copied or unpickled (a 600 MB job took seconds to unpickle and, in the parent, seconds to
    pickle under the interpreter lock)."""

    __slots__ = ()


class ShownSlot(TensorSlot):
    """A ``TensorSlot`` in a trusted run's *shown* file: what a reference run made for a
    candidate to be given as it is (the inputs it may see, the weights it is built with), kept
    apart from what no candidate may hold (outputs, the unseen check's inputs) so the parent can
    pass that file on to a candidate's worker instead of copying its tensors (``SealedFile``)."""

    __slots__ = ()


_SLOT_TYPES = (TensorSlot, ShownSlot)


class SlotError(RuntimeError):
    """The results file cannot be trusted or does not hold what the result's slots name."""


def _replaced(item, leaf, *, _type=type, _dict=dict, _list=list, _tuple=tuple, _zip=zip,
              _not_implemented=NotImplemented):
    """``item`` rebuilt through its dicts, lists and tuples, each element ``leaf`` takes
    (returns something other than ``NotImplemented`` for) replaced by what it returns. Bound
    at import, with no name looked up at call time: a late part's reading walks its trial
    through it (``late_read.read_part``). The walk is handed itself rather than closing over
    itself: a closure cell would make a cycle that keeps ``leaf``, and the mapping it holds,
    until the collector runs."""
    def walk(item, walk):
        got = leaf(item)
        if got is not _not_implemented:
            return got
        kind = _type(item)
        if kind is _dict or kind is _list or kind is _tuple:
            values = [walk(v, walk) for v in (item.values() if kind is _dict else item)]
            return _dict(_zip(item, values)) if kind is _dict else kind(values)
        return item

    return walk(item, walk)


def restore_slots(value, data, base: int = 0, shown=None):
    """``value`` with every ``TensorSlot`` replaced by a tensor over ``data`` (a buffer) at
    ``base`` plus its offset, every ``ShownSlot`` by one over ``shown`` at its offset; each slot
    a storage of its own (saved alone if it is returned)."""
    import torch

    made: dict[tuple, object] = {}

    def restore(item):
        if type(item) not in _SLOT_TYPES:
            return NotImplemented
        offset, nbytes, dtype, shape = item
        source = shown if type(item) is ShownSlot else data
        # one tensor per slot: two views that start at the same byte keep their shapes
        key = (type(item), offset, nbytes, dtype, tuple(shape))
        if key not in made:
            made[key] = torch.frombuffer(source, dtype=torch.uint8, count=nbytes,
                                         offset=(0 if source is shown else base) + offset) \
                .view(getattr(torch, dtype)).view(tuple(shape))
        return made[key]

    return _replaced(value, restore)


def slotted(value, takes, start: int = 0) -> tuple:
    """``value`` with each tensor that ``takes`` returns a tensor for (the tensor to store)
    replaced by a ``TensorSlot`` at a 64-byte-aligned offset from ``start`` on (one object,
    one slot: the other side gets one tensor too); also the (offset, tensor) chunks and their
    end."""
    chunks: list[tuple[int, object]] = []
    slots: dict[int, TensorSlot] = {}
    end = start

    def store(item):
        nonlocal end
        if id(item) in slots:
            return slots[id(item)]
        stored = takes(item)
        if stored is None:
            return NotImplemented
        offset = -(-end // 64) * 64
        nbytes = stored.numel() * stored.element_size()
        chunks.append((offset, stored))
        end = offset + nbytes
        slots[id(item)] = TensorSlot((offset, nbytes, str(stored.dtype)[6:],
                                      tuple(stored.shape)))
        return slots[id(item)]

    moved = _replaced(value, store)
    return moved, chunks, end


def slot_tensors(value, fd: int | None, _type=type, start: int = 0):
    """Worker side: ``value`` with each large CPU tensor that alone owns its whole storage
    (no view, no second tensor over it: what shares a storage keeps sharing it through
    ``torch.save``) copied into the results file ``fd`` after its first ``start`` bytes (what
    ``ResultsFile.put`` wrote there) and replaced by a ``TensorSlot``; ``value`` as it is
    without a file or such a tensor. One tensor found in several places of ``value`` (a
    worker's output shipped once for every call that gave those bytes) is one slot, which the
    parent maps as one tensor (``slotted``, ``restore_slots``). Raises ``SlotError`` where the
    tensors would pass the worker's file-size limit."""
    torch = sys.modules.get("torch")
    if fd is None or torch is None:
        return value
    owners: dict[int, set] = {}  # storage address -> the tensor objects over it

    def count(item):
        if _type(item) is torch.Tensor:
            if item.device.type == "cpu" and item.layout == torch.strided:
                owners.setdefault(item.untyped_storage().data_ptr(), set()).add(id(item))
        elif _type(item) in (dict, list, tuple):
            for v in (item.values() if _type(item) is dict else item):
                count(v)

    count(value)

    def takes(item) -> bool:
        if not plain_cpu_tensor(item, torch):
            return False
        nbytes = item.numel() * item.element_size()
        storage = item.untyped_storage()
        return nbytes >= SLOT_BYTES and item.storage_offset() == 0 and \
            storage.nbytes() == nbytes and len(owners.get(storage.data_ptr(), ())) == 1

    moved, chunks, end = slotted(value, lambda item: item if takes(item) else None, start)
    if not chunks:
        return value
    _within_file_limit(end)
    try:
        write_chunks(fd, chunks, end, torch)
    except OSError:  # a file this worker may not write (a confinement): the frame carries all
        return value
    return moved


def _within_file_limit(end: int) -> None:
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY and end > limit:
        raise SlotError(f"the run's result tensors are {end / 2**30:.1f} GiB, over the "
                        f"{limit / 2**30:.0f} GiB a file of this run may be: its tensors (each "
                        "trial's inputs and outputs) are too large to grade at this size; "
                        "shrink the problem's sizes")


class ResultsFile:
    """A worker's run results file from its task's side: ``put`` writes a tensor there as the
    task makes it and gives its ``TensorSlot`` for the result, where the tensor would
    otherwise be copied to the host and then into the file (``slot_tensors``): one copy
    instead of two, and no page of the host copy faulted in. For trusted tasks (a reference
    run): what is written here is written before the task's code has finished."""

    def __init__(self, fd: int | None, kind: type = TensorSlot):
        self.fd, self.end, self.kind = fd, 0, kind
        # how a piece's bytes go into the file (``pwrite_range``, this thread's)
        self.write = pwrite_range

    def put(self, tensor, look=None):
        """``tensor``'s bytes at the file's end, as a ``TensorSlot``; None where it does not
        go there (no file, a small, sparse or autograd tensor), and the caller keeps a copy.
        ``look(tensor)`` reads a device tensor's bytes on the host (default: a copy there; a
        worker passes its pinned staging buffer's)."""
        torch = sys.modules.get("torch")
        if self.fd is None or torch is None or type(tensor) is not torch.Tensor or \
                tensor.layout != torch.strided or tensor.requires_grad or \
                tensor.is_quantized or tensor.is_conj() or tensor.is_neg() or \
                not tensor.is_contiguous() or \
                tensor.numel() * tensor.element_size() < SLOT_BYTES:
            return None  # (a strided one keeps its strides in a copy of its own)
        nbytes = tensor.numel() * tensor.element_size()
        offset = -(-self.end // 64) * 64
        _within_file_limit(offset + nbytes)
        try:
            _write_host_bytes(self.fd, tensor, look, offset, torch, self.write)
        except OSError:  # a file this worker may not write: its tensors go in the frame
            self.fd = None
            return None
        self.end = offset + nbytes
        return self.kind((offset, nbytes, str(tensor.dtype)[6:], tuple(tensor.shape)))

    def rewind(self, mark: int) -> None:
        """Forget what was written past ``mark`` (an ``end`` read earlier): a task that runs
        its work again drops the first pass's tensors, none of whose slots it returns."""
        if self.fd is not None and 0 <= mark <= self.end:
            try:
                os.ftruncate(self.fd, mark)
            except OSError:
                return
            self.end = mark


def send_fds(channel, data: bytes, fds: list[int], flags: int = 0) -> int:
    """``data`` and the descriptors ``fds`` in one message on the AF_UNIX socket ``channel``,
    with ``flags`` (``MSG_DONTWAIT``: raise ``BlockingIOError`` rather than wait). Not
    ``socket.send_fds``, which before Python 3.12 (3.11 here) drops its flags and waits."""
    return channel.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                     array.array("i", fds))] if fds else [], flags)


_CLOEXEC = getattr(socket, "MSG_CMSG_CLOEXEC", 0)  # each received descriptor close-on-exec


def recv_fds(channel, size: int, most: int, flags: int = 0, *, _array=array.array,
             _cmsg_len=socket.CMSG_LEN, _cloexec=_CLOEXEC,
             _level=socket.SOL_SOCKET, _rights=socket.SCM_RIGHTS, _len=len,
             _list=list) -> tuple[bytes, list[int]]:
    """One message from the AF_UNIX socket ``channel``: its data and the descriptors it
    carried (at most ``most``; each close-on-exec), with ``flags`` (``MSG_DONTWAIT``: raise
    ``BlockingIOError`` rather than wait). Not ``socket.recv_fds``, which before Python 3.12
    drops its flags. Bound at import: a late part's descriptor comes through it
    (``late_read``)."""
    fds = _array("i")
    data, ancillary, _flags, _address = channel.recvmsg(
        size, _cmsg_len(most * fds.itemsize), flags | _cloexec)
    for level, kind, payload in ancillary:
        if level == _level and kind == _rights:
            fds.frombytes(payload[:_len(payload) - _len(payload) % fds.itemsize])
    return data, _list(fds)


# A late part (``payload_files._LateFile``, ``late_read.late_payload``): its tensors' bytes
# from the file's start (``TensorSlot`` offsets from 0), then the pickle of its structure, then
# that pickle's length in 8 bytes: written in one pass, by whoever makes it (the grader from a
# trial's tensors, or a trusted reference run as it draws them: ``write_part``).
PART_TRAILER = 8
# What a trusted run's result carries in place of a late part it handed over in a file of its
# own (``harness_worker.late_part``): ``{LATE_PART: index}``
LATE_PART = "__kernelmill_late_part__"


def part_bytes(structure: bytes) -> bytes:
    """What follows a part's tensors: its structure's pickle and that pickle's length."""
    return structure + len(structure).to_bytes(PART_TRAILER, "little")


def file_part_structure(fd: int, size: int) -> bytes:
    """The structure's pickle of the part of ``size`` bytes at the start of the file ``fd``
    (``write_part``); ``SlotError`` where it holds none."""
    if size < PART_TRAILER:
        raise SlotError(f"a late part of {size} bytes holds no structure")
    length = int.from_bytes(os.pread(fd, PART_TRAILER, size - PART_TRAILER), "little")
    if length > size - PART_TRAILER:
        raise SlotError(f"a late part is malformed ({length} of {size} bytes)")
    return os.pread(fd, length, size - PART_TRAILER - length)


# pickle opcodes a part's structure may not hold: EXT* and PERSID look an object up where a
# submission could have put its own in the worker (``copyreg``'s extension cache and registry,
# a persistent-id hook), with no name for ``late_read`` to refuse; BUILD sets an object's
# state or attributes (on a class the read builds, its methods), which no part needs
_PART_OPCODES_UNNAMED = frozenset({"EXT1", "EXT2", "EXT4", "PERSID", "BINPERSID", "INST", "OBJ"})
_PART_OPCODES_REFUSED = _PART_OPCODES_UNNAMED | {"BUILD"}
# A part's structure is a few slots and numbers: a longer one is refused unread
PART_STRUCTURE_MAX_BYTES = 16 << 20


def part_fault(structure: bytes, allowed) -> str | None:
    """Why a late part's structure (its pickle) cannot be handed to a candidate's worker, or
    None: over ``PART_STRUCTURE_MAX_BYTES``, a global outside ``allowed`` (keyed by ``(module,
    name)``: ``late_read._PART_GLOBALS``, all the worker's reading knows), or an opcode
    ``_PART_OPCODES_REFUSED`` names. Its names are read with an unpickler that builds a stand-in
    of its own for each name it knows (one that takes any construction and holds nothing), so
    no other code runs in the grader, and none of its objects is built (a ``range`` of a
    billion elements, a size made of one) or changed, whoever wrote the part."""
    import io
    import pickle
    import pickletools

    if len(structure) > PART_STRUCTURE_MAX_BYTES:
        return f"its structure is {len(structure)} bytes, over {PART_STRUCTURE_MAX_BYTES}"
    try:
        used = {op.name for op, _arg, _pos in pickletools.genops(structure)}
    except Exception as exc:  # noqa: BLE001 — said as what it is
        return f"its structure is not a pickle ({exc})"
    if used & _PART_OPCODES_UNNAMED:  # (these would bypass the names' check below)
        return f"its structure uses the pickle opcodes {sorted(used & _PART_OPCODES_UNNAMED)}"

    class StandIn:
        def __new__(cls, *args, **kwargs):
            return object.__new__(cls)

        def __init__(self, *args, **kwargs):
            pass

    class Allowed(pickle.Unpickler):
        def find_class(self, module, name):
            if (module, name) not in allowed:
                raise pickle.UnpicklingError(
                    f"an unseen trial holds {module}.{name}; a trial's inputs may hold "
                    "tensors, numbers, strings, dtypes, sizes and devices, in lists, tuples "
                    "and dicts")
            return StandIn

    try:
        Allowed(io.BytesIO(structure)).load()
    except pickle.UnpicklingError as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 — said as what it is
        return f"its structure does not load ({type(exc).__name__}: {exc})"
    if used & _PART_OPCODES_REFUSED:
        return f"its structure uses the pickle opcodes {sorted(used & _PART_OPCODES_REFUSED)}"
    return None


def write_part(fd: int, value, look, write=None) -> int:
    """``value`` (tensors in dicts, lists and tuples) written into the file ``fd`` as one late
    part: each tensor's bytes as it comes (``look(tensor)`` gives a device tensor's on the host,
    valid until the next call; ``write`` puts a piece's bytes in the file, by default this
    thread's ``pwrite_range``), then its structure; returns the part's size."""
    import pickle

    import torch

    end = 0

    def store(item):
        nonlocal end
        if type(item) is not torch.Tensor:
            return NotImplemented
        if item.device.type == "cpu":
            item = item.detach().contiguous()
        offset = -(-end // 64) * 64
        nbytes = item.numel() * item.element_size()
        _within_file_limit(offset + nbytes)
        _write_host_bytes(fd, item, look, offset, torch, write)
        end = offset + nbytes
        return TensorSlot((offset, nbytes, str(item.dtype)[6:], tuple(item.shape)))

    tail = part_bytes(pickle.dumps(_replaced(value, store), protocol=pickle.HIGHEST_PROTOCOL))
    _within_file_limit(end + len(tail))
    pwrite_range(fd, memoryview(tail), end)
    return end + len(tail)


def _write_host_bytes(fd: int, tensor, look, offset: int, torch, write=None) -> None:
    """``tensor``'s bytes written to ``fd`` at ``offset`` (by ``write``, default
    ``pwrite_range``): a host tensor's from where they lie, a device tensor's as
    ``look(tensor)`` gives them on the host (a tensor like it, or 1-D byte tensors in order,
    each written before the next is asked for)."""
    write = write or pwrite_range
    if tensor.device.type == "cpu":
        pieces = [tensor.detach()]
    else:
        looked = (look or (lambda t: t.detach().to("cpu")))(tensor)
        pieces = [looked] if type(looked) is torch.Tensor else looked
    nbytes = tensor.numel() * tensor.element_size()
    at = offset
    for piece in pieces:
        with memoryview(piece.reshape(-1).view(torch.uint8).numpy()) as view:
            write(fd, view, at)
            at += len(view)
    if at - offset != nbytes:
        raise ValueError(f"wrote {at - offset} bytes of a {nbytes}-byte tensor")


def write_chunks(fd: int, chunks: list, end: int, torch) -> None:
    """The file ``fd`` sized to ``end`` and each (offset, tensor) chunk's bytes written there:
    written, not mapped (the kernel copies into the file's pages as it allocates them; a
    mapping's page faults cost more than the copy)."""
    os.ftruncate(fd, end)
    for offset, tensor in chunks:
        with memoryview(tensor.reshape(-1).view(torch.uint8).numpy()) as view:
            pwrite_range(fd, view, offset)


def pwrite_range(fd: int, view: memoryview, offset: int) -> None:
    """All of ``view`` written to ``fd`` at ``offset`` by this thread, a gigabyte at most per
    call (``pwrite`` may write less than it is given)."""
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:done + (1 << 30)], offset + done)


def plain_cpu_tensor(item, torch) -> bool:
    """A contiguous, strided CPU tensor without autograd, quantisation or lazy conjugate or
    negation bits: one whose bytes are its values, in order."""
    return type(item) is torch.Tensor and item.device.type == "cpu" and \
        item.layout == torch.strided and not item.requires_grad and not item.is_quantized and \
        not item.is_conj() and not item.is_neg() and item.is_contiguous()


def has_slots(value) -> bool:
    if type(value) in _SLOT_TYPES:
        return True
    if type(value) in (dict, list, tuple):
        return any(has_slots(v) for v in (value.values() if type(value) is dict else value))
    return False


def attach_slots(value, fd: int, shown: SealedFile | None = None):
    """Parent side, once the worker and its processes are gone: ``value`` with every
    ``TensorSlot`` replaced by a tensor mapped (private, copy-on-write) from the results file
    ``fd`` and every ``ShownSlot`` by one from the run's shown file (``shown``), after sealing
    each against every write, growth and shrinking. Raises ``SlotError`` where a seal is refused
    (a process still maps the file writable: what it read could change under the judge) or a
    slot does not fit its file or names no dtype."""
    import torch

    if not has_slots(value):
        return value
    size = _sealed_size(fd, "result's tensor file")
    shown_size = shown.seal() if shown is not None else None

    def check(item):
        if type(item) in _SLOT_TYPES:
            if len(item) != 4:
                raise SlotError(f"a malformed tensor slot {str(item)[:80]}")
            within = shown_size if type(item) is ShownSlot else size
            if within == 0 and type(item) is TensorSlot:
                raise SlotError("the result names tensors in its file, and the file is empty")
            if within is None:
                raise SlotError("the result names a shown tensor, and its run has no shown file")
            offset, nbytes, dtype, shape = item
            kind = getattr(torch, dtype, None) if type(dtype) is str else None
            if not isinstance(kind, torch.dtype) or type(offset) is not int or \
                    type(nbytes) is not int or offset < 0 or nbytes < 0 or \
                    offset + nbytes > within or not all(type(n) is int and n >= 0 for n in shape):
                raise SlotError(f"a tensor slot outside the result's file: {str(item)[:120]}")
            numel = 1
            for n in shape:
                numel *= n
            if numel * torch.empty(0, dtype=kind).element_size() != nbytes:
                raise SlotError(f"a tensor slot whose shape and dtype are not its bytes: "
                                f"{str(item)[:120]}")
        elif type(item) in (dict, list, tuple):
            for v in (item.values() if type(item) is dict else item):
                check(v)

    check(value)
    data = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE) \
        if size else None
    return restore_slots(value, data, shown=shown.map() if shown is not None else None)


def _sealed_size(fd: int, what: str) -> int:
    """The size of the file ``fd`` once sealed against every change; ``SlotError`` where the
    seal is refused."""
    try:
        fcntl.fcntl(fd, getattr(fcntl, "F_ADD_SEALS", 1033), _seal_bits())
    except OSError as exc:
        raise SlotError(f"the {what} could not be sealed ({exc}): another process still "
                        "holds it writable") from None
    return os.fstat(fd).st_size


class HeldFile:
    """A descriptor this object holds, closed when it goes."""

    def __init__(self, fd: int):
        self.fd: int | None = fd

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __del__(self):
        self.close()


class SealedFile(HeldFile):
    """A trusted run's shown file (``ShownSlot``), parent side: sealed, mapped, and passed on
    as it is (a new descriptor of it, ``passed_on``) to a worker whose payload's large tensors
    all lie in it, where they would otherwise be copied into a payload file of its own (a
    second of the grading process's CPU per KernelBench-size grade). The descriptor is closed
    when this object goes; a run's ``WorkerResult.shown`` holds it as long as the result."""

    _live: ClassVar[list] = []  # weak references to the files mapped, for ``passed_on``
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, fd: int):
        super().__init__(fd)
        self.size = 0
        self._data = None
        self._base = 0

    def seal(self) -> int:
        self.size = _sealed_size(self.fd, "run's shown tensor file")
        return self.size

    def map(self):
        if self._data is None and self.size:
            import ctypes

            self._data = mmap.mmap(self.fd, self.size, flags=mmap.MAP_PRIVATE,
                                   prot=mmap.PROT_READ | mmap.PROT_WRITE)
            self._base = ctypes.addressof(ctypes.c_char.from_buffer(self._data))
            with SealedFile._lock:
                SealedFile._live[:] = [r for r in SealedFile._live if r() is not None]
                SealedFile._live.append(weakref.ref(self))
        return self._data

    def offset_of(self, tensor) -> int | None:
        """Where ``tensor``'s bytes lie in the file, or None: not all in it, or changed since
        (written in place: the parent's mapping is private, so the file would not show it)."""
        try:
            changed = tensor._version != 0
        except RuntimeError:  # an inference tensor keeps no version: not known to be unchanged
            return None
        if self._data is None or self.fd is None or changed:
            return None
        offset = tensor.data_ptr() - self._base
        nbytes = tensor.numel() * tensor.element_size()
        return offset if 0 <= offset and offset + nbytes <= self.size else None


def passed_on(payload, large) -> tuple | None:
    """``payload`` with each tensor ``large(tensor)`` says travels in a file replaced by its
    ``TensorSlot`` in the one ``SealedFile`` they all lie in, and a new read-only descriptor of
    that file; None where some lie in none or in different ones (they are copied then)."""
    with SealedFile._lock:
        files = [f for f in (r() for r in SealedFile._live) if f is not None and f.fd is not None]
    if not files:
        return None
    chosen: list = []
    try:
        moved = _slots_in(payload, large, files, chosen)
    except LookupError:
        return None
    finally:
        files.clear()
    if not chosen:
        return None
    fd = chosen[0].fd
    try:  # an open file of its own, read-only: the worker shares no offset or mode with ours
        return moved, os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return moved, os.dup(fd)


def _slots_in(value, large, files: list, chosen: list):
    """``value`` with each large tensor replaced by its slot in the file it lies in (``chosen``
    holds that file once found: every other tensor must lie there too); ``LookupError`` for one
    that lies in none."""

    def slot(item):
        if not large(item):
            return NotImplemented
        for file in chosen or files:
            offset = file.offset_of(item)
            if offset is not None:
                chosen[:] = [file]
                return TensorSlot((offset, item.numel() * item.element_size(),
                                   str(item.dtype)[6:], tuple(item.shape)))
        raise LookupError

    return _replaced(value, slot)


def _seal_bits() -> int:
    bits = 0  # F_SEAL_SEAL, SHRINK, GROW, WRITE where this Python names them
    for name, default in zip(_SEALS, (1, 2, 4, 8)):
        bits |= getattr(fcntl, name, default)
    return bits
