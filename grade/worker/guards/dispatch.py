"""The dispatcher's kernels for PyTorch's own ops (``aten``), read before the candidate's import
and again later: a submission may register a kernel of its own for an aten op (``torch.library.
Library("aten", "IMPL")``, a C++ ``TORCH_LIBRARY_IMPL``) and so decide what the harness's own
copies, clones and comparisons of its tensors return, bound functions or not (the harness's
``_tensor_clone`` still calls whatever kernel ``aten::clone`` holds). Any change to an aten op's
registrations since the snapshot is a replaced function (``patched`` in the run's facts).
"""
from __future__ import annotations

import torch

# bound at import, before any candidate code runs (``originals``)
_dump = torch._C._dispatch_dump
_op_names = torch._C._dispatch_get_all_op_names
_hash = hash
_str = str

# The ops the harness runs on a candidate's tensors inside its timing window (a copy to the
# host, a clone, what they allocate and copy through), by name before the overload: read there
# where the whole table would cost exclusive GPU time (3,000 ops, about 50 ms)
HARNESS_OPS = frozenset({"clone", "copy_", "_copy_from", "_copy_from_and_resize", "_to_copy",
                         "to", "empty", "empty_like", "empty_strided", "new_empty",
                         "new_empty_strided", "detach", "alias", "view", "_reshape_alias",
                         "reshape", "as_strided", "contiguous", "fill_", "set_",
                         "lift_fresh"})


# The dispatch keys a plain dense tensor's op passes through, on the host or a GPU, with or
# without autograd (the harness's tensors and a forward's): a kernel registered at one of them
# runs on those tensors. Others are left out: PyTorch registers kernels of its own at them
# lazily (``torch.vmap``'s decompositions at ``FuncTorchBatched`` on its first call, shape
# functions at ``Meta``), which reach only tensors of their kind (batched, fake, sparse).
KEYS = ("CPU", "CUDA", "Composite", "Autograd", "BackendSelect", "ADInplaceOrView",
        "Autocast")


def _digest(name: str) -> int:
    """The digest of an op's registrations at the ``KEYS`` (its dump's lines for them)."""
    return _hash(tuple(line for line in _dump(name).splitlines() if line.startswith(KEYS)))


def dispatch_snapshot() -> dict[str, int]:
    """Every aten op's registrations at the ``KEYS`` (``torch._C._dispatch_dump``), as a
    digest of each."""
    return {name: _digest(name) for name in _op_names() if _str(name).startswith("aten::")}


def dispatch_changed(snapshot: dict[str, int], only: frozenset | None = None) -> list[str]:
    """The aten ops whose registrations at the ``KEYS`` changed since ``snapshot`` (``only``:
    of those whose name before the overload is in it), each as ``dispatcher: aten::NAME``."""
    changed = []
    for name, digest in snapshot.items():
        if only is not None and name[6:].split(".", 1)[0] not in only:
            continue
        if _digest(name) != digest:
            changed.append(f"dispatcher: {name}")
    return changed
