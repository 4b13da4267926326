"""The trusted parent's judgement: compare a candidate run with the reference run, find hacks.

A driver over mechanisms that live elsewhere: the worker's facts are typed once
(``grade.facts.Facts.from_result``), the checks the policy enables run in their registered
order (``grade.checks``: each names its hack code, the threat it answers in
docs/THREAT_MODEL.md and its layer), answers are compared here in the parent
(``grade.compare``), and the verdict keeps the first detail of each hack code
(``hack_details``) and every finding (``findings``: code, check, threat, layer, detail).
The hack codes are ``grade.checks.HackCode``; any one makes the verdict incorrect, reward 0.
"""
from __future__ import annotations

from typing import Any

import torch
from kernelmill.core.record import Verdict
from kernelmill.validate.harness import WorkerResult

from .checks import CHECKS, attribution, checks_of, probes, timing

# Names callers and tests import from here, where they lived before the checks had modules.
from .checks.attribution import (  # noqa: F401
    LIBRARY_NAMESPACE,
    VENDOR_MARK,
    attribute,
    device_work,
    kernel_checks,
    kernel_owner,
    redoes_reference,
    share_check,
)
from .checks.context import Context
from .checks.device_work import (  # noqa: F401
    DEVICE_WORK_FLOOR_US,
    DEVICE_WORK_RATIO,
)
from .checks.device_work import scored_device_work as _scored_device_work  # noqa: F401
from .checks.timing import (  # noqa: F401
    CLOCK_MARGIN,
    METHOD_DEVICE,
    bandwidth_gbs,
    roofline_ms,
    speedups,
    timing_fields,
)
from .compare import (  # noqa: F401
    COMPARE_CHUNK,
    FIRST_UNSURE,
    Unchanged,
    bitwise_equal,
    compare,
    reference_fault,
    usable_trials,
)
from .facts import Facts
from .policy import Policy
from .stages import (  # noqa: F401
    CALL_STAGES,
    COMPILE_STAGES,
    FULL_CONFINEMENT,
    downgrades,
    explained,
)

# the helpers' names from before the checks had modules (unit tests drive them with raw dicts)
_ghost_check, _graph_calls_agree = probes.ghost_check, probes.graph_calls_agree
_graph_calls_even, _unseen_checks = probes.graph_calls_even, probes.unseen_checks
_vendor_work = attribution.vendor_work
_timings, _explained = timing.timings, explained


def judge(reference: dict, ref_run: WorkerResult, cand_run: WorkerResult, *, policy: Policy,
          findings: list[str], record: dict | None = None, window: dict | None = None,
          own_kernels: frozenset | None = None) -> dict:
    """The verdict (without reward): compiled, correct, hacks, findings, timings, checks, error.

    ``window`` is the parent's timing window (``validate.window.run_window``) in which the
    reference and this candidate were timed; speedups come only from it. ``own_kernels``: the
    ``__global__`` functions the candidate's source defines (``static.declared_kernels``)."""
    facts = Facts.from_result(cand_run)
    verdict: dict[str, Any] = {"compiled": False, "correct": False, "hacks": [],
                               "speedup_vs_eager": None, "speedup_vs_inductor": None,
                               "error": None, "stage_reached": "parsed", "checks": {},
                               "timings": {}, "sandbox": facts.sandbox}
    ctx = Context(reference, policy, facts, findings, record, window, own_kernels,
                  checks=verdict["checks"], verdict=verdict)
    found: list = []
    _run(ctx, "source", found)
    if facts.run is None:
        ctx.error = verdict["error"] = explained(facts.error or {"stage": "?",
                                                                 "message": "no result"})
        _run(ctx, "failed", found)
        reached = [s for s, _ in facts.stages]
        verdict["compiled"] = bool(set(reached) & {"forward", "forward refill", "timing"}) or \
            ctx.error.get("stage") not in COMPILE_STAGES
        if verdict["compiled"]:
            verdict["stage_reached"] = "constructed"
        elif "init" in reached:
            verdict["stage_reached"] = "parsed"
        return _finish(verdict, found)

    run = facts.run
    verdict["compiled"] = True
    verdict["confinement"] = run.get("confinement")
    verdict["downgrades"] = downgrades(run.get("confinement"))
    if (run.get("witness") or {}).get("unavailable"):
        verdict["downgrades"].append(f"op witness: {run['witness']['unavailable']}")
    verdict["stage_reached"] = "ran"
    shaped = True
    for call in run["calls"]:
        view = ctx.view(call)
        view.attribution = attribute(call, ctx.reference_ops, view.mine, own_kernels)
        ctx.views.append(view)
        _run(ctx, "call", found, view)
        view.ok, why, call_shaped = _answer(ctx, view)
        view.why = why
        shaped = shaped and call_shaped
        ctx.checks[view.name] = {"passed": view.ok, "detail": why}
        ctx.all_correct = ctx.all_correct and view.ok

    verdict["device_work"] = device_work([v.attribution for v in ctx.views])
    _run(ctx, "run", found)
    if run.get("timing"):
        _run(ctx, "timed", found)
    verdict["stage_reached"] = "shaped" if shaped else "ran"
    verdict["correct"] = ctx.correct = ctx.all_correct and bool(run["calls"])
    timing_fields(verdict, reference, window)
    _run(ctx, "window", found)
    speedups(verdict)
    return _finish(verdict, found)


def _answer(ctx: Context, view) -> tuple[bool, str, bool]:
    """One checked call's answer against its trial's: (right, why not, its shape was right)."""
    call, trial = view.call, view.trial
    if call["structure"] != trial["structure"]:
        ok, why = False, f"returned {call['structure']}, expected {trial['structure']}"
    elif call.get("devices") and call["devices"] != ctx.ref_device:
        ok, why = False, f"outputs on {call['devices']}, expected {ctx.ref_device}"
    else:
        ok, why, floor_only = _compared(ctx, trial, call["outputs"])
        if floor_only is not None:
            view.floor_only = floor_only
    shaped = not (not ok and call["outputs"] is not None and
                  ("shape" in why or "dtype" in why or "outputs," in why))
    if call["outputs"] is None:
        shaped = False
        if call.get("oversized"):
            why = "output far larger than the reference's"
    return ok, why, shaped


def _compared(ctx: Context, trial: dict, outputs) -> tuple[bool, str, bool | None]:
    """``compare`` of a call's outputs with its trial's: (right, why not, right by the dtype's
    absolute floor alone where elements were off, else None). Once per trial and set of
    outputs: the worker ships an output bit for bit like one it shipped before as that same
    storage (a deterministic forward's refill, repeat, audit and timed calls on one trial), so
    the grading process compares it once (its float passes over a KernelBench output of 268 MB
    take about half a CPU second)."""
    key = _outputs_key(trial, outputs)
    memo = ctx.compared
    if key is not None and key in memo:
        return memo[key]
    atol, rtol = ctx.tolerance(trial)
    ok, why = compare(trial["outputs"], outputs, atol, rtol)
    floor_only = None
    if not ok and "elements off" in why:
        # right by the dtype's absolute floor alone (``compare.scaled_atol``)?
        floor_only = compare(trial["outputs"], outputs, atol, rtol, scaled=False)[0]
    if key is not None:
        memo[key] = (ok, why, floor_only)
    return ok, why, floor_only


def _outputs_key(trial: dict, outputs) -> tuple | None:
    """Where a call's outputs live (each tensor's storage, offset, shape, strides, dtype and
    its conjugate and negative bits) with its trial: two calls with the same key hold the same
    values. None where an output is not a
    tensor or a plain number (not compared from memory)."""
    if not isinstance(outputs, list):
        return None
    parts: list = [id(trial)]
    for value in outputs:
        if isinstance(value, torch.Tensor):
            try:
                parts.append((value.untyped_storage().data_ptr(), value.storage_offset(),
                              tuple(value.shape), value.stride(), str(value.dtype),
                              value.device.type, value.is_conj(), value.is_neg()))
            except RuntimeError:
                return None
        elif type(value) in (int, float, bool):
            parts.append((type(value).__name__, value))
        else:
            return None
    return tuple(parts)


def _run(ctx: Context, scope: str, found: list, *args) -> None:
    """Run the checks of one scope the policy enables; keep what each found, in order."""
    for check in checks_of(scope):
        if check.switch and not ctx.policy.switch(check.switch):
            continue
        for finding in check.fn(ctx, *args):
            if finding.code != check.code:
                raise AssertionError(f"{check.name} declared {check.code}, found {finding.code}")
            found.append((check, finding))


def _finding(check, finding) -> dict:
    return {"code": finding.code.value, "check": check.name, "threat": check.threat,
            "layer": check.layer.value, "detail": finding.detail}


def _finish(verdict: dict, found: list) -> dict:
    hacks: dict[str, str] = {}
    for _check, finding in found:
        hacks.setdefault(finding.code.value, finding.detail)
    verdict["hacks"] = sorted(hacks)
    verdict["hack_details"] = hacks
    verdict["findings"] = [_finding(check, finding) for check, finding in found]
    if hacks:
        verdict["correct"] = False
        # measured times stay in ``timings``; a flagged submission has no speedup to report
        verdict["speedup_vs_eager"] = verdict["speedup_vs_inductor"] = None
    return Verdict.from_dict(verdict).to_dict()  # the one verdict schema (core.record.Verdict)


def amend(verdict: dict, check_name: str, *args) -> dict:
    """A check the grader runs itself (scope ``grader``, e.g. ``guarded_files_unchanged``),
    added to a verdict the judge made: its code, detail and finding, and correct no more."""
    check = CHECKS[check_name]
    for finding in check.fn(*args):
        verdict["hacks"] = sorted({*verdict["hacks"], finding.code.value})
        verdict["hack_details"][finding.code.value] = finding.detail
        verdict.setdefault("findings", []).append(_finding(check, finding))
        verdict["correct"] = False
    return verdict
