"""``duplicate_writes``: writes whose winner is undefined: scatter / index_put / index_copy /
put (and a max unpool) writing two values to one place, and any in-place or ``out=`` write into a
view whose elements share memory (``unfold`` with a step under its size, ``as_strided``), where
first or last writer wins as the device and its threads happen to order them."""
from __future__ import annotations

from typing import Any

from .common import forward


def _destinations(index, dim: int, shape) -> Any:
    """Flat destinations of a scatter's ``index`` along ``dim`` into a tensor of ``shape``."""
    import torch

    lin = torch.zeros(index.shape, dtype=torch.int64, device=index.device)
    for d in range(index.dim()):
        if d == dim:
            coord = index.to(torch.int64) % max(1, shape[d])
        else:
            view = [1] * index.dim()
            view[d] = index.shape[d]
            coord = torch.arange(index.shape[d], device=index.device).view(view)
        lin = lin * shape[d] + coord
    return lin.reshape(-1)


def _repeats(lin) -> int:
    """How many destinations of ``lin`` are written more than once."""
    import torch

    if lin.numel() < 2:
        return 0
    _values, counts = torch.unique(lin, return_counts=True)
    return int((counts > 1).sum())


def _index_put_repeats(self_t, indices, values) -> int:
    import torch

    if isinstance(values, torch.Tensor) and values.numel() <= 1:
        return 0
    picked = [(d, i) for d, i in enumerate(indices) if i is not None]
    if not picked or any(i.dtype == torch.bool for _d, i in picked):
        return 0
    try:
        broadcast = torch.broadcast_tensors(*[i for _d, i in picked])
    except RuntimeError:
        return 0
    lin = torch.zeros(broadcast[0].shape, dtype=torch.int64, device=broadcast[0].device)
    for (d, _i), idx in zip(picked, broadcast):
        lin = lin * self_t.shape[d] + idx.to(torch.int64) % max(1, self_t.shape[d])
    return _repeats(lin.reshape(-1))


def _unpool_repeats(values, indices) -> int:
    """Places of a max-unpooling's output written with two different values: its indices are
    positions within each plane, and overlapping pooling windows can pick one position twice
    (harmless while the values written there agree, as they do straight after the pooling)."""
    import torch

    planes = int(indices[..., 0, 0].numel()) if indices.dim() >= 3 else 1
    flat = indices.reshape(planes, -1).to(torch.int64)
    lin = (flat + torch.arange(planes, device=flat.device)[:, None] *
           (int(flat.max()) + 1 if flat.numel() else 1)).reshape(-1)
    return _clashing_places(lin, values.reshape(-1), nan_agrees=False)


def _clashing_places(lin, values, nan_agrees: bool) -> int:
    """Places of ``lin`` (flat destinations, one per value) written with two different values;
    with ``nan_agrees``, NaN written over NaN is one value."""
    import torch

    order = torch.argsort(lin, stable=True)
    lin, values = lin[order], values[order]
    same = values[1:] == values[:-1]
    if nan_agrees and values.is_floating_point():
        same |= values[1:].isnan() & values[:-1].isnan()
    clash = (lin[1:] == lin[:-1]) & ~same
    return int(torch.unique(lin[1:][clash]).numel())


# Elements of a written view whose memory places are worked out one by one at most (an int64
# each); a larger view that PyTorch cannot tell overlap-free is not judged
OVERLAP_ELEMENTS = 1 << 24


def _overlap_repeats(dest, values=None) -> int:
    """Memory places a write into ``dest`` reaches through two of its elements or more, where
    PyTorch itself cannot tell (``_debug_has_internal_overlap`` 2: too hard; 1, a plain overlap,
    makes PyTorch refuse the write). With ``values`` (a copy's source), only places written
    with two different values count: a patch copied over another that agrees is no race."""
    import torch

    if not isinstance(dest, torch.Tensor) or dest.numel() < 2 or \
            dest.numel() > OVERLAP_ELEMENTS or torch._debug_has_internal_overlap(dest) != 2:
        return 0
    lin = torch.full((), dest.storage_offset(), dtype=torch.int64)
    for size, stride in zip(dest.shape, dest.stride()):
        lin = lin.unsqueeze(-1) + torch.arange(size, dtype=torch.int64) * stride
    lin = lin.reshape(-1)
    if not isinstance(values, torch.Tensor):
        return _repeats(lin)
    try:
        written = values.detach().to("cpu").expand(dest.shape).reshape(-1)
    except RuntimeError:
        return _repeats(lin)
    return _clashing_places(lin, written, nan_agrees=True)


def _in_place_repeats(name: str, args: tuple, kwargs: dict) -> int:
    """Places an in-place op (``copy_``, ``add_``...) or an ``out=`` write reaches twice through
    its destination's overlapping elements."""
    base = name.split(".")[-1]
    out = kwargs.get("out")
    if base in ("fill_", "zero_", "masked_fill_"):  # one value wherever it lands
        return 0
    if base.endswith("_") and not base.startswith("_") and args:
        return _overlap_repeats(args[0], args[1] if base == "copy_" and len(args) > 1 else None)
    if out is not None:
        return max([_overlap_repeats(t) for t in (out if isinstance(out, (tuple, list))
                                                   else (out,))] or [0])
    return 0


def _write_repeats(name: str, args: tuple, kwargs: dict) -> int:
    """Destinations written twice by one order-undefined write op (0: none, or not one)."""
    import torch

    overlapping = _in_place_repeats(name, args, kwargs)
    if overlapping:
        return overlapping
    base = name.split(".")[-1].rstrip("_")
    if base in ("index_put", "_index_put_impl"):
        accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
        return 0 if accumulate else _index_put_repeats(args[0], args[1], args[2])
    if base == "index_copy":
        return _repeats(args[2].reshape(-1).to(torch.int64))
    if base == "put":
        accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
        return 0 if accumulate else _repeats(args[1].reshape(-1).to(torch.int64))
    if base in ("max_unpool2d", "max_unpool3d"):
        return _unpool_repeats(args[0], args[1])
    if base == "scatter":
        src = args[3] if len(args) > 3 else kwargs.get("src", kwargs.get("value"))
        if not isinstance(src, torch.Tensor) or src.numel() <= 1 or kwargs.get("reduce") \
                or len(args) > 4:
            return 0
        dim = args[1] % max(1, args[0].dim())
        return _repeats(_destinations(args[2], dim, args[0].shape))
    return 0


def duplicate_writes(model, inputs: list, forward_seed: int, copies: bool = True) -> list[str]:
    """Each write op of one forward (index_put, index_copy, scatter with a source, put, max
    unpooling, an in-place or ``out=`` write into a view over shared memory) that writes more
    than one value to one place, as ``"<op>: N place(s) written more than once"``."""
    from torch.utils._python_dispatch import TorchDispatchMode

    found: dict[str, int] = {}

    class Writes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = str(func.overloadpacket)
            try:
                repeats = _write_repeats(name, args, kwargs)
            except Exception:  # noqa: BLE001 — unreadable indices are not judged
                repeats = 0
            if repeats:
                found[name] = found.get(name, 0) + repeats
            return func(*args, **kwargs)

    with Writes():
        forward(model, inputs, forward_seed, copies)
    return [f"{name.replace('aten.', '')}: {n} place(s) written more than once"
            for name, n in found.items()]
