"""``constant_parameters``: each floating-point parameter or buffer that is exactly constant after
construction (zeros, ones, a tiny layer-scale) is drawn again alone: the output must move. Also
the redrawn state that ``bypass`` tries its bypasses on."""
from __future__ import annotations

import math
from typing import Any

from ..model_copy import copy_model
from .common import forward, within

# Most constant tensors drawn again one at a time.
MOST_CONSTANTS = 24


def constant_tensors(model) -> list[tuple[str, Any]]:
    """(name, tensor) of every floating-point parameter and buffer whose elements all equal."""
    import torch

    found = []
    named = [*model.named_parameters(), *model.named_buffers()]
    for name, t in named:
        if not t.is_floating_point() or t.numel() == 0 or t.is_meta:
            continue
        with torch.no_grad():
            flat = t.detach().reshape(-1)
            if bool(torch.isfinite(flat[:1]).all()) and bool((flat == flat[0]).all()):
                found.append((name, t))
    return found


def redraw(t, gen) -> None:
    """Draw an exactly-constant tensor again at a similar scale: a non-zero constant ``c``
    becomes ``c * exp(N(0, 1/4))`` per element (sign and magnitude kept: a variance stays
    positive, a layer-scale of 1e-6 stays tiny); zeros become ``N(0, s^2)`` with ``s`` the
    usual ``1/sqrt(fan_in)`` of a matrix, 0.5 for a vector."""
    import torch

    with torch.no_grad():
        c = float(t.detach().reshape(-1)[0])
        noise = torch.randn(t.shape, generator=gen, dtype=torch.float32).to(t.device)
        if c != 0.0:
            t.copy_((noise * 0.5).exp_().mul_(c).to(t.dtype))
        else:
            fan_in = t.numel() // t.shape[0] if t.dim() >= 2 else 0
            scale = 1.0 / math.sqrt(fan_in) if fan_in else 0.5
            t.copy_(noise.mul_(scale).to(t.dtype))


def perturbed_constants(model, seed: int):
    """A copy of ``model`` whose exactly-constant tensors are drawn again (None: none)."""
    import torch

    alt = copy_model(model)
    constants = constant_tensors(alt)
    if not constants:
        return None
    gen = torch.Generator(device="cpu").manual_seed(seed)
    for _name, t in constants:
        redraw(t, gen)
    return alt


def constant_parameters(model, inputs: list, ref: list, forward_seed: int, tol: float,
                        seed: int, copies: bool = True) -> dict | None:
    """Each constant tensor drawn again alone (on a copy, restored after): the ones whose new
    value leaves the output within tolerance have no effect on it. None: no constant tensor."""
    import torch

    work = copy_model(model)
    constants = constant_tensors(work)
    if not constants:
        return None
    gen = torch.Generator(device="cpu").manual_seed(seed)
    unused: list[str] = []
    tried = 0
    for name, t in constants[:MOST_CONSTANTS]:
        value = float(t.detach().reshape(-1)[0])
        redraw(t, gen)
        try:
            out = forward(work, inputs, forward_seed, copies)
        except Exception:  # noqa: BLE001 — a value the forward rejects is not an unused one
            out = None
        with torch.no_grad():
            t.fill_(value)
        tried += 1
        if out is not None and within(out, ref, tol):
            unused.append(f"{name} (constant {value:.3g})")
    return {"tried": tried, "total": len(constants), "unused": unused}
