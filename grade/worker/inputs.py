"""A trial's inputs: drawn from the problem's ``get_inputs`` under the parent's seed, transformed
by the trial's distribution, moved between the host and the device."""
from __future__ import annotations

import torch
from kernelmill.validate.distributions import DISTRIBUTIONS

from .guards.originals import (
    _empty,
    _Tensor,
    _tensor_clone,
    _tensor_copy,
    _tensor_detach,
    _tensor_narrow,
    _tensor_reshape,
    _tensor_to,
    _tensor_view,
    _type,
)
from .seeding import _manual_seed

# ---------------------------------------------------------------- building sources

def to_device(values: list, device: str) -> list:
    return [_tensor_to(v, device, copy=True) if _type(v) is _Tensor else v for v in values]


def to_cpu(value):
    return _tensor_to(_tensor_detach(value), "cpu", copy=True)


# One page-locked host buffer per worker that device tensors are copied into to be read on the
# host (``look``): the GPU's copy engine writes it directly, where a copy to new pageable memory
# is the driver's staged copy plus the CPU's page faults and memcpy (34% of a candidate worker's
# CPU, sampled with py-spy at KernelBench sizes on an H200 host: its inputs copied after every
# call to be compared with those sent, and outputs that are the same bits as one already
# shipped). Its state is a dict of this module, which the candidate's run holds a private copy
# of (``guards.private`` copies dicts, not other objects): a submission that rebinds or fills
# the public module's never reaches the one the harness reads.
STAGING_MAX_BYTES = 256 << 20  # the largest buffer
_STAGING: dict = {"buffer": None}


def _staged():
    buffer = _STAGING.get("buffer")
    return buffer if _type(buffer) is _Tensor else None


def reserve_staging(nbytes: int) -> None:
    """The buffer, for tensors of up to ``nbytes`` (at most ``STAGING_MAX_BYTES``), allocated
    and copied into once now, once: a worker that watches for new threads reserves it before
    its snapshot of them (the runtime may start one at the first page-locked allocation or
    copy)."""
    if _staged() is None and nbytes > 0 and torch.cuda.is_initialized():
        _STAGING["buffer"] = _empty(min(nbytes, STAGING_MAX_BYTES), dtype=torch.uint8,
                                    pin_memory=True)
        look(_empty(min(nbytes, STAGING_MAX_BYTES, 1 << 16), dtype=torch.uint8, device="cuda"))
        torch.cuda.synchronize()


def look(value):
    """A host tensor with ``value``'s bytes, valid until the next ``look``: a view of the buffer
    for a contiguous CUDA tensor that fits it, else its own copy (``to_cpu``)."""
    buffer = _staged()
    nbytes = value.numel() * value.element_size()
    if buffer is None or value.device.type != "cuda" or not nbytes or \
            nbytes > buffer.numel() or not value.is_contiguous():
        return to_cpu(value)
    try:
        view = buffer[:nbytes].view(value.dtype).view(value.shape)
    except RuntimeError:  # a dtype bytes do not view as
        return to_cpu(value)
    _tensor_copy(view, _tensor_detach(value))
    return view


def look_pieces(value):
    """``value``'s bytes on the host, in order, as 1-D byte tensors each valid until the next
    is asked for (a file's writer takes them one by one): for a contiguous CUDA tensor larger
    than the staging buffer, piece after piece through the buffer (KernelBench's 6.4 GB
    inputs and outputs copied whole went to fresh host memory each time, a page fault per
    4 KiB); else ``look``'s one copy."""
    buffer = _staged()
    nbytes = value.numel() * value.element_size()
    if buffer is None or value.device.type != "cuda" or not value.is_contiguous() or \
            nbytes <= buffer.numel():
        yield _tensor_view(_tensor_reshape(look(value), -1), torch.uint8)
        return
    flat = _tensor_view(_tensor_reshape(_tensor_detach(value), -1), torch.uint8)
    step = buffer.numel()
    for start in range(0, nbytes, step):
        size = min(step, nbytes - start)
        piece = _tensor_narrow(buffer, 0, 0, size)
        _tensor_copy(piece, _tensor_narrow(flat, 0, start, size))
        yield piece


def into_blocks(values: list, blocks) -> list | None:
    """``values`` (tensors) copied into ``blocks`` (byte tensors on the host, one each, of
    exactly their size, touched before: no page faults now), as views of them: host tensors
    of their own, as ``keep(look(...))`` gives; None where they do not fit one to one."""
    if not blocks or len(blocks) != len(values):
        return None
    kept = []
    for value, block in zip(values, blocks):
        if _type(value) is not _Tensor or _type(block) is not _Tensor or \
                value.numel() * value.element_size() != block.numel():
            return None
        try:
            view = _tensor_view(_tensor_view(block, value.dtype), value.shape)
        except RuntimeError:  # a dtype bytes do not view as
            return None
        _tensor_copy(view, _tensor_detach(value))
        kept.append(view)
    return kept


def keep(looked):
    """A host tensor of its own for what ``look`` returned (kept past the next look)."""
    buffer = _staged()
    if buffer is not None and looked.untyped_storage().data_ptr() == \
            buffer.untyped_storage().data_ptr():
        return _tensor_clone(looked)
    return looked


# Input distributions beyond the problem's own draws (T-19): the table the validator measured
# each problem under (``validate.distributions``). A trial whose reference is not finite is left
# out (``reference_tasks._reference_trials``).
def transform(values: list, dist: str) -> list:
    """A trial's inputs under distribution ``dist`` (``DISTRIBUTIONS``)."""
    scale, shift = DISTRIBUTIONS[dist]
    if dist == "natural":
        return values
    out = []
    for value in values:
        if _type(value) is _Tensor and value.is_floating_point():
            value = value * scale + shift if shift else value * scale
        out.append(value)
    return out


def draw_inputs(ns: dict, device: str, seed: int) -> list:
    """A trial's inputs: the problem's ``get_inputs()`` under ``seed``, its tensors made on
    the device the trial runs on (the same distributions; a GPU draws 16 M normal values in
    microseconds where the host took 0.15 s, times every tensor, trial and group member, all
    grades of a GPU sharing its host's cores). A ``get_inputs`` that needs host tensors (it
    calls ``.numpy()``, say) draws them on the host."""
    _manual_seed(seed)
    if device.startswith("cuda"):
        try:
            with torch.device(device):
                return list(ns["get_inputs"]())
        except Exception:  # noqa: BLE001 — drawn on the host below, as written
            _manual_seed(seed)
    return list(ns["get_inputs"]())
