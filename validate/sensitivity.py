"""Worker side: how a problem's output depends on what it is given, measured by perturbing it:
its inputs, its parameters, each floating-point buffer, and the grader's input distributions
(``distributions.DISTRIBUTIONS``: finite, and float32 noise against float64 within a share of
the tolerance). Imports only torch, the standard library and validation's worker modules."""
from __future__ import annotations

import math
from collections.abc import Callable

from . import checks as C
from . import distributions as D
from .forwards import _device_poisoned, _to_double_in_place, forward_unless_broken, run_forward
from .model_copy import copy_model


def _sensitivity(model, ref_out, alt_out, ref_inputs, alt_inputs, sd, device, tol, margin,
                 copies: bool = True) -> list[dict]:
    """Vary each tensor input alone (alt draw), then report the fraction of elements that move.
    With one input that varies, the whole alt draw (``alt_out``) already varied it alone: one
    entry, ``inputs``, and no forward; none when no input varies."""
    import torch

    varied = [i for i, (a, b) in enumerate(zip(ref_inputs, alt_inputs))
              if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
              and a.shape == b.shape and not torch.equal(a, b)]
    entries: list[dict] = []
    if len(varied) == 1:
        entries.append({"label": "inputs",
                        "fraction": C.mismatch_fraction(alt_out, ref_out, tol, margin)})
        return entries
    for i in varied:
        mixed = list(ref_inputs)
        mixed[i] = alt_inputs[i]
        out = run_forward(model, mixed, sd["forward"], device, clone=copies)
        entries.append({"label": f"input {i}",
                        "fraction": C.mismatch_fraction(out, ref_out, tol, margin)})
    return entries


def _perturbed(model, seed: int):
    import torch

    alt = copy_model(model)
    tensors = [p for p in alt.parameters() if p.is_floating_point()]
    if not tensors:
        tensors = [b for b in alt.buffers() if b.is_floating_point() and not _index_like(b)]
    if not tensors:
        return None
    gen = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        for p in tensors:
            std = float(p.float().std()) if p.numel() > 1 else 0.0
            scale = 0.5 * (std if std > 0 and math.isfinite(std) else
                           max(1.0, float(p.float().abs().mean())))
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p.device, p.dtype)
            p.add_(noise * scale)
    return alt


# Floating-point buffers perturbed one at a time (a forward each); any beyond these, together.
MOST_BUFFERS = 8
# draws of a buffer's noise while it moves under this share of the output's elements
BUFFER_DRAWS = 3
BUFFER_REDRAW_BELOW = 0.05


def _perturb_buffer(t, gen) -> None:
    """``t`` moved by noise of its own scale: a buffer of positive values (a running variance,
    a scale) multiplied by ``exp(N(0, 1/4))`` so it stays positive; any other as ``_perturbed``
    moves a parameter."""
    import torch

    with torch.no_grad():
        noise = torch.randn(t.shape, generator=gen, dtype=torch.float32).to(t.device)
        if bool((t > 0).all()):
            t.mul_((noise * 0.5).exp_().to(t.dtype))
            return
        std = float(t.float().std()) if t.numel() > 1 else 0.0
        scale = 0.5 * (std if std > 0 and math.isfinite(std) else
                       max(1.0, float(t.float().abs().mean())))
        t.add_((noise * scale).to(t.dtype))


def _buffer_sensitivity(model, inputs: list, ref: list, sd, device, tol, margin,
                        copies: bool) -> dict | None:
    """Each floating-point buffer perturbed alone (the first ``MOST_BUFFERS``; the rest
    together), on a copy of the model: the fraction of elements that move, as for the weights.
    A buffer that forward writes (a running statistic in training mode: state the model keeps,
    not an input of its output) is listed as ``written`` and not judged. Every buffer is put
    back from ``model`` after each forward (no copies of them are kept). None: no such buffer."""
    import torch

    work = copy_model(model)
    named = [(n, b) for n, b in work.named_buffers()
             if b.is_floating_point() and b.numel() > 0 and not b.is_meta]
    # a float buffer of whole numbers past 1 holds indices or counts (a permutation kept as
    # floats): perturbed, it indexes out of range (on a GPU a device-side assert, which ends
    # the worker's CUDA context), so it is left out, as integer buffers are
    named = [(n, b) for n, b in named if not _index_like(b)]
    if not named:
        return None
    originals = dict(model.named_buffers())
    groups = [[item] for item in named[:MOST_BUFFERS]]
    if len(named) > MOST_BUFFERS:
        groups.append(named[MOST_BUFFERS:])
    gen = torch.Generator(device="cpu").manual_seed(sd["weights_alt"] + 1)
    entries, written = [], []
    for group in groups:
        fraction, wrote = None, []
        # A buffer read through one direction of itself (spectral norm's ``_v``: the output
        # follows its component along the vector it holds) barely moves the output under some
        # draws of the noise: a buffer that moved too few elements is drawn again
        for _draw in range(BUFFER_DRAWS):
            for _, b in group:
                _perturb_buffer(b, gen)
            marks = C.fingerprints([b for _, b in group])
            out = forward_unless_broken(work, inputs, sd["forward"], device, clone=copies)
            wrote = [n for (n, _), before, after in
                     zip(group, marks, C.fingerprints([b for _, b in group]))
                     if before is not None and before != after]
            with torch.no_grad():
                for n, b in named:
                    b.copy_(originals[n])
            moved = 1.0 if out is None else C.mismatch_fraction(out, ref, tol, margin)
            del out
            fraction = moved if fraction is None else max(fraction, moved)
            if wrote or fraction >= BUFFER_REDRAW_BELOW:
                break
        written += wrote
        judged = [n for n, _ in group if n not in wrote]
        if judged:
            label = (f"buffer {judged[0]}" if len(judged) == 1 else
                     f"buffers {', '.join(judged[:4])}" + (" ..." if len(judged) > 4 else ""))
            entries.append({"label": label, "fraction": fraction})
    return {"entries": entries, "written": written, "total": len(named)}


def _index_like(buffer) -> bool:
    """Whether a floating-point buffer holds only whole numbers, some past 1 (indices kept as
    floats)."""
    import torch

    with torch.no_grad():
        flat = buffer.detach().reshape(-1)
        return bool(torch.isfinite(flat).all()) and bool((flat == flat.round()).all()) and \
            float(flat.abs().max()) > 1


def _distributions(model, draw: Callable[[], list], m: dict, sd, device) -> dict:
    """Per grading distribution (``distributions.DISTRIBUTIONS``): the reference's output under
    it finite or not, its float32 error against float64 (``noise``, as the calibration measures
    the problem's own draws) and ``supported``: finite, and noise at most ``NOISE_SHARE`` of the
    calibrated tolerance. The problem's own draws are always supported (its tolerance was
    calibrated there). Without a float64 reference (the calibration had none) only finiteness
    decides. Each distribution holds what the calibration held: the float64 forward runs first,
    then the float32 one on a fresh draw (the same seed, the same values)."""
    cal = m["tolerance"]
    limit = D.NOISE_SHARE * cal["tol"]
    found: dict[str, dict] = {}
    for dist, (scale, shift) in D.DISTRIBUTIONS.items():
        if dist == "natural":
            noise = cal.get("noise")
            found[dist] = {"supported": True, "finite": m["finite"],
                           "noise": None if noise is None else float(f"{noise:.3g}")}
            continue
        try:
            found[dist] = _under(model, draw, scale, shift, cal.get("noise") is not None, limit,
                                 sd, device)
        except Exception as exc:
            if _device_poisoned(exc):
                raise
            # the reference refusing such inputs (an op's domain) is unsupported; a validator
            # out of memory measured nothing (None: the grader keeps the distribution)
            memory = isinstance(exc, MemoryError) or "out of memory" in str(exc).lower()
            found[dist] = {"supported": None if memory else False, "finite": None,
                           "noise": None,
                           "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:200]}
        found[dist]["limit"] = float(f"{limit:.3g}")
    return found


def _scaled_inputs(inputs: list, scale: float, shift: float) -> list:
    """Every floating-point input of a fresh draw times ``scale`` plus ``shift``, in its own
    dtype, rounded as the grader's worker makes a trial's inputs. Out of place, one tensor at
    a time (one input's worth more at the peak): a ``get_inputs`` may hand out a tensor it
    keeps (a module-level constant), which scaling in place would change for every later
    draw."""
    import torch

    for k, v in enumerate(inputs):
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            inputs[k] = v.detach().mul(scale).add_(shift)
            del v
    return inputs


def _under(model, draw, scale: float, shift: float, fp64: bool, limit: float, sd,
           device) -> dict:
    ref64 = None
    if fp64:
        inputs = _scaled_inputs(draw(), scale, shift)
        _to_double_in_place(inputs)
        model64 = copy_model(model).double()
        ref64 = run_forward(model64, inputs, sd["forward"], device, clone=False)
        del model64, inputs
    ref = run_forward(model, _scaled_inputs(draw(), scale, shift), sd["forward"], device,
                      clone=False)
    finite = C.all_finite(ref)
    noise = None
    if ref64 is not None:
        noise = C.max_error(ref, [r.to(t.dtype) if not t.is_floating_point() else r
                                  for t, r in zip(ref, ref64)]) \
            if C.shapes_equal(ref, ref64) else math.inf
    del ref, ref64
    stable = noise is None or noise <= limit
    return {"supported": finite and stable, "finite": finite,
            "noise": None if noise is None or not math.isfinite(noise) else
            float(f"{noise:.3g}")}
