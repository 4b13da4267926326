"""The worker's tasks, run by the parent in separate processes (``validate.harness``).

``reference_task`` builds the problem and returns each trial's inputs and the reference outputs;
``reference_timing_task`` times the reference in the parent's window. Neither sees candidate
code. ``compile_task`` imports a candidate so its extensions build, and reports what was built
from what. ``candidate_task`` builds ``ModelNew``, calls it (``call._Run``) on the reference's
inputs, times it, probes it and returns raw facts; the parent judges (``grade.judge``). The
candidate-side tasks run on a private copy of the worker package (``guards.private``).
"""
from __future__ import annotations

import itertools
import sys
from typing import Any

import torch
from kernelmill.grade.witness import Witness
from kernelmill.validate import measure as M
from kernelmill.validate import sandbox
from kernelmill.validate import timer as T
from kernelmill.validate.harness_worker import (
    RESULT_GUARD,
    mark_stage,
    receive,
    report,
    require_trusted_senders,
    result_mark,
    result_rewind,
    result_slot,
)
from kernelmill.validate.measure import flatten_outputs, load_namespace
from kernelmill.validate.measure import synchronize as sync
from kernelmill.validate.window_worker import await_gpu, step_aside_point

from .call import _Run
from .early import early_answer
from .guards.audit import refuse_runtime_code
from .guards.originals import (
    _enumerate_threads,
    _isinstance,
    _perf_counter,
    _Tensor,
    _tensor_copy,
    _type,
)
from .guards.patches import _owned_by_us, patched_functions, snapshot_modules
from .guards.private import _private_namespace
from .inputs import draw_inputs, look, reserve_staging, to_cpu, to_device, transform
from .observers.counts import _observed
from .observers.extensions import _BUILT, _install_extension_hooks
from .observers.host_memory import _install_host_access_hooks
from .observers.launches import _install_triton_hook
from .observers.optrace import _OpTrace, active_modes
from .observers.threads import _install_thread_hooks, _live_children, _tasks
from .seeding import _bind_cuda_generators, _manual_seed, forward_seed
from .state import StateSlots, match_state, perturbed_model_state
from .timing import _serve_timing, _timer_options, device_info

# ---------------------------------------------------------------- the reference run

# Host threads of a GPU grading worker's own tensor work (copies to the host, finiteness,
# digests): a group's nine workers start together, and each with torch's default of one intra-op
# thread per core kept the host's 16 cores 97-99% busy at the 90th percentile while on average
# 43-58% (H100 host): the bursts, not the work, set the pace.
GPU_WORKER_THREADS = 2


def _few_host_threads(device: str) -> None:
    if device.startswith("cuda"):
        torch.set_num_threads(max(1, min(torch.get_num_threads(), GPU_WORKER_THREADS)))


def reference_task(payload: dict) -> dict:
    device = payload["device"]
    _few_host_threads(device)
    mark_stage("reference build")
    ns = load_namespace(payload["source"], "reference")
    if "runs" in payload:  # several fresh references (a group's members), one CUDA context
        runs = []
        for run in payload["runs"]:
            result = _reference_trials(ns, device, {**payload, **run})
            _drop_worker_only(result)
            runs.append(result)
        peak = _device_peak(device)
        mark_stage("reference send")  # what follows is the results' encoding and sending
        return {"runs": [{**run, "device_peak_bytes": peak} for run in runs]}
    result = _reference_trials(ns, device, payload)
    result["device_peak_bytes"] = _device_peak(device)
    if payload.get("time", True) and payload.get("inductor"):
        _inductor_timing(device, payload, result)
    _drop_worker_only(result)
    mark_stage("reference send")
    return result


def _drop_worker_only(result: dict) -> None:
    """What a reference run keeps for its own later work (the model, a host copy of the first
    trial's inputs as drawn), taken out of what it sends; its states go to the shown file."""
    del result["_model"]
    for trial in result["trials"]:
        trial.pop("_host_inputs", None)
    _shown_states(result)


def _shipped(value, shown: bool = False):
    """A tensor of a reference run's result: written into the run's results file as it is
    made (``result_slot``: one copy, through the pinned staging buffer), else a host copy.
    ``shown``: one a candidate is given as it is (an input it sees, a weight), written into the
    run's shown file, which the parent passes on to the candidate's worker without a copy."""
    if _type(value) is not _Tensor:
        return value
    if value.device.type == "cuda":  # (a host tensor is written from where it lies)
        # sized by the first large tensor (a reference worker watches no threads)
        reserve_staging(max(4 * value.numel() * value.element_size(), 64 << 20))
    slot = result_slot(value, look, shown=shown)
    return to_cpu(value) if slot is None else slot


def _shown_states(result: dict) -> None:
    """The run's model states (the candidate is built with them) into its shown file, each
    tensor once however many states hold it."""
    written: dict[int, Any] = {}

    def ship(tensor):
        if id(tensor) not in written:
            written[id(tensor)] = (tensor, _shipped(tensor, shown=True))
        return written[id(tensor)][1]

    result["state_dict"] = {k: ship(v) for k, v in result["state_dict"].items()}
    result["states"] = {index: {k: ship(v) for k, v in state.items()}
                        for index, state in result["states"].items()}


def _device_peak(device: str) -> int | None:
    """The most this worker's tensors have held on the device so far (its trials run one at a
    time, their tensors back on the host between them): what the grader admits a worker of
    this problem by. None off a GPU."""
    return int(torch.cuda.max_memory_allocated(device)) if device.startswith("cuda") else None


def _build_model(ns: dict, payload: dict) -> tuple[list, Any]:
    """The problem's constructor arguments and its model, built on the host under the
    grade's seed (its weights' draws: seconds of host work for a large model)."""
    _manual_seed(payload["init_seed"])
    init_inputs = list(ns["get_init_inputs"]())
    _manual_seed(payload["init_seed"])
    return init_inputs, ns["Model"](*init_inputs)


def _reference_trials(ns: dict, device: str, payload: dict) -> dict:
    """One fresh reference run. GPU work that is not timed holds the GPU's lock shared: no
    other grade's timing window runs meanwhile (reference forwards can be the heaviest work on
    the device). The model is built on the host before (host work: a window need not wait for
    it), and a window that asks meanwhile goes between two trials (``let_window_in``), not
    after all of them."""
    built = _build_model(ns, payload)
    with M.GpuLock(payload.get("lock")).shared() as held:
        return _trials_on_device(ns, device, payload, built, held)


def _trials_on_device(ns: dict, device: str, payload: dict, built: tuple, held) -> dict:
    init_inputs, model = built
    model = model.to(device)
    constructor = {k: to_cpu(v) for k, v in model.state_dict().items()}
    # Model states (T-18): 0 is the constructor's; every other one a trial names is re-drawn
    # from it under the parent's secret seed (``state.perturbed_model_state``) and loaded
    # before that trial's forward. The first trial's is the grade's base state: the candidate
    # gets it at construction, and the constructor's values appear in no trial.
    states: dict[int, dict] = {0: constructor}
    for index in sorted({int(spec.get("state") or 0) for spec in payload["trials"]} - {0}):
        try:
            states[index] = perturbed_model_state(model, int(payload.get("state_seed") or 0) +
                                                  index)
            model.load_state_dict(states[index])  # one the model takes (no custom loader
        except Exception:  # noqa: BLE001 — refuses it): else the constructor's, as before
            states[index] = constructor
    base = int(payload["trials"][0].get("state") or 0) if payload["trials"] else 0
    mark = result_mark()
    result = _trials_under(ns, model, device, payload, states, held)
    if not result["natural_finite"] and base and \
            any(not torch.equal(a, b) for a, b in zip(states[base].values(),
                                                      constructor.values())):
        # the problem's own draws overflow under the re-drawn base state: the constructor's
        # is the base (the problem was validated under it); re-drawn trials stay re-drawn
        states[base] = constructor
        result_rewind(mark)  # the first pass's tensors, written as made, are not sent
        result = _trials_under(ns, model, device, payload, states, held)
    elif base and result["trials"] and result["trials"][0]["usable"]:
        # what the first trial's inputs give under the constructor's state, for the parent to
        # recognise an answer computed from it (weights folded at construction, a norm's
        # affine step dropped where the constructor made it the identity): never sent on
        first = result["trials"][0]
        model.load_state_dict(constructor)
        _manual_seed(forward_seed(payload["init_seed"]))
        try:
            with torch.no_grad():
                _structure, items = flatten_outputs(
                    model(*to_device(first["_host_inputs"], device)))
            sync(device)
            first["constructor_outputs"] = [to_cpu(t) if _isinstance(t, torch.Tensor) else t
                                            for t in items]
        except Exception:  # noqa: BLE001 — a diagnosis only
            pass
        model.load_state_dict(states[base])
    return {"init_inputs": init_inputs, "state_dict": states[base], "trials": result["trials"],
            "states": {k: v for k, v in states.items() if k and k != base}, "base_state": base,
            "info": device_info(device), "ops": result["ops"], **result["work"],
            "_model": model}


def _trials_under(ns: dict, model, device: str, payload: dict, states: dict,
                  held=None) -> dict:
    """Every trial's reference forward, each under its state (loaded when it changes); a
    timing window waiting for the GPU goes between two trials (``held``: the shared hold)."""
    current = None
    trials = []
    mark_stage("reference forward")
    natural_finite = True
    ops: list[str] = []
    work: dict = {}
    base = int(payload["trials"][0].get("state") or 0) if payload["trials"] else 0
    for spec in payload["trials"]:
        if held is not None:
            # the work before (the trial before, one that raised too; the model moved to the
            # device and its states drawn) is done on the device
            sync(device)
            held.let_window_in()
        wanted = int(spec.get("state") or 0)
        if wanted != current:
            model.load_state_dict(states[wanted])
            current = wanted
        inputs = transform(draw_inputs(ns, device, spec["seed"]), spec["dist"])
        # the inputs of a trial the candidate is shown (not the unseen check's)
        kept = [_shipped(v, shown=not spec.get("hidden")) for v in inputs]
        device_inputs = to_device(inputs, device)
        _manual_seed(forward_seed(payload["init_seed"]))
        tracer = _OpTrace() if not trials else None
        natural = spec["dist"] == "natural" and wanted == base
        try:
            with torch.no_grad():
                if tracer is not None:
                    with tracer:
                        out = model(*device_inputs)
                    ops = tracer.ops
                    work = {"flops": tracer.flops, "thin_gemms": len(tracer.thin_gemms)}
                else:
                    out = model(*device_inputs)
                structure, items = flatten_outputs(out)
            sync(device)
        except Exception as exc:  # outside the problem's domain: left out
            if natural or tracer is not None:
                raise
            # a derived distribution or a re-drawn state the reference refuses (an input
            # outside an op's domain, a parameter its checks reject) is not graded on
            trials.append({"seed": spec["seed"], "dist": spec["dist"], "state": wanted,
                           "inputs": kept, "hidden": bool(spec.get("hidden")), "outputs": [],
                           "structure": None, "usable": False, "device_types": [],
                           "error": f"{type(exc).__name__}: {exc}"[:200]})
            continue
        # finiteness where the outputs are (on a GPU: a kernel, not a host scan per trial)
        finite = all(bool(torch.isfinite(t).all()) for t in items
                     if _isinstance(t, torch.Tensor) and t.is_floating_point())
        outputs = [_shipped(t) if _isinstance(t, torch.Tensor) else t for t in items]
        # a derived distribution or a re-drawn state where the reference itself overflows is
        # left out (the problem's draws are what it was validated on), unless the natural
        # draws are not finite either
        if natural:
            natural_finite = natural_finite and finite
        usable = finite or natural or not natural_finite
        trials.append({"seed": spec["seed"], "dist": spec["dist"], "state": wanted,
                       "inputs": kept,
                       **({} if trials else {"_host_inputs": [to_cpu(v) if _type(v) is _Tensor
                                                             else v for v in inputs]}),
                       "hidden": bool(spec.get("hidden")),
                       "outputs": outputs, "structure": structure, "usable": usable,
                       "device_types": [t.device.type for t in items
                                        if _isinstance(t, torch.Tensor)]})
    return {"trials": trials, "ops": ops, "work": work, "natural_finite": natural_finite}


def _inductor_timing(device: str, payload: dict, result: dict) -> None:
    """Eager and Inductor timed together, once per reference (the verdict's eager time comes
    from the candidate's window; Inductor's from this ratio)."""
    model = result["_model"]
    mark_stage("reference inductor")
    inputs = to_device(result["trials"][0]["_host_inputs"], device)

    def eager():
        with torch.no_grad():
            return model(*inputs)

    try:
        compiled = torch.compile(model)

        def inductor():
            with torch.no_grad():
                return compiled(*inputs)

        inductor()  # compiles, outside the timing lock
        sync(device)
        mark_stage("reference inductor timing")
        with M.GpuLock(payload.get("lock")).exclusive():
            result["eager"] = T.measure(eager, device, **_timer_options(payload))
            result["inductor"] = T.measure(inductor, device, **_timer_options(payload))
    except Exception as exc:  # noqa: BLE001 — Inductor failing is a fact, not a crash
        result["inductor_error"] = f"{type(exc).__name__}: {exc}"[:500]


def reference_timing_task(payload: dict) -> dict:
    """Time the reference's eager forward in a parent-driven window (``validate.window``): the
    model built from the same seeds as ``reference_task``, on the inputs the parent sends (those
    the candidate is timed on). Never sees candidate code."""
    device = payload["device"]
    _few_host_threads(device)
    mark_stage("reference build")
    ns = load_namespace(payload["source"], "reference")
    if not await_gpu(receive, report):
        return {"timing": None}
    _manual_seed(payload["init_seed"])
    init_inputs = list(ns["get_init_inputs"]())
    _manual_seed(payload["init_seed"])
    model = ns["Model"](*init_inputs).to(device)
    if payload.get("state_dict"):  # the grade's base state (T-18), as the candidate's
        model.load_state_dict(payload["state_dict"])
    placements = T.placed_copies(to_device(payload["inputs"], device), device)
    turn = itertools.count()

    def eager():  # on each placement of the inputs in turn, as the candidate's timed calls
        inputs = placements[next(turn) % len(placements)]
        with torch.no_grad():
            return model(*inputs)

    mark_stage("reference timing")
    _timer, timing = _serve_timing(eager, device, payload)
    return {"timing": timing}


# ---------------------------------------------------------------- the candidate run

def _load_weights(model, state: dict) -> str:
    """Give the candidate the reference's weights (``state.match_state``): by name (a buffer
    of its own beside them kept), else by order where the shapes agree."""
    if not state:
        return "none"
    mine = model.state_dict()
    matched = match_state(mine, state)
    if matched is None:
        return "seed only"
    if matched[0] == "by name":
        model.load_state_dict(state, strict=set(mine) == set(state))
        return "by name"
    with torch.no_grad():
        for target, name in matched[1]:
            _tensor_copy(target, state[name])
    return "by order"


def _baseline(device: str) -> None:
    """Start the runtime's own threads (OpenMP pool, CUDA) before the snapshot."""
    a = torch.randn(256, 256, device=device)
    (a @ a).sum().item()
    torch.softmax(a, dim=-1).max().item()
    sync(device)
    _start_host_pool()


def _start_host_pool() -> None:
    """The host's intra-op thread pool, started by one elementwise op large enough to run in
    parallel: on a GPU nothing before the candidate's first call ran one, and the worker's own
    host copies later (an output kept past the staging buffer) started the pool's threads, read
    as the candidate's in the next call (``background_thread`` on every honest answer with a
    large output, H200)."""
    (torch.ones(1 << 18) * 2).sum().item()


def candidate_task(payload: dict) -> dict:
    """The candidate's worker run (``_candidate_task``), on a private copy of the worker package
    (``guards.private``)."""
    return _private_namespace()[__name__]["_candidate_task"](payload)


def _largest_tensor_bytes(payload: dict) -> int:
    """The largest input of the candidate's trials, or output it may give (the reference's
    largest: ``max_output_bytes`` is four times that and 1 MiB)."""
    inputs = [v.numel() * v.element_size() for trial in payload.get("trials") or ()
              for v in trial.get("inputs") or () if _type(v) is _Tensor]
    outputs = (int(payload.get("max_output_bytes") or 0) - (1 << 20)) // 4
    return max([outputs, *inputs])


def _candidate_task(payload: dict) -> dict:
    device = payload["device"]
    source = payload["source"]
    _few_host_threads(device)
    if payload.get("window") and not await_gpu(receive, report):
        payload = {**payload, "time": False}  # the window was called off: check, do not time

    def step_aside() -> None:
        """A point where this worker's GPU work so far is done on the device (between two
        calls, or two stages of its start): another grade's waiting window may go first
        (``validate.step_aside``); only where the parent runs this window. Told to stop
        there, the worker checks and is not timed (as at ``await_gpu``). A window waits for
        the stretch a holder is in, so no stretch is long: the start (CUDA context, the
        import, the model built and moved) has points too."""
        nonlocal payload
        if payload.get("window") and payload.get("time", True):
            sync(device)
            if not step_aside_point(receive, report):
                payload = {**payload, "time": False}

    mark_stage("setup")
    if device.startswith("cuda"):
        torch.cuda.init()
    _baseline(device)
    reserve_staging(_largest_tensor_bytes(payload))
    step_aside()
    # before the import: every op registered later is the candidate's
    witness = Witness(device if payload.get("device_witness", True) else "cpu")
    _install_triton_hook()
    # Every candidate's loaders are wrapped, whether or not its text names them (a name
    # computed at run time reaches the same functions, and on a GPU a build at import may run a
    # compiler): where the compile worker built nothing, nothing loads.
    named = "cpp_extension" in source or "load_inline" in source
    _install_extension_hooks(allowed_digests=payload.get("extension_digests") if named else [])
    _install_thread_hooks()
    _install_host_access_hooks()
    confine = payload.get("confine", False)
    if confine:
        # No process creation from here on; on CUDA only after the first call, whose Triton
        # JIT runs ptxas and a C compiler (a downgrade the verdict records).
        sandbox.isolate_network()
        sandbox.forbid_other_processes()
        if not device.startswith("cuda"):
            sandbox.forbid_process_creation()
        else:
            sandbox.STATE["process_creation"] = "allowed until the first call (CUDA JIT)"
    base_threads = {t.ident for t in _enumerate_threads()}
    base_tasks = _tasks()
    facts: dict[str, Any] = {"calls": []}

    # after our own hooks: what changes from here on is the candidate's (kept here, with the
    # checker, out of the candidate's reach: it may reach this module's globals)
    snapshot, check_patched = snapshot_modules(), patched_functions
    # kernelmill's own functions and the builtins, checked again at every timing report: a
    # patch made for the window and undone before the end (the timer's clocks slowed, the
    # encoder wrapped) is live when the window's answers are sent
    own = (tuple(e for e in snapshot[0] if _owned_by_us(e[0])), (),
           tuple(m for m in snapshot[2] if _owned_by_us(m[0])))
    seen_patches: list[str] = []

    def checked_report(value: dict) -> None:
        seen_patches.extend(check_patched(own))
        report(value)

    _bind_cuda_generators()
    refuse_runtime_code()
    require_trusted_senders()
    mark_stage("import")
    ns = load_namespace(source, "candidate")
    if "ModelNew" not in ns:
        raise NameError("candidate defines no ModelNew")
    step_aside()
    mark_stage("init")
    _manual_seed(payload["init_seed"])
    model = ns["ModelNew"](*payload["init_inputs"])
    if _isinstance(model, torch.nn.Module):
        model = model.to(device)
        facts["weights"] = _load_weights(model, payload.get("state_dict") or {})
    step_aside()
    trials = payload["trials"]
    # the model states the trials run under (T-18): the base one (loaded above), and the
    # re-drawn ones some trials name
    base = int(payload.get("base_state") or 0)
    states = {int(k): v for k, v in (payload.get("states") or {}).items()}
    states[base] = payload.get("state_dict") or {}
    run = _Run(model, device, base_threads, base_tasks, payload.get("max_output_bytes"),
               trials=trials, witness=witness, check_seed=payload.get("timed_check_seed"),
               hidden=int(payload.get("hidden_trials") or 0), init_seed=payload["init_seed"],
               hidden_required=payload.get("hidden_required"),
               retry_ratio=payload.get("unseen_retry_ratio"),
               states=states, base_state=base,
               slots=StateSlots(model, states[base]) if len(states) > 1 else None)
    buffers = run.buffers
    facts["modes_after_import"] = active_modes()
    step_aside()
    mark_stage("profiler start")
    witness.start()
    mark_stage("forward")
    for index in range(len(trials)):
        facts["calls"].append({"trial": index, "kind": "fresh", **run.call(index)})
        if index == 0 and confine and device.startswith("cuda"):
            if sandbox.forbid_process_creation() == "blocked":
                sandbox.STATE["process_creation"] = "blocked after the first call"
        step_aside()
    refill = payload.get("refill_from")
    if refill is not None:
        mark_stage("forward refill")
        facts["calls"].append({"trial": refill, "kind": "refill", **run.call(refill)})
        step_aside()
    mark_stage("forward repeat")
    facts["calls"].append({"trial": 0, "kind": "repeat", **run.call(0)})
    facts["children"] = len(_live_children())
    step_aside()

    if payload.get("time", True) and payload.get("window") and payload.get("early_check"):
        # the parent compares a sample of the answers before the window: a wrong one is not
        # timed (it never takes the GPU alone)
        mark_stage("early check")
        report({"checked": early_answer(facts["calls"])})
        if receive().strip() != "time":
            payload = {**payload, "time": False}
    if payload.get("time", True):
        mark_stage("timing")
        before = _observed()
        calls = [0]

        def forward():
            calls[0] += 1
            return run.timed()  # instrumented exactly like the checked calls

        timer, timing = _serve_timing(forward, device, payload, witness, run.unseen,
                                      send=checked_report, after_work=run.check_timed_inputs,
                                      after_sample=run.sometimes_check_timed_inputs)
        timing["calls"] = calls[0]
        run.check_timed_inputs()  # once more after the window, every placement (a graph's too)
        after = _observed()
        timing["launches"] = after["launches"] - before["launches"]
        timing["ext_calls"] = after["ext_calls"] - before["ext_calls"]
        facts["timing"] = timing
        facts["unseen"] = run.unseen_facts
        mark_stage("after timing")
        # What the timed work left in its output (the graph's, when captured) on trial 0. The
        # last timed call may have been a secret check on another trial's inputs: call again.
        out = timer.output
        while timer.graph is None and run.timed_checks and \
                run.timed_checks[-1]["call"] == run.timed_calls:
            out = timer.replay()
        facts["timed"] = run.observe(out, buffers, sent=trials[0]["inputs"])
        facts["timed"]["changed_while_timed"] = list(run.changed_while_timed)
        check = payload.get("graph_check_trial")
        if timer.graph is not None and check is not None:
            # The graph, not Python, is what was timed: refill its inputs with another
            # trial's, replay it, and let the parent compare.
            step_aside()
            mark_stage("graph check")
            run.load_trial(trials[check])
            out = timer.replay()
            # every call's output, each in memory of its own: a call that did part of the work
            # and left the rest to the calls beside it differs from the last
            agree = M.calls_disagree(timer.outputs, tuple(payload.get("tolerance") or (0, 0)))
            facts["graph_check"] = {"trial": check, "calls_agree": agree,
                                    **run.observe(out, run.buffers, inputs_after=False)}
        facts["timed"]["threads"] = sorted(
            t.name for t in _enumerate_threads() if t.ident not in base_threads and t.is_alive())
        # An audit call, traced like the checked ones, after an unpredictable number of timed
        # calls: a submission that switches to PyTorch after N calls is caught here.
        step_aside()
        mark_stage("audit")
        facts["calls"].append({"trial": 0, "kind": "audit", **run.call(0)})
        facts["children"] = max(facts["children"], len(_live_children()))
    mark_stage("ghost")
    # first on the inputs of the call before: a forward that serves the answer of the inputs it
    # saw last (keyed by their values, their address, or nothing) gives it with its launches
    # skipped too; then on another trial's. The call before is one more on
    # the last trial, not on the timed inputs: hundreds of freed outputs hold the timed
    # inputs' answer, and on a CPU the allocator handed one to an honest forward's ``empty``
    # past the ghost's poison blocks (1-2 grades in 12 of an honest 128 KB output)
    step_aside()
    last = len(trials) - 1
    run.load_trial(trials[last])
    run.invoke(False)
    sync(device)
    facts["ghost_seen"] = run.ghost(last)
    facts["ghost"] = run.ghost(1 if last > 1 else 0)
    facts["state_loads"] = run.state_loads
    if payload.get("window"):
        report({"gpu_done": True})  # the rest is host work: the parent frees the GPU
    run.witnessed(facts)
    facts["patched"] = check_patched(snapshot)
    observed = _observed()
    facts["refused_compiles"] = observed["refused"]
    facts["host_alias"] = observed["host_alias"]
    facts["host_view"] = observed["host_view"]
    facts["threads_started"] = observed["threads_started"]
    facts["modes_at_end"] = active_modes()
    facts["profile_hooks"] = sys.getprofile() is not None or sys.gettrace() is not None
    facts["info"] = device_info(device)
    facts["confinement"] = sandbox.report()

    def guard() -> list[str]:
        """Checked again after this function returns, just before the facts are encoded
        (``harness_worker.RESULT_GUARD``): a function rebound since the import would see the
        facts (``torch.save`` looks up Python functions on torch's modules). With what the
        timing reports saw rebound."""
        patched = sorted(set(check_patched(snapshot)) | set(seen_patches))
        return [f"replaced since the candidate's import: {', '.join(patched[:8])}"] if \
            patched else []

    facts[RESULT_GUARD] = guard
    return facts


def compile_task(payload: dict) -> dict:
    """Import a candidate so its extensions build (on a CPU-only worker, into a shared folder),
    on a private copy of the worker package (``guards.private``)."""
    return _private_namespace()[__name__]["_compile_task"](payload)


def _compile_task(payload: dict) -> dict:
    mark_stage("compile")
    started = _perf_counter()
    if payload.get("confine", True):
        sandbox.isolate_network()  # its code runs here too (static initializers, at import)
    _install_extension_hooks(prebuilt=False, stream=True)
    refuse_runtime_code()  # its facts (the texts, the digests) are trusted by the parent
    load_namespace(payload["source"], "candidate")
    return {"seconds": _perf_counter() - started, "native_texts": list(_BUILT["texts"]),
            "digests": list(_BUILT["digests"]), "refused_compiles": _observed()["refused"]}
