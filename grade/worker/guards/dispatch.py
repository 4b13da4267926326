"""The dispatcher's kernels for the PyTorch ops the harness's own copies run through, read
before the candidate's import and again later: a submission may register a kernel of its own
for an aten op (``torch.library.Library("aten", "IMPL")``, a C++ ``TORCH_LIBRARY_IMPL``) and so
decide what the harness's copies, clones and allocations of its tensors hold, bound functions or
not (the harness's ``_tensor_clone`` still calls whatever kernel ``aten::clone`` holds). Any
change to those ops' registrations since the snapshot is a replaced function (``patched`` in
the run's facts). Other aten ops are the op trace's and the witness's: a kernel of its own that
computes with PyTorch is PyTorch computing (``torch_compute``).
"""
from __future__ import annotations

import torch

# bound at import, before any candidate code runs (``originals``)
_dump = torch._C._dispatch_dump
_op_names = torch._C._dispatch_get_all_op_names
_hash = hash
_str = str

# The ops the harness runs on a candidate's tensors (a copy to the host, a clone, what they
# allocate and copy through, the views it reads them by), by name before the overload
HARNESS_OPS = frozenset({"clone", "copy_", "_copy_from", "_copy_from_and_resize", "_to_copy",
                         "to", "empty", "empty_like", "empty_strided", "new_empty",
                         "new_empty_strided", "detach", "alias", "view", "_reshape_alias",
                         "reshape", "as_strided", "contiguous", "fill_", "set_", "lift_fresh",
                         "full", "ones_like", "zeros_like", "index_select", "select", "slice",
                         "narrow"})

# The dispatch keys a plain dense tensor's op passes through, on the host or a GPU, with or
# without autograd (the harness's tensors): a kernel registered at one of them runs on those
# tensors. Others are left out: PyTorch registers kernels of its own at some lazily
# (``torch.vmap``'s decompositions at ``FuncTorchBatched`` on its first call, shape functions
# at ``Meta``), which reach only tensors of their kind (batched, fake, sparse, nested).
KEYS = ("CPU:", "CUDA:", "CPU (", "CUDA (", "Composite", "Autograd[", "AutogradCPU",
        "AutogradCUDA", "AutogradOther", "BackendSelect", "ADInplaceOrView", "Autocast")


def _digest(name: str) -> int:
    """The digest of an op's registrations at the ``KEYS`` (its dump's lines for them)."""
    return _hash(tuple(line for line in _dump(name).splitlines() if line.startswith(KEYS)))


def dispatch_snapshot() -> dict[str, int]:
    """The registrations of every overload of the ``HARNESS_OPS`` at the ``KEYS``
    (``torch._C._dispatch_dump``), as a digest of each: about 50 overloads, read in 7 ms and
    checked again in 2 (a 2-core host)."""
    return {name: _digest(name) for name in _op_names()
            if _str(name).startswith("aten::") and
            _str(name)[6:].split(".", 1)[0] in HARNESS_OPS}


def dispatch_changed(snapshot: dict[str, int]) -> list[str]:
    """The ops of ``snapshot`` whose registrations changed since, each as
    ``dispatcher: aten::NAME``."""
    return [f"dispatcher: {name}" for name, digest in snapshot.items()
            if _digest(name) != digest]
