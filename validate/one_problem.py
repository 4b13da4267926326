"""One problem's validation (``validate_source``): the static check, the CPU shrink, the
ablations, the memory estimate and admission, the two workers (probe, replay) with their
out-of-memory and contention reruns, and the verdicts, roofline and difficulty that make its
``validation`` section (the steps are listed in ``validate.runner``'s docstring). Split out of
``validate.runner``, which re-exports it.
"""
from __future__ import annotations

import contextlib

from kernelmill.core.errors import ProblemError
from kernelmill.core.problem import check_source

from . import checks as C
from .admission import Tenancy, budget_for
from .difficulty import difficulty
from .gpus import init_lock
from .host_admission import run_on_host
from .roofline import roofline
from .settings import (
    INDUCTOR_OFF_ON_CPU,
    NON_GATING,
    PROBE,
    REPLAY,
    REPLAY_CHECKS,
    ValidateConfig,
    _failed,
)
from .worker_budgets import (
    _eager_timing,
    _estimate_memory,
    _gib,
    _host_budget,
    _lock_path,
    _out_of_cpu_budget,
    _retry_alone,
    _running,
    _shrink,
    _stage_seconds,
    _too_large,
    _too_slow,
    _too_slow_prediction,
    _worker_contention,
    _worker_env,
    _worker_oom,
    _writable,
    address_base,
)


def validate_source(source: str, slot: dict | None = None,
                    config: ValidateConfig | dict | None = None) -> dict:
    """The ``validation`` section for one problem source (see the module docstring)."""
    with contextlib.ExitStack() as held:  # the problem's GPU grant, given back at the end
        validation = _validate_source(source, slot, config, held)
    if validation.get("resized") and validation["checks"].get("runs", {}).get("passed") is False:
        # Shrunk for the CPU, it did not run: sizes a model fixes elsewhere (a patch grid, a
        # pooling window after five stride-2 stages, a U-Net's halvings) may not follow its
        # constants. Its declared sizes decide (4 of KernelBench's 250 problems, shrunk).
        shrunk = validation["checks"]["runs"].get("detail")
        with contextlib.ExitStack() as held:
            validation = _validate_source(source, slot, config, held, shrink=False)
        runs = validation["checks"].get("runs")
        if isinstance(runs, dict):
            runs["detail"] = (f"{runs.get('detail') or ''}; shrunk for the CPU it failed "
                              f"({str(shrunk)[:200]}): its declared sizes were run").lstrip("; ")
    return validation


def _validate_source(source: str, slot: dict | None, config: ValidateConfig | dict | None,
                     held: contextlib.ExitStack, shrink: bool = True) -> dict:
    from .harness import run_in_worker

    cfg = ValidateConfig.coerce(config)
    slot = slot or {"device": "cpu", "gpu": None, "env": {}}
    device = slot["device"]
    on_cuda = device.startswith("cuda")
    try:
        check_source(source)
    except ProblemError as exc:
        return _failed(device, "static check", exc.reason)

    run_source, resized, resize_note = (source, None, "") if on_cuda or not shrink else \
        _shrink(source, cfg)
    slow = None if on_cuda else _too_slow_prediction(run_source, cfg)
    if slow:
        return _too_slow(device, slow + (f" ({resize_note})" if resize_note else ""), resized)
    from .ablation import ablations  # libcst: imported when validating, not for --help

    variants = ablations(run_source, cfg.max_ablations)
    cross_process = on_cuda if cfg.cross_process is None else cfg.cross_process
    inductor = on_cuda if cfg.inductor is None else cfg.inductor
    env = _worker_env(slot, device)
    payload = {"source": run_source, "device": device, "seed": cfg.seed, "ablations": variants,
               "config": {"sensitivity_margin": cfg.sensitivity_margin,
                          "tolerance_margin": cfg.tolerance_margin,
                          "timing": {"ci_target_pct": cfg.timing_ci_pct,
                                     "cap_ms": cfg.timing_cap_ms}},
               "lock": _lock_path(slot), "resized": resized,
               "rebuild_in_process": not cross_process,
               # a second worker times eager (and Inductor) in one window; else the probe does
               "time": not (cross_process or inductor)}
    # Memory: every problem is estimated first. On a GPU only a certain misfit is refused (one
    # forward larger than the whole GPU): the probe's estimate is an upper bound, and admission
    # runs such a problem alone. On CPU the probe's estimate must fit in the host's budget.
    budget = budget_for(slot) if on_cuda else None
    host = None if on_cuda else _host_budget(cfg)
    memory = _estimate_memory(run_source, cfg, on_cuda)
    estimate = memory["estimate_bytes"]
    if on_cuda and (cross_process or inductor) and estimate and memory["replay_bytes"]:
        # one grant for both workers: a replay that asked for more than its probe queued again
        # behind newer problems (minutes each in a KernelBench audit)
        estimate = max(estimate, memory["replay_bytes"])
    if on_cuda:
        room, need = (budget.total, memory["forward_bytes"]) if budget else (None, None)
    else:
        room, need = host.capacity, host.need_for(estimate)
    if room is not None and need and need > room:
        return _too_large(device, memory, f"needs {_gib(need)} ("
                          f"{'one forward' if on_cuda else 'probe estimate'}); the "
                          f"{'GPU has' if on_cuda else 'host memory budget is'} {_gib(room)}",
                          resized)

    cpu_budget = None if on_cuda or not cfg.cpu_budget_s else cfg.cpu_budget_s

    def run(target: str, data: dict, worker_limit: int | None = None):
        limits = {} if worker_limit is None else {"address_space": worker_limit}
        if cpu_budget:
            limits["cpu_s"] = cpu_budget
        limits = limits or None
        with _running(slot):
            return run_in_worker(target, data, timeout_s=cfg.timeout_s, device=device, env=env,
                                 writable=_writable(), limits=limits,
                                 init_lock=init_lock(device, env, validation=True))

    # the probe's grant carries over to the replay (shrunk to its ask): no second queueing
    tenancy = held.enter_context(Tenancy(budget, caps=True))
    if on_cuda:
        admitted = tenancy.run(estimate, lambda: run(PROBE, {**payload, "memory_cap": tenancy.cap}),
                               _worker_oom, _worker_contention)
    else:
        admitted = run_on_host(host, need, lambda limit: run(PROBE, payload, limit), _worker_oom,
                               address_base())
    first = admitted.result
    if budget is None and on_cuda and _worker_oom(first):  # GPU memory unknown: the file lock
        first = _retry_alone(PROBE, payload, cfg, device, env)
    memory.update(admitted.memory_info())
    profile = {"estimate_s": memory.pop("estimate_s", None), **_stage_seconds("probe", first),
               "probe_admission_wait_s": round(admitted.waited_s, 3)}
    if first.cpu_s is not None:
        profile["probe.cpu_s"] = round(first.cpu_s, 3)
    if cpu_budget and _out_of_cpu_budget(first, cpu_budget):
        err = first.error or {}
        spent = (f"ran out of wall time ({cfg.timeout_s:g} s) after {first.cpu_s:.0f} of its "
                 f"{cpu_budget:g} CPU-s" if first.timed_out else
                 f"used up the CPU budget of {cpu_budget:g} CPU-s")
        return _too_slow(device, f"the checks {spent} (in {err.get('stage', 'probe')}, after "
                         f"{first.wall_s:.0f} s)"
                         + (f"; {resize_note}" if resize_note else ""), resized, cpu_budget,
                         memory)
    if admitted.too_large and first.ok:
        memory["too_large"] = False
        memory["note"] = "fp64 calibration ran out of memory alone (dtype floor used)"
    # An out-of-memory failure here already had its run alone (admission, the file lock, or
    # the whole host budget). A probe that survived it (only the fp64 calibration ran out)
    # keeps its result: calibration falls back to the dtype floor and says why.
    if not first.ok and _worker_oom(first):
        err = first.error or {}
        stage = err.get("stage", "probe")
        return _too_large(device, memory, f"out of memory alone on the GPU ({stage}; estimate "
                          f"{_gib(estimate)})" if on_cuda else
                          f"out of host memory ({stage}): more than the whole host memory "
                          f"budget of {_gib(host.capacity)}, alone (estimate {_gib(estimate)})",
                          resized)
    if not first.ok:
        err = first.error or {}
        return _failed(device, err.get("stage", "worker"), err.get("message", "failed"),
                       resized=resized)
    m = first.value
    m["resized"] = resized
    memory["measured_bytes"] = m.get("peak_bytes")
    memory["measured_allocated_bytes"] = m.get("peak_allocated_bytes")
    tol = m["tolerance"]["tol"]
    # Cheap checks first: a problem the probe already failed gets no second worker (no
    # Inductor compile, no timing window); only checks that need that worker are left unrun.
    early = [f for f in C.summarize(C.judge(m, cfg.thresholds()), cfg.gating)[1]
             if f not in REPLAY_CHECKS] if cfg.early_exit else []
    replay, replay_too_large = None, ""
    if early:
        tenancy.close()  # no second worker: the grant goes back now
    if (cross_process or inductor) and not early:
        from .timer import GRAPH_OUTPUT_BYTES

        second_payload = {**payload, "ablations": None, "inductor": inductor,
                          "copies": bool(m.get("mutated_inputs", True)),
                          "inductor_mode": cfg.inductor_mode, "time": True, "time_eager": True,
                          # timed without graphs (``probe_device.cap_memory``)
                          "expandable": (memory.get("outputs_bytes") or 0) > GRAPH_OUTPUT_BYTES}
        if on_cuda:
            again = tenancy.run(memory["replay_bytes"],
                                lambda: run(REPLAY, {**second_payload, "memory_cap": tenancy.cap}),
                                _worker_oom, _worker_contention)
        else:
            again = run_on_host(host, min(host.need_for(memory["replay_bytes"]), host.capacity),
                                lambda limit: run(REPLAY, second_payload, limit), _worker_oom,
                                address_base())
        second = again.result
        memory["replay"] = again.memory_info()
        if budget is None and on_cuda and _worker_oom(second):
            second = _retry_alone(REPLAY, second_payload, cfg, device, env)
        profile.update(_stage_seconds("replay", second),
                       replay_admission_wait_s=round(again.waited_s, 3))
        if cpu_budget and _out_of_cpu_budget(second, cpu_budget):
            err = second.error or {}
            return _too_slow(device, f"the second worker used up the CPU budget of "
                             f"{cpu_budget:g} CPU-s (in {err.get('stage', 'replay')})",
                             resized, cpu_budget, memory)
        if again.too_large:  # the compile (or rebuild) cannot fit even alone: not judged
            replay_too_large = (f"{(second.error or {}).get('stage', 'inductor compile')}: out of"
                                f" {'memory alone on the GPU' if on_cuda else 'host memory'} "
                                f"(estimate {_gib(memory['replay_bytes'])})")
        if second.ok:
            replay = second.value
            memory["replay"]["measured_bytes"] = replay.get("peak_bytes")
            memory["replay"]["measured_allocated_bytes"] = replay.get("peak_allocated_bytes")
        else:
            err = second.error or {}
            replay = {"failed": f"{err.get('stage')}: {err.get('message')}"}
    if not payload["time"]:  # the eager time comes from the second worker's window
        m["timing"] = _eager_timing(m["timing"], replay, replay_too_large, early)
    checks = C.judge(m, cfg.thresholds())
    leaked = first.leaked_processes  # left running in a session or group of its own
    checks["no_leaked_process"] = C.check(not leaked, leaked, f"{leaked} process(es) the problem "
                                         "started outlived its worker" if leaked else
                                         "no process left behind")
    if resize_note:
        checks["runs"]["detail"] += f"; {resize_note}"
    det = checks["deterministic"]
    if replay_too_large:
        checks["too_large"] = C.check(False, memory["replay_bytes"], replay_too_large)
    if early and cross_process:
        det["detail"] += f"; cross-process check not run (failed {', '.join(early)})"
    elif cross_process and replay_too_large and not (replay and "digest" in replay):
        det["detail"] += "; cross-process check not run (second worker too large)"
    elif cross_process:
        if replay is None or "digest" not in replay:
            det["detail"] += f"; second worker failed ({replay and replay.get('failed')})"
            det["passed"] = False
        else:
            err = C.digest_error(replay["digest"], m["digest"])
            det["detail"] += "; across 2 workers: " + ("bitwise" if err == 0 else
                                                      f"error {err:.3g}")
            if err > tol:
                det["passed"] = False
    else:
        det["detail"] += "; cross-process check folded into an in-process rebuild"
    if inductor and early:
        checks["inductor"] = C.check(None, None, f"not run: failed {', '.join(early)}")
        inductor_ms = None
    elif inductor and replay_too_large:
        checks["inductor"] = C.check(None, None, f"not run: {replay_too_large}")
        inductor_ms = None
    elif inductor:
        ind = (replay or {}).get("inductor") if replay and "failed" not in replay else \
            {"error": (replay or {}).get("failed", "second worker did not run")}
        checks["inductor"] = C.judge_inductor(ind, m["timing"].get("eager_ms"), tol)
        inductor_ms = (ind or {}).get("ms")
    else:
        checks["inductor"] = C.check(None, None, INDUCTOR_OFF_ON_CPU if not on_cuda else
                                     "disabled")
        inductor_ms = None

    eager_ms = m["timing"].get("eager_ms")
    roof = roofline(m["flops"], m["bytes"], dtype=m["dtype"], device_name=m["device_name"],
                    eager_ms=eager_ms) if on_cuda else None
    if roof is None:
        checks["roofline"] = C.check(None, None, "GPU-only check (ran on cpu)")
    else:
        ok = roof["headroom"] is None or roof["headroom"] >= 0.8
        checks["roofline"] = C.check(
            ok, roof["headroom"], f"bound {roof['roofline_ms']:.3g} ms ({roof['bound']}-bound, "
            f"{roof['source']}); headroom {roof['headroom'] or 0:.3g}x" +
            ("" if ok else " (faster than the bound: peak table wrong for this device?)"))

    gating = cfg.gating or tuple(n for n in checks if n not in NON_GATING)
    passed, flags = C.summarize(checks, gating)
    speedup = checks["inductor"]["value"] if inductor else None
    compute = C.compute_ops(m["aten_ops"])
    return {
        "device": "cuda" if on_cuda else "cpu", "device_name": m["device_name"],
        "torch": m["torch"], "dtype": m["dtype"], "checks": checks, "passed": passed,
        "flags": flags, "eager_ms": eager_ms, "inductor_ms": inductor_ms,
        "inductor_speedup": speedup, "flops": m["flops"], "bytes": m["bytes"],
        "roofline_ms": roof["roofline_ms"] if roof else None,
        "headroom": roof["headroom"] if roof else None,
        "atol": tol, "rtol": tol,
        # per grading distribution: finite, float32 noise, supported (grade.policy reads it)
        "distributions": m.get("distributions"),
        "difficulty": difficulty(compute, inductor_speedup=speedup,
                                 headroom=roof["headroom"] if roof else None),
        "aten_ops": m["aten_ops"], "probe_stats": m["probe_stats"], "resized": resized,
        "memory": memory, "profile": profile,
        "timing": {k: m["timing"].get(k) for k in ("method", "reps", "ci_pct", "host_ms",
                                                    "launch_ratio", "host_driver_allocations",
                                                    "host_wall_ms", "host_thread_ms",
                                                    "host_alone", "device_work")},
    }
