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

from .checks import CHECKS, checks_of
from .checks.attribution import (  # noqa: F401  (the names callers import from here)
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
from .checks.probes import (  # noqa: F401
    DEVICE_WORK_FLOOR_US,
    DEVICE_WORK_RATIO,
    ghost_check as _ghost_check,
    graph_calls_agree as _graph_calls_agree,
    graph_calls_even as _graph_calls_even,
    scored_device_work as _scored_device_work,
    unseen_checks as _unseen_checks,
)
from .checks.attribution import vendor_work as _vendor_work  # noqa: F401
from .checks.timing import (  # noqa: F401
    CLOCK_MARGIN,
    METHOD_DEVICE,
    bandwidth_gbs,
    roofline_ms,
    speedups,
    timing_fields,
    timings as _timings,
)
from .compare import COMPARE_CHUNK, FIRST_UNSURE, Unchanged, bitwise_equal, compare  # noqa: F401
from .facts import Facts
from .policy import Policy

COMPILE_STAGES = ("startup", "import target", "run target", "setup", "import", "init",
                  "compile")
# The stages of the candidate's calls, where no process may start (on CUDA the first call may
# still run Triton's ptxas: every kernel a forward uses must compile there)
CALL_STAGES = ("forward", "forward refill", "forward repeat", "timing")


def usable_trials(reference: dict) -> tuple[list[dict], list[dict]]:
    """The reference's usable trials: (checked ones, hidden ones). A hidden trial's inputs are
    shown to the candidate only once, inside its timing window (``Policy.unseen_trials``)."""
    usable = [t for t in reference.get("trials") or [] if t["usable"]]
    return ([t for t in usable if not t.get("hidden")], [t for t in usable if t.get("hidden")])


def reference_fault(reference: dict) -> str | None:
    """Why a reference run cannot be graded against (its forward returned something other than
    tensors: None, an int, nothing), or None. That is the problem's fault, never a candidate's."""
    for index, trial in enumerate(reference.get("trials") or []):
        outputs = trial.get("outputs") or []
        kinds = [type(o).__name__ for o in outputs if not isinstance(o, torch.Tensor)]
        if not outputs or kinds:
            what = ", ".join(kinds) if kinds else "no output"
            return (f"reference forward returned {trial.get('structure')} ({what}) on trial "
                    f"{index}; a problem's forward must return tensors")
    return None


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
        shaped = shaped and call_shaped
        ctx.checks[view.name] = {"passed": view.ok, "detail": why}
        ctx.all_correct = ctx.all_correct and view.ok

    verdict["device_work"] = device_work([v.attribution for v in ctx.views])
    _run(ctx, "run", found)
    if run.get("timing"):
        _run(ctx, "timed", found)
    verdict["stage_reached"] = "shaped" if shaped else "ran"
    verdict["correct"] = ctx.correct = ctx.all_correct and bool(run["calls"])
    timing_fields(verdict, reference, window, record)
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
        ok, why = compare(trial["outputs"], call["outputs"], *ctx.tolerance(trial))
    shaped = not (not ok and call["outputs"] is not None and
                  ("shape" in why or "dtype" in why or "outputs," in why))
    if call["outputs"] is None:
        shaped = False
        if call.get("oversized"):
            why = "output far larger than the reference's"
    return ok, why, shaped


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


# What each confinement entry reads when fully applied (``validate.sandbox.STATE``).
FULL_CONFINEMENT = {"proc_hidden": True, "shm_private": True, "tcp": "refused",
                    "process_creation": ("blocked", "blocked after the first call"),
                    "other_processes": "blocked", "network": "isolated", "ip_sockets": "refused"}


def downgrades(confinement: dict | None) -> list[str]:
    """The confinement the worker could not apply, one line each (the kernel or the image
    lacked the feature, or the policy turned the sandbox off)."""
    if not confinement:
        return ["confinement unknown (the worker reported none)"]
    lines = []
    if not isinstance(confinement.get("landlock"), int):
        lines.append(f"landlock: {confinement.get('landlock') or 'off'}")
    for key, full in FULL_CONFINEMENT.items():
        value = confinement.get(key)
        if value not in (full if isinstance(full, tuple) else (full,)):
            lines.append(f"{key}: {value}")
    return lines


def explained(error: dict) -> dict:
    """The candidate's error, with the reason when the sandbox refused a call (EPERM) while the
    forward ran: no process may start there (a kernel first compiled after the first call runs
    Triton's ptxas, a process)."""
    message = str(error.get("message") or "")
    if error.get("stage") in CALL_STAGES and "Operation not permitted" in message:
        return {**error, "message": f"{message[:400]} (refused by the sandbox: no process may "
                                    "start in a forward after the first call on CUDA, none on "
                                    "CPU; every kernel must compile in the first call)"}
    return error


_explained = explained
