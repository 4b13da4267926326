"""Worker side of validation: build a problem from its source text and measure it.

``probe_problem(payload)`` runs every single-process check of one problem in one worker and
returns plain numbers (``checks.judge`` turns them into verdicts in the parent). The second
worker, which rebuilds the same problem in a fresh process (cross-process determinism,
TorchInductor), is ``replay.replay_problem``.

Imports only torch, the standard library, ``checks`` and ``measure`` (the measurement modules
shared with the grader: namespaces, outputs, synchronisation, the GPU lock), and the worker-side
modules ``forwards`` (building a problem, running its forward), ``sensitivity`` (perturbed
inputs, parameters, buffers and input distributions), ``realcode``, ``memory``, ``op_trace``
(the aten ops a forward runs) and ``probe_device`` (timing, memory caps, host syncs on the
shared GPU).

Seeds. Everything random is drawn from seeds derived from ``payload["seed"]`` (see ``seeds``),
so two workers given the same payload build identical weights and inputs.

Sharing a GPU. Several workers may share one GPU so that Inductor compiles (CPU-bound) overlap.
When ``payload["lock"]`` names a file, GPU work runs under a shared lock and timing under an
exclusive one (with writer priority), so no measured run overlaps another worker's kernels.
"""
from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

from . import checks as C
from . import realcode as R
from .forwards import (
    _declared_dtype,
    _device_poisoned,
    _float_tensors,
    _mark,
    _measured,
    _nbytes,
    _to_double_in_place,
    build_model,
    draw_inputs,
    forward_unless_broken,
    load_namespace,
    run_forward,
    seeds,
)
from .measure import GpuLock
from .memory import LIVENESS_MAX_BYTES, REMAKE_BYTES
from .model_copy import copy_model
from .op_trace import _compute_ops, _trace
from .probe_device import (
    _host_syncs,
    _launch_work,
    _peak_allocated,
    _peak_bytes,
    _release_cache,
    _section,
    _syncing_work,
    _timed_window,
    _timing_section,
    cap_memory,
)
from .sensitivity import _buffer_sensitivity, _distributions, _perturbed, _sensitivity

# Input draws whose liveness is united: data-dependent sparsity (a router's top-2 of 8 experts)
# leaves 0.75**4 of its work unreached in all four, structural deadness all of it.
LIVENESS_DRAWS = 4


# ---------------------------------------------------------------- the probe


def _model_like(ns: dict, sd: dict[str, int], reference):
    """A model of ``ns``'s class holding ``reference``'s parameters and buffers, built on the
    meta device (no weight init, no copies); raises when that cannot reproduce the model."""
    import torch

    torch.manual_seed(sd["init"])
    init = ns["get_init_inputs"]()
    with torch.device("meta"):
        model = ns["Model"](*init)
    model.load_state_dict(reference.state_dict(), assign=True)
    if any(t.is_meta for t in [*model.parameters(), *model.buffers()]):
        raise ValueError("state not fully restored")
    model.train(reference.training)
    return model


def _ablate(ablations: list[dict], sd, reference, ref_inputs, ref_out, device, tol,
            lock=None, copies: bool = True) -> dict:
    """Run each variant on the reference inputs and weights; list those within tolerance.
    Each variant's GPU work holds ``lock`` shared on its own (``_section``)."""
    lock = lock or GpuLock(None)
    dead: list[str] = []
    inert: list[str] = []
    tried = 0
    computes = _compute_ops(reference, ref_inputs, copies) if ablations else None
    for variant in ablations:
        try:
            ns = load_namespace(variant["source"], tag=f"ablation_{len(dead)}_{tried}")
        except Exception:  # noqa: BLE001, S112 — an ablation that breaks the source is not dead
            continue
        out = None
        builders = (functools.partial(_model_like, ns, sd, reference),
                    functools.partial(build_model, ns, sd, device))
        for build in builders:  # fast path first; a full seeded build when it cannot apply
            try:
                with _section(lock, device, "ablation"):
                    out = run_forward(build(), ref_inputs, sd["forward"], device, clone=copies)
                break
            except Exception as exc:  # noqa: BLE001 — an ablation that breaks forward is not dead
                out = None
                if _device_poisoned(exc):
                    # A device-side assert (e.g. an index out of range once an op is removed)
                    # leaves the CUDA context unusable: stop here, keep what was learned.
                    return {"tried": tried, "dead": dead,
                            "aborted": f"{variant['label']}: {str(exc).splitlines()[0][:200]}"}
        tried += 1
        if out is None or not C.shapes_equal(out, ref_out):
            continue
        with _section(lock, device, "ablation"):
            if C.max_error(out, ref_out) > tol:
                continue
            if computes is not None and \
                    _compute_ops(build(), ref_inputs, copies) == computes:
                # what it removed computed nothing (Dropout in eval, an identity): no kernel
                # ran for it, so no kernel can skip it
                inert.append(variant["label"])
                continue
            dead.append(variant["label"])
    return {"tried": tried, "dead": dead, "inert": inert}


def probe_problem(payload: dict) -> dict:
    """Measure one problem: see the module docstring. Returns numbers for ``checks.judge``.
    ``payload["time"]`` false: the eager forward is not timed here (the second worker times it
    right before TorchInductor)."""
    import torch

    device = payload.get("device", "cpu")
    sd = seeds(int(payload.get("seed", 0)))
    cfg = payload.get("config", {})
    margin = float(cfg.get("sensitivity_margin", 10.0))
    lock = GpuLock(payload.get("lock"))
    # a probe that times (no second worker) captures graphs: default segments (``cap_memory``)
    cap_memory(payload.get("memory_cap"), device, not payload.get("time", True))
    m: dict[str, Any] = {"resized": payload.get("resized"), "torch": str(torch.__version__),
                         "device_name": (torch.cuda.get_device_name()
                                         if device.startswith("cuda") else "cpu")}

    _mark("load")
    rng = _rng_states()  # the call-history check's second execution of the source starts here too
    ns = load_namespace(payload["source"])
    draw = functools.partial(draw_inputs, ns, sd["inputs"], device)
    with _section(lock, device, "build"):
        model, inputs = build_model(ns, sd, device), draw()
        marks = C.fingerprints(inputs)
    with _section(lock, device, "forward"):
        # The first forward runs on the inputs themselves. When it wrote into them, they are
        # drawn again (the same seed gives the same tensors, in milliseconds on a GPU) and every
        # later forward gets copies; when it did not, none does: a copy of the inputs per
        # forward made the probe hold several times KernelBench's 6 GiB level-1 inputs.
        ref = run_forward(model, inputs, sd["forward"], device, clone=False)
        if not ref:
            raise ValueError("forward returned no tensor")
        changed = [i for i, (a, b) in enumerate(zip(marks, C.fingerprints(inputs))) if a != b]
        m["mutated_inputs"] = [f"input {i}" for i in changed]
        # a tensor without a fingerprint (sparse, say) might have been written: copies
        copies = bool(changed) or any(mark is None and isinstance(v, torch.Tensor)
                                      for mark, v in zip(marks, inputs))
        if copies:
            inputs = draw()
        m["output_shapes"] = [list(t.shape) for t in ref]
        m["dtype"] = _declared_dtype(ref)
        nonfinite = sum(int((~torch.isfinite(t)).sum()) for t in ref if t.is_floating_point())
        total = sum(t.numel() for t in ref)
        m["finite"] = nonfinite == 0
        m["nonfinite_fraction"] = nonfinite / total if total else 0.0

    with _section(lock, device, "determinism"):
        floor = C.calibrate_tolerance(None, m["dtype"])["tol"]
        again = run_forward(model, inputs, sd["forward"], device, clone=copies)
        m["deterministic"] = {"bitwise": C.bitwise_equal(again, ref),
                              "error": C.max_error(again, ref)}
        del again
    if payload.get("rebuild_in_process", True):
        with _section(lock, device, "rebuild"):
            model_b, inputs_b = build_model(ns, sd, device), draw_inputs(ns, sd["inputs"], device)
            out_b = run_forward(model_b, inputs_b, sd["forward"], device, clone=False)
            m["rebuild"] = {"mode": "rebuilt from seeds in the same process",
                            "error": 0.0 if C.bitwise_equal(out_b, ref) else
                            C.max_error(out_b, ref)}
            del model_b, inputs_b, out_b
    _mark("digest")  # hashing on the host (seconds for GBs): outside the lock
    m["digest"] = C.output_digest(ref)
    with _section(lock, device, "stochasticity"):
        other = run_forward(model, inputs, sd["forward_alt"], device, clone=copies)
        m["stochastic_error"] = C.max_error(other, ref)
        del other

    def remake(slots: dict) -> None:
        """The inputs drawn again and the output made again, where ``slots`` let them go."""
        if slots.get("inputs") is None:
            slots["inputs"] = draw()
            if C.fingerprints(slots["inputs"]) != marks:
                m["redraw_differs"] = True  # get_inputs is not reproducible from its seed
        if slots.get("ref") is None:
            slots["ref"] = run_forward(model, slots["inputs"], sd["forward"], device,
                                       clone=copies)

    with _section(lock, device, "fp64 reference"):
        slots, inputs, ref = {"inputs": inputs, "ref": ref}, None, None
        m["tolerance"] = _calibrate(model, slots, remake, m, sd, device, floor, cfg)
        if m["tolerance"].get("noise") is not None:
            # reproducible (float64 ran): the draws are let go while the distributions run, as
            # during the calibration, and made again after
            slots["inputs"] = None
            if _nbytes(slots["ref"] or []) >= REMAKE_BYTES:
                slots["ref"] = None
    tol = m["tolerance"]["tol"]
    with _section(lock, device, "distributions"):
        m["distributions"] = _distributions(model, draw, m, sd, device)
        remake(slots)
        inputs, ref = slots["inputs"], slots["ref"]

    with _section(lock, device, "sensitivity"):
        alt_inputs = draw_inputs(ns, sd["inputs_alt"], device)
        m["inputs_vary"] = _inputs_vary(inputs, alt_inputs)
        alt = run_forward(model, alt_inputs, sd["forward"], device, clone=copies)
        m["input_sensitivity"] = _sensitivity(model, ref, alt, inputs, alt_inputs, sd, device,
                                              tol, margin, copies)
    with _section(lock, device, "weight sensitivity"):
        wmodel = _perturbed(model, sd["weights_alt"])
        if wmodel is None:
            m["weight_sensitivity"] = None
        else:
            wout = forward_unless_broken(wmodel, inputs, sd["forward"], device, clone=copies)
            m["weight_sensitivity"] = {"label": "all parameters", "fraction": 1.0 if wout is None
                                       else C.mismatch_fraction(wout, ref, tol, margin)}
            del wmodel, wout
        m["buffer_sensitivity"] = _measured(lambda: _buffer_sensitivity(
            model, inputs, ref, sd, device, tol, margin, copies))

    with _section(lock, device, "degeneracy"):
        m["zero_fraction"] = C.zero_fraction(ref, tol)
        m["constant_fraction"] = (C.constant_fraction(ref, tol)
                                  if sum(t.numel() for t in ref) > 1 else None)
        m["affine"] = _affine_fits(ref, alt, inputs, alt_inputs)
        m["contrast"] = R.contrast(ref, alt, tol, inputs, alt_inputs)
        # the call-history check compares with this: the model had run on ``inputs`` first
        used = C.output_digest(alt)
        del alt

    with _section(lock, device, "real code"):
        _real_code(m, ns, model, ref, used, inputs, alt_inputs, sd, device, tol, cfg, copies,
                   payload["source"], rng)

    with _section(lock, device, "trace"):
        m["aten_ops"], m["flops"], m["input_nonaffine_ops"] = _trace(model, inputs, device,
                                                                     copies)
        params = list(model.parameters()) + list(model.buffers())
        m["bytes"] = _nbytes(inputs) + _nbytes(params) + _nbytes(ref)
        m["probe_stats"] = {"seed": sd["inputs"], "outputs": C.output_stats(ref, tol)}
    with _section(lock, device, "host syncs"):
        syncing = _host_syncs(model, inputs, device, payload["source"], copies)
    _release_cache(device)  # other workers may need the memory while this one waits to time
    timing = (_timed_window(lock, device, {"eager": (model, inputs)}, cfg.get("timing"))["eager"]
              if payload.get("time", True) else None)
    m["timing"] = _timing_section(timing, device,
                                  _syncing_work(lock, device, model, inputs, syncing, copies))
    if timing is not None and not syncing["host_syncs"]:  # timed here (no replay times it)
        work = _launch_work(lock, device, model, inputs, m["timing"], copies)
        if work is not None:
            m["timing"]["device_work"] = work
    # Ablation last: a removed op can trip a device-side assert that poisons the CUDA context.
    _mark("ablation")
    ablations = payload.get("ablations")
    m["ablation"] = None if ablations is None else _ablate(
        ablations, sd, model, inputs, ref, device, tol, lock, copies)
    m["peak_bytes"] = _peak_bytes(device)  # compared with admission's estimate (memory.py)
    m["peak_allocated_bytes"] = _peak_allocated(device)
    return m


def _rng_states() -> tuple:
    """The global generators' states (torch's, ``random``'s, NumPy's)."""
    import random

    import numpy
    import torch

    return torch.get_rng_state(), random.getstate(), numpy.random.get_state()


def _set_rng_states(states: tuple) -> None:
    import random

    import numpy
    import torch

    torch.set_rng_state(states[0])
    random.setstate(states[1])
    numpy.random.set_state(states[2])


def _real_code(m, ns, model, ref, used: dict, inputs, alt_inputs, sd, device, tol, cfg,
               copies: bool, source: str, rng: tuple) -> None:
    """The measurements of ``realcode`` (sub-module bypass, constant parameters, liveness,
    exact outputs, duplicate writes, reduced precision) and the call-history check: the output
    for the second input draw from this model, used on the first draw already (``used``, its
    digest: the output itself is let go, so this stage holds one output besides ``ref``),
    against a fresh one's, built from a new execution of ``source`` from the generators' states
    of the first (``rng``: state a class or the module keeps, not the instance, starts afresh
    too, and module-level random constants are drawn alike). Forwards run on copies of the
    inputs only when ``copies``."""
    fwd, alt_seed = sd["forward"], sd["weights_alt"]
    m["submodule_bypass"] = _measured(
        lambda: R.submodule_bypass(model, inputs, ref, fwd, tol, alt_seed, copies))
    m["constant_parameters"] = _measured(
        lambda: R.constant_parameters(model, inputs, ref, fwd, tol, alt_seed, copies))

    def draws():
        yield inputs
        yield alt_inputs
        for k in range(LIVENESS_DRAWS - 2):
            yield draw_inputs(ns, sd["liveness"] + k, device)

    limit = int(cfg.get("liveness_max_bytes", LIVENESS_MAX_BYTES))
    m["liveness"] = _measured(
        lambda: R.liveness(model, draws(), fwd, alt_seed, copies)
        if _nbytes(inputs) + _nbytes(ref) <= limit
        else {"error": f"inputs and outputs over {limit >> 20} MiB: no backward pass"})
    # integer outputs move at the dtype's tolerance floor, the error honest float work may carry
    # (the calibrated tolerance of an integer output measures index disagreements)
    jitter = C.calibrate_tolerance(None, m["dtype"])["tol"]
    m["exact_outputs"] = _measured(
        lambda: R.exact_outputs(model, inputs, ref, fwd, jitter, alt_seed, device, copies,
                                tol, more=itertools.islice(draws(), 1, None),
                                dtype=m["dtype"]))
    m["duplicate_writes"] = _measured(lambda: R.duplicate_writes(model, inputs, fwd, copies))
    low = {"float32": "bfloat16", "float64": "float32"}.get(m["dtype"])

    def rounded() -> dict | None:
        out = R.reduced_precision(model, inputs, fwd, low, copies)
        return None if out is None else R.rounded_errors(out, ref, low)

    m["reduced_precision"] = _measured(rounded) if low else None

    def history() -> dict:
        now = _rng_states()
        _set_rng_states(rng)
        try:
            fresh_ns = load_namespace(source, tag="fresh")
        finally:
            _set_rng_states(now)
        fresh = build_model(fresh_ns, sd, device)
        out = C.output_digest(run_forward(fresh, alt_inputs, fwd, device, clone=copies))
        del fresh
        # the counters a call moves, advanced as if a grader's thousands of calls had run
        found = {"error_vs_fresh": C.digest_error(used, out)}
        try:
            counted = R.advanced_counters(model, alt_inputs, fwd, copies)
        except Exception as exc:  # noqa: BLE001 — the fresh comparison stands alone
            found["counters_error"] = f"{type(exc).__name__}: {exc}"[:200]
            return found
        return {**found, "counters": counted["counters"], "error_after_calls": counted["error"]}

    m["call_history"] = _measured(history)


def _inputs_vary(inputs: list, alt_inputs: list) -> bool | None:
    """Whether ``get_inputs()`` under another seed gave other tensors (None: it gives none).
    Inputs that never change leave nothing a grader can check an answer on that the answer
    has not seen: a forward that keeps the one answer passes its unseen-input check."""
    import torch

    pairs = [(a, b) for a, b in zip(inputs, alt_inputs)
             if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)]
    if not pairs:
        return None
    return not C.bitwise_equal([a for a, _ in pairs], [b for _, b in pairs])


def _calibrate(model, slots: dict, remake: Callable[[dict], None], m, sd, device, floor,
               cfg) -> dict:
    """The tolerance from the fp64 noise floor (``checks.calibrate_tolerance``); the dtype floor
    when the output is not reproducible or fp64 fails (the reason is recorded).

    ``slots`` holds the only references to the inputs and the output (``inputs``, ``ref``), so
    this stage, the probe's largest, holds as little as it can: the inputs become their fp64
    copies one tensor at a time, and an output of ``REMAKE_BYTES`` or more is let go during the
    fp64 forward; ``remake(slots)`` draws and runs them again after (from the seeds: the output
    is reproducible here, else no fp64 runs). Moving a 6 GiB output to the host and back took
    5 s on an H100; running it again, milliseconds."""
    cal: dict[str, Any]
    reproducible = max(m["deterministic"]["error"], m["stochastic_error"]) <= floor
    try:
        if not reproducible:
            raise ValueError("output not reproducible, no noise floor to measure")
        model64 = copy_model(model).double()
        inputs = slots.pop("inputs")
        if _nbytes(slots["ref"]) >= REMAKE_BYTES:
            slots["ref"] = None
        _to_double_in_place(inputs)
        ref64 = run_forward(model64, inputs, sd["forward"], device, clone=False)
        del model64, inputs
        remake(slots)
        ref = slots["ref"]
        noise = C.max_error(ref, [r.to(t.dtype) if not t.is_floating_point() else r
                                  for t, r in zip(ref, ref64)]) \
            if C.shapes_equal(ref, ref64) else None
        del ref64
        cal = C.calibrate_tolerance(noise, m["dtype"], float(cfg.get("tolerance_margin", 10)))
        cal["noise"] = noise
        if noise is None:
            cal["reason"] = "fp64 output has other shapes"
    except Exception as exc:  # noqa: BLE001 — recorded; the dtype floor is used instead
        cal = C.calibrate_tolerance(None, m["dtype"])
        cal.update(noise=None, reason=f"{type(exc).__name__}: {exc}"[:200])
    cal["dtype"] = m["dtype"]
    if not m["finite"]:
        cal["within_cap"] = False
    return cal


def _affine_fits(ref: list, alt: list, inputs: list, alt_inputs: list) -> list[dict]:
    """How well each output is an affine function of each same-shaped input (per tensor and per
    channel), from the two input draws."""
    affine = []
    for o, (y, y_alt) in enumerate(zip(ref, alt)):
        if not y.is_floating_point() or y.numel() < 2 or y.shape != y_alt.shape:
            continue
        for i, x in _float_tensors(inputs):
            x_alt = alt_inputs[i]
            if x.shape != y.shape or x_alt.shape != y.shape:
                continue
            whole, per_channel = C.affine_residuals(
                [x, x_alt], [y, y_alt], 1 if y.dim() >= 2 and y.shape[1] > 1 else None)
            affine.append({"output": o, "input": i, "tensor": whole, "channel": per_channel})
    return affine
