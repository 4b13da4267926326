"""Worker side: a problem built from its source and its forward run, seeded, on a device
(``probe`` and its measurement modules share these). Imports only torch, the standard library
and ``measure``."""
from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from . import measure as M


def seeds(base: int) -> dict[str, int]:
    return {"init": base, "weights": base + 1, "inputs": base + 2, "inputs_alt": base + 3,
            "forward": base + 4, "forward_alt": base + 5, "weights_alt": base + 6,
            "liveness": base + 7}


# Called before each forward while a stage holds the GPU lock shared
# (``probe_device._section``): lets a timing window that waits for the GPU in before the next
# forward.
_between_forwards: list[Callable[[], Any] | None] = [None]


def _mark(stage: str) -> None:
    """Tell the harness which stage we are in, so a crash reports it."""
    from .harness_worker import mark_stage

    mark_stage(stage)


def load_namespace(source: str, tag: str = "problem") -> dict:
    """Execute a problem source as a fresh module (``measure.load_namespace``)."""
    return M.load_namespace(source, tag, require=("Model", "get_inputs", "get_init_inputs"))


def _to_device(value: Any, device: str) -> Any:
    import torch

    if isinstance(value, (torch.Tensor, torch.nn.Module)):
        return value.to(device)  # a module built on the host is moved whole
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(v, device) for v in value)
    return value


def build_host(ns: dict, sd: dict[str, int], weight_seed: int | None = None):
    """The model as its source builds it (seeded; on the host, unless the source picks a
    device or runs under a device context)."""
    import torch

    torch.manual_seed(sd["init"])
    init = ns["get_init_inputs"]()
    torch.manual_seed(sd["weights"] if weight_seed is None else weight_seed)
    return ns["Model"](*init)


def draw_host(ns: dict, seed: int) -> list:
    """``get_inputs()`` after seeding the RNG (on the host, unless the source picks a device or
    runs under a device context)."""
    import torch

    torch.manual_seed(seed)
    return list(ns["get_inputs"]())


def _made_on(device: str, make: Callable[[], Any]) -> Any:
    """``make()`` with factory functions defaulting to ``device``: weights and inputs drawn by
    the GPU's RNG take milliseconds where the host's take seconds (15 s for a 1.6e9-element
    KernelBench input). Where the source cannot build on the device (a host generator, numpy),
    it is built on the host and moved. Seeded either way, so every worker gets the same."""
    import torch

    if M.is_cuda(device):
        try:
            with torch.device(device):
                return _to_device(make(), device)
        except Exception as exc:
            # out of memory is the parent's to judge (a rerun alone), never a reason to build
            # on the host instead: a half-built model then failed its forward with a device
            # mismatch, a `runs` failure caused by other workers' memory
            if _device_poisoned(exc) or "out of memory" in str(exc).lower():
                raise
    return _to_device(make(), device)


def build_model(ns: dict, sd: dict[str, int], device: str, weight_seed: int | None = None):
    return _made_on(device, lambda: build_host(ns, sd, weight_seed))


def draw_inputs(ns: dict, seed: int, device: str) -> list:
    return _made_on(device, lambda: draw_host(ns, seed))


def _clone(inputs: list) -> list:
    import torch

    return [v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v) for v in inputs]


def run_forward(model, inputs: list, forward_seed: int, device: str, *,
                clone: bool = True) -> list:
    """One forward on clones of ``inputs`` (``clone=False``: on ``inputs`` themselves, for a
    throwaway copy) after seeding the RNG; flattened detached outputs."""
    import torch

    if _between_forwards[0] is not None:
        _between_forwards[0]()
    args = _clone(inputs) if clone else inputs
    torch.manual_seed(forward_seed)
    with torch.no_grad():
        raw = model(*args)
    fault = M.output_fault(raw)
    if fault:  # the grader could compare nothing else: failed at ``runs``, as the grader says
        raise ValueError(fault)
    out = M.output_tensors(raw)
    M.synchronize(device)
    return out


def _float_tensors(inputs: list) -> list[tuple[int, Any]]:
    import torch

    return [(i, v) for i, v in enumerate(inputs)
            if isinstance(v, torch.Tensor) and v.is_floating_point()]


def _declared_dtype(outputs: list) -> str:
    for t in outputs:
        if t.is_floating_point():
            return str(t.dtype).replace("torch.", "")
    return "float32"


def _to_double_in_place(values: list) -> None:
    """Replace each floating-point tensor of ``values`` by its fp64 copy, one at a time, so
    an input the caller let go of is freed as soon as its copy exists."""
    import torch

    for k in range(len(values)):
        v = values[k]
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            values[k] = v.double()
        del v


def _nbytes(values) -> int:
    import torch

    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def _device_poisoned(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return "AcceleratorError" in text or "CUDA error" in text or "device-side assert" in text


def _measured(what: Callable[[], Any]) -> Any:
    """``what()``, or ``{"error": ...}`` when it raises: a measurement that cannot be made is a
    skipped check, never a crashed probe (a device-side failure still stops the probe)."""
    try:
        return what()
    except Exception as exc:
        if _device_poisoned(exc):
            raise
        return {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:200]}


def forward_unless_broken(model, inputs: list, forward_seed: int, device: str, *,
                          clone: bool = True) -> list | None:
    """``run_forward``, or None when a perturbed model's forward raises (the perturbed values
    were used: an index out of range, a domain error); a poisoned device is raised."""
    try:
        return run_forward(model, inputs, forward_seed, device, clone=clone)
    except Exception as exc:
        if _device_poisoned(exc):
            raise
        return None
