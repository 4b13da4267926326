"""The reference run's tasks, run by the parent in separate processes (``validate.harness``).

``reference_task`` builds the problem and returns each trial's inputs and the reference outputs;
asked to (``serve_timing``), it delivers them ahead and stays to time one run's reference in the
grade's window when the parent asks. ``reference_timing_task`` times the reference in the
parent's window on a worker of its own. Neither sees candidate code. The candidate's tasks are
in ``tasks``.
"""
from __future__ import annotations

import time
from typing import Any

import torch
from kernelmill.validate import measure as M
from kernelmill.validate import timer as T
from kernelmill.validate.harness_worker import (
    deliver,
    late_part,
    mark_stage,
    receive,
    report,
    result_mark,
    result_rewind,
    result_slot,
    shown_values,
)
from kernelmill.validate.measure import flatten_outputs, load_namespace
from kernelmill.validate.measure import synchronize as sync
from kernelmill.validate.window_worker import await_gpu

from ..scales import output_scales
from .guards.originals import _isinstance, _Tensor, _type
from .inputs import draw_inputs, look_pieces, reserve_staging, to_cpu, to_device, transform
from .observers.optrace import _OpTrace
from .seeding import _manual_seed, forward_seed
from .state import perturbed_model_state
from .tasks import _few_host_threads
from .timing import _serve_timing, _timer_options, device_info, timing_placing


def reference_task(payload: dict) -> dict:
    device = payload["device"]
    _few_host_threads(device)
    mark_stage("reference build")
    ns = load_namespace(payload["source"], "reference")
    bases: list[dict] = []  # what timing each run needs (``_time_when_asked``)
    runs: list | None = None
    if "runs" in payload:  # several fresh references (a group's members), one CUDA context
        runs = []
        for run in payload["runs"]:
            result = _reference_trials(ns, device, {**payload, **run})
            bases = [{**b, "model": None} for b in bases] + [_timing_basis(result, run)]
            _drop_worker_only(result)
            runs.append(result)
        peak = _device_peak(device)
        mark_stage("reference send")  # what follows is the results' encoding and sending
        value = {"runs": [{**run, "device_peak_bytes": peak} for run in runs]}
    else:
        value = _reference_trials(ns, device, payload)
        value["device_peak_bytes"] = _device_peak(device)
        if payload.get("time", True) and payload.get("inductor"):
            _inductor_timing(ns, device, payload, value)
        bases = [_timing_basis(value, payload)]
        _drop_worker_only(value)
        mark_stage("reference send")
    if not payload.get("serve_timing"):
        return value
    deliver({**value, "_cpu_s": _cpu_seconds()})
    value = runs = None  # what was sent is the parent's now
    return _time_when_asked(ns, device, payload, bases)


def _cpu_seconds() -> float:
    import resource

    used = resource.getrusage(resource.RUSAGE_SELF)
    return round(used.ru_utime + used.ru_stime, 3)


def _timing_basis(result: dict, seeds: dict) -> dict:
    """What timing run ``result``'s reference needs once its results are sent: its seeds, its
    base state (on the host), its first trial's inputs as sent (their slots in the shown file)
    and its model (kept for the last run made only)."""
    return {"init_seed": seeds["init_seed"], "state": result["state_dict"],
            "inputs": result["trials"][0]["inputs"], "model": result["_model"]}


def _time_when_asked(ns: dict, device: str, payload: dict, bases: list[dict]) -> dict:
    """After the run's results are delivered: time run ``k``'s reference when the parent says
    ``time k`` (its grade's window is about to open), as ``reference_timing_task`` does on a
    worker of its own: the model under that run's seeds and base state, on that run's first
    inputs (the candidate's timed inputs). Its own process and CUDA context serve both: one
    worker fewer per grade. Anything else from the parent (it closed the pipe: no window) ends
    the run untimed."""
    mark_stage("reference waits")
    if device.startswith("cuda"):
        torch.cuda.empty_cache()  # the trials' blocks, while the candidates run
    asked = receive().strip().split()
    if len(asked) != 2 or asked[0] != "time" or not asked[1].isdigit() or \
            int(asked[1]) >= len(bases):
        return {"timing": None}
    basis = bases[int(asked[1])]
    model = basis["model"]
    for other in bases:  # the other runs' model (the last made) leaves the device first
        other["model"] = None
    if model is None:  # built on the host, outside the GPU's lock
        _init_inputs, model = _build_model(ns, basis)
    if not await_gpu(receive, report):
        return {"timing": None}
    model = model.to(device)
    model.load_state_dict(basis["state"])
    # the first trial's inputs as the candidate is given them (its shown file's bytes): a draw
    # again from the trial's seed would differ where ``get_inputs`` uses Python's or NumPy's
    # generators, which the seed does not reach
    return _time_reference(model, to_device(list(shown_values(basis["inputs"])), device),
                           device, payload)


def _drop_worker_only(result: dict) -> None:
    """What a reference run keeps for its own later work (the model, how the first trial's
    inputs were drawn), taken out of what it sends; its states go to the shown file, unless
    the run makes unseen trials alone for a run that ships them (``private_only``)."""
    del result["_model"]
    for trial in result["trials"]:
        trial.pop("_draw", None)
    if result.pop("_private_only", False):
        result["state_dict"], result["states"] = {}, {}
        return
    _shown_states(result)


def _first_inputs(ns: dict, device: str, result: dict) -> list:
    """The first trial's inputs drawn again on the device from its seed (the same seed gives
    the same tensors): no host copy of them is kept while the trials run (a second copy of a
    KernelBench-size input through the host, a fifth of a fresh reference run's CPU)."""
    seed, dist = result["trials"][0]["_draw"]
    return to_device(transform(draw_inputs(ns, device, seed), dist), device)  # as the trial's


def _shipped(value, shown: bool = False):
    """A tensor of a reference run's result: written into the run's results file as it is
    made (``result_slot``: one copy, through the pinned staging buffer), else a host copy.
    ``shown``: one a candidate is given as it is (an input it sees, a weight), written into the
    run's shown file, which the parent passes on to the candidate's worker without a copy."""
    if _type(value) is not _Tensor:
        return value
    _stage_for(value)
    slot = result_slot(value, look_pieces, shown=shown)
    return to_cpu(value) if slot is None else slot


def _stage_for(value) -> None:
    """The pinned staging buffer (``look``) reserved for a device tensor about to be written
    to a file, sized by the first large one (a reference worker watches no threads); a host
    tensor is written from where it lies."""
    if value.device.type == "cuda":
        reserve_staging(max(4 * value.numel() * value.element_size(), 64 << 20))


def _unseen_part(spec: dict, inputs: list):
    """An unseen trial's inputs as the late part its candidate is handed inside the window
    (``harness_worker.late_part``: written here once, never copied by the grader); None where
    the run makes no parts."""
    for value in inputs:
        if _type(value) is _Tensor:
            _stage_for(value)
    return late_part({"seed": spec["seed"], "inputs": inputs}, look_pieces)


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
    # a run making some group members' unseen trials for another run (``private_only``)
    # takes the base state that run settled on: the re-drawn one, or the constructor's
    # (``base_constructor``), never a choice of its own
    private = bool(payload.get("private_only"))
    if private and payload.get("base_constructor"):
        states[base] = constructor
    mark = result_mark()
    result = _trials_under(ns, model, device, payload, states, held)
    kept = True  # the base state re-drawn as asked (not fallen back to the constructor's)
    if not private and not result["natural_finite"] and base and \
            any(not torch.equal(a, b) for a, b in zip(states[base].values(),
                                                      constructor.values())):
        # the problem's own draws overflow under the re-drawn base state: the constructor's
        # is the base (the problem was validated under it); re-drawn trials stay re-drawn
        states[base] = constructor
        kept = False
        result_rewind(mark)  # the first pass's tensors, written as made, are not sent
        result = _trials_under(ns, model, device, payload, states, held)
    elif not private and base and result["trials"] and result["trials"][0]["usable"]:
        # what the first trial's inputs give under the constructor's state, for the parent to
        # recognise an answer computed from it (weights folded at construction, a norm's
        # affine step dropped where the constructor made it the identity): never sent on
        first = result["trials"][0]
        model.load_state_dict(constructor)
        try:
            inputs = _first_inputs(ns, device, result)
            _manual_seed(forward_seed(payload["init_seed"]))
            with torch.no_grad():
                _structure, items = flatten_outputs(model(*inputs))
            del inputs
            sync(device)
            first["constructor_outputs"] = [to_cpu(t) if _isinstance(t, torch.Tensor) else t
                                            for t in items]
        except Exception:  # noqa: BLE001 — a diagnosis only
            pass
        model.load_state_dict(states[base])
    # the constructor's arguments a candidate is built with: its tensors into the shown file
    # with the weights (a large one pickled made every member's payload a copy of it all)
    shipped = init_inputs if private else [_shipped(v, shown=True) for v in init_inputs]
    return {"init_inputs": shipped, "state_dict": states[base], "trials": result["trials"],
            "forward_parts_s": result["parts_s"], "forward_stretch_s": result["stretch_s"],
            "states": {k: v for k, v in states.items() if k and k != base}, "base_state": base,
            "base_redrawn": kept, "natural_finite": result["natural_finite"],
            # (only where workers must agree: a run one group's members share)
            **({"state_digest": _state_digest(states[base])}
               if private or any("member" in spec for spec in payload["trials"]) else {}),
            "info": device_info(device), "ops": result["ops"],
            **result["work"], "_model": model, **({"_private_only": True} if private else {})}


def _state_digest(state: dict) -> list:
    """What a run's base state holds, told apart cheaply (each tensor's name, shape and sums in
    float64, on the host where the states are): two workers of one shared run must have built
    the same weights from the same seeds, which a constructor that draws from Python's or
    NumPy's generators (the seed reaches torch's alone) would not."""
    digest = []
    for name, value in state.items():
        if _isinstance(value, torch.Tensor) and value.is_floating_point():
            work = value.detach()
            digest.append([name, list(value.shape), float(work.sum(dtype=torch.float64)),
                           float(work.abs().sum(dtype=torch.float64))])
        elif _isinstance(value, torch.Tensor):
            digest.append([name, list(value.shape), int(value.long().sum())])
    return digest


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
    written = [result_mark()[0]]  # the results file's end after each trial
    # where the stage's wall time went (the profile's, never judged): stepped aside for other
    # grades' windows, writing tensors into the run's files, and the rest (draws, forwards)
    parts = {"stepped_aside": 0.0, "written": 0.0}
    began = time.monotonic()
    # the longest stretch of this hold between two points where a window may go first: what
    # a window that asks during it waits for, at most
    stretch = {"last": began, "longest": 0.0}

    def point() -> None:
        """A point where a waiting window goes first: the work before is done on the
        device (``sync``)."""
        if held is None:
            return
        sync(device)
        at = time.monotonic()
        stretch["longest"] = max(stretch["longest"], at - stretch["last"])
        held.let_window_in()
        stretch["last"] = time.monotonic()
        parts["stepped_aside"] += stretch["last"] - at

    for spec in payload["trials"]:
        if spec.get("spare") and not _room_for_spare([*written, result_mark()[0]]):
            continue  # a spare unseen trial is the check's, never a reason to fail the run
        # the group member an unseen trial is drawn for, where one run serves several
        member = {"member": spec["member"]} if "member" in spec else {}
        # the work before (the trial before, one that raised too; the model moved to the
        # device and its states drawn) is done on the device
        point()
        wanted = int(spec.get("state") or 0)
        if wanted != current:
            model.load_state_dict(states[wanted])
            current = wanted
        inputs = transform(draw_inputs(ns, device, spec["seed"]), spec["dist"])
        # the inputs of a trial the candidate is shown, into the shown file; the unseen check's
        # into a late part of their own (handed to the candidate's worker as it is)
        at = time.monotonic()
        kept = _unseen_part(spec, inputs) if spec.get("hidden") else None
        if kept is None:
            kept = [_shipped(v, shown=not spec.get("hidden")) for v in inputs]
        parts["written"] += time.monotonic() - at
        device_inputs = to_device(inputs, device)
        # the inputs drawn and written into the run's files (seconds at KernelBench's sizes),
        # and the forward to come: a point between them halves a trial's stretch
        point()
        _manual_seed(forward_seed(payload["init_seed"]))
        # (the op trace is the run's first trial's: none in a run of unseen trials alone)
        tracer = _OpTrace() if not trials and not payload.get("private_only") else None
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
            if (natural and not spec.get("spare")) or tracer is not None:
                raise  # (a spare unseen trial that raised is left out, as a derived one)
            # a derived distribution or a re-drawn state the reference refuses (an input
            # outside an op's domain, a parameter its checks reject) is not graded on
            trials.append({"seed": spec["seed"], "dist": spec["dist"], "state": wanted,
                           "inputs": kept, "hidden": bool(spec.get("hidden")), "outputs": [],
                           **member,
                           "structure": None, "usable": False, "device_types": [],
                           "error": f"{type(exc).__name__}: {exc}"[:200]})
            continue
        # finiteness where the outputs are (on a GPU: a kernel, not a host scan per trial)
        finite = all(bool(torch.isfinite(t).all()) for t in items
                     if _isinstance(t, torch.Tensor) and t.is_floating_point())
        scales = [_scales_of(t) for t in items]  # on the device, before they leave it
        at = time.monotonic()
        outputs = [_shipped(t) if _isinstance(t, torch.Tensor) else t for t in items]
        parts["written"] += time.monotonic() - at
        # a derived distribution or a re-drawn state where the reference itself overflows is
        # left out (the problem's draws are what it was validated on), unless the natural
        # draws are not finite either
        if natural:
            natural_finite = natural_finite and finite
        usable = finite or natural or not natural_finite
        trials.append({"seed": spec["seed"], "dist": spec["dist"], "state": wanted,
                       "inputs": kept,
                       **({} if trials else {"_draw": (spec["seed"], spec["dist"])}),
                       "hidden": bool(spec.get("hidden")), **member,
                       "outputs": outputs, "scales": scales, "structure": structure,
                       "usable": usable,
                       "device_types": [t.device.type for t in items
                                        if _isinstance(t, torch.Tensor)]})
        written.append(result_mark()[0])
    ended = time.monotonic()
    parts["other"] = ended - began - parts["stepped_aside"] - parts["written"]
    return {"trials": trials, "ops": ops, "work": work, "natural_finite": natural_finite,
            "parts_s": {k: round(v, 3) for k, v in parts.items()},
            "stretch_s": round(max(stretch["longest"], ended - stretch["last"]), 3)}


def _scales_of(value) -> list[float] | None:
    """An output's scales (``grade.scales``), computed where it lies, for the judge to keep
    (``compare.remember_scales``); None for one that is not a tensor or has none."""
    if not _isinstance(value, torch.Tensor):
        return None
    try:
        return [float(v) for v in output_scales(value)]
    except (RuntimeError, TypeError, ValueError):  # (a dtype the norm refuses)
        return None


def _room_for_spare(written: list[int]) -> bool:
    """Whether the results file has room for a spare unseen trial: twice the largest trial so
    far past its end stays within the file's size limit (what the run sends after its trials
    goes there too). A problem whose tensors fill the file (a 4 GiB convolution's) is graded
    without spares, as it was before they were."""
    import resource

    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit == resource.RLIM_INFINITY:
        return True
    largest = max((b - a for a, b in zip(written, written[1:])), default=0)
    return written[-1] + 2 * largest <= limit


def _inductor_timing(ns: dict, device: str, payload: dict, result: dict) -> None:
    """Eager and Inductor timed together, once per reference (the verdict's eager time comes
    from the candidate's window; Inductor's from this ratio)."""
    model = result["_model"]
    mark_stage("reference inductor")
    inputs = _first_inputs(ns, device, result)

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
    return _time_reference(model, to_device(payload["inputs"], device), device, payload)


def _time_reference(model, inputs: list, device: str, payload: dict) -> dict:
    """The reference's eager forward timed in the parent's window (``timer._serve_timing``)."""
    placing = timing_placing(payload)
    placements = T.placed_copies(inputs, device, placing=placing)
    turns = T.PlacementTurns(len(placements), placing)

    def eager():  # on the placements of the inputs in turn, as the candidate's timed calls
        inputs = placements[turns.next()]
        with torch.no_grad():
            return model(*inputs)

    mark_stage("reference timing")
    _timer, timing = _serve_timing(eager, device, payload, place=turns.capture)
    return {"timing": timing}
