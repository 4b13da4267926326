"""The candidate's tasks, run by the parent in separate processes (``validate.harness``).

``compile_task`` imports a candidate so its extensions build, and reports what was built
from what. ``candidate_task`` builds ``ModelNew``, calls it (``call._Run``) on the reference's
inputs, times it, probes it and returns raw facts; the parent judges (``grade.judge``). Both
run on a private copy of the worker package (``guards.private``). Also the cap on a GPU
worker's host threads (``GPU_WORKER_THREADS``), which the reference run's tasks
(``reference_tasks``) set too.
"""
from __future__ import annotations

import sys
from time import time_ns as _time_ns  # the profiler's records' clock (the asides' spans)
from typing import Any

import torch
from kernelmill.grade.witness import Witness
from kernelmill.validate import measure as M
from kernelmill.validate import sandbox
from kernelmill.validate.harness_worker import (
    ASIDE_SPANS_EVENT,
    RESULT_GUARD,
    mark_stage,
    receive,
    report,
    require_trusted_senders,
)
from kernelmill.validate.late_read import bind as bind_late_read
from kernelmill.validate.measure import load_namespace
from kernelmill.validate.measure import synchronize as sync
from kernelmill.validate.stream_gate import shared as shared_gate
from kernelmill.validate.window_worker import await_gpu, step_aside_point

from .call import _Run
from .early import early_answer
from .guards.audit import refuse_runtime_code
from .guards.dispatch import dispatch_changed, dispatch_snapshot
from .guards.originals import (
    _enumerate_threads,
    _isinstance,
    _perf_counter,
    _Tensor,
    _tensor_copy,
    _type,
)
from .guards.patches import patched_functions, snapshot_modules
from .guards.private import _private_namespace
from .inputs import reserve_staging
from .observers.counts import _audit_event, _observed
from .observers.extensions import _BUILT, _install_extension_hooks
from .observers.host_memory import _install_host_access_hooks
from .observers.launches import COMPILE_ASIDE, _install_compile_aside, _install_triton_hook
from .observers.optrace import active_modes
from .observers.threads import _install_thread_hooks, _live_children, _tasks
from .seeding import _bind_cuda_generators, _manual_seed
from .state import StateSlots, match_state
from .timing import (
    StageMemory,
    _serve_timing,
    _timer_options,
    device_info,
    device_memory,
    single_warm,
    timing_placing,
)

# ---------------------------------------------------------------- both runs

# Host threads of a GPU grading worker's own tensor work (copies to the host, finiteness,
# digests): a group's nine workers start together, and each with torch's default of one intra-op
# thread per core kept the host's 16 cores 97-99% busy at the 90th percentile while on average
# 43-58% (H100 host): the bursts, not the work, set the pace.
GPU_WORKER_THREADS = 2


def _few_host_threads(device: str) -> None:
    if device.startswith("cuda"):
        torch.set_num_threads(max(1, min(torch.get_num_threads(), GPU_WORKER_THREADS)))


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

    stopped = [False]  # told to stop at a compile's point (``COMPILE_ASIDE``)

    def step_aside() -> None:
        """A point where this worker's GPU work so far is done on the device (between two
        calls, or two stages of its start): another grade's waiting window may go first
        (``validate.step_aside``); only where the parent runs this window. Told to stop
        there, the worker checks and is not timed (as at ``await_gpu``). A window waits for
        the stretch a holder is in, so no stretch is long: the start (CUDA context, the
        import, the model built and moved) has points too, and a Triton compile in the first
        calls steps aside for its length (``COMPILE_ASIDE``)."""
        nonlocal payload
        if stopped[0]:
            payload = {**payload, "time": False}
        if payload.get("window") and payload.get("time", True):
            sync(device)
            if not step_aside_point(receive, report):
                payload = {**payload, "time": False}
                stopped[0] = True

    mark_stage("setup")
    if device.startswith("cuda"):
        torch.cuda.init()
    memory = StageMemory(device)  # the allocator's holdings stage by stage, for the profile
    memory.start()

    def stage(name: str) -> None:
        mark_stage(name)
        memory.mark(name)
    _baseline(device)
    reserve_staging(_largest_tensor_bytes(payload))
    if device.startswith("cuda") and _timer_options(payload).get("gate"):
        shared_gate()  # in this run's private copy, before the import: no submission reaches it
    bind_late_read()  # the late socket and the pipe's reader, as they are before the import
    step_aside()
    # before the import: every op registered later is the candidate's
    witness = Witness(device if payload.get("device_witness", True) else "cpu")
    _install_triton_hook()
    # the first calls' compiles step aside for other grades' windows where the parent asks
    # (its window's checks; on CUDA: ``_install_compile_aside``)
    aside = bool(payload.get("compile_aside") and payload.get("window") and
                 payload.get("time", True) and device.startswith("cuda") and
                 _install_compile_aside(torch._C._cuda_synchronize,
                                        torch._C._cuda_isCurrentStreamCapturing, _time_ns))
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
    # with, as ``own``, kernelmill's own functions and the builtins, checked again at every
    # timing report: a patch made for the window and undone before the end (the timer's clocks
    # slowed, the encoder wrapped) is live when the window's answers are sent
    (snapshot, own), check_patched = snapshot_modules(with_own=True), patched_functions
    # and the dispatcher's kernels for the aten ops the harness's copies run through: a kernel
    # of the submission's own for one decides what those copies hold
    dispatch = dispatch_snapshot()
    seen_patches: list[str] = []

    def checked_report(value: dict) -> None:
        seen_patches.extend(check_patched(own))
        report(value)

    _bind_cuda_generators()
    refuse_runtime_code()
    require_trusted_senders()
    stage("import")
    ns = load_namespace(source, "candidate")
    if "ModelNew" not in ns:
        raise NameError("candidate defines no ModelNew")
    step_aside()
    stage("init")
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
               hidden_required_ungraphed=payload.get("hidden_required_ungraphed"),
               retry_ratio=payload.get("unseen_retry_ratio"), states=states, base_state=base,
               placing=timing_placing(payload), single_warm=single_warm(payload),
               slots=StateSlots(model, states[base]) if len(states) > 1 else None)
    buffers = run.buffers
    run.dispatch = dispatch  # read again where the window keeps the unseen replay's outputs
    facts["modes_after_import"] = active_modes()
    step_aside()
    stage("profiler start")
    witness.start()
    # the first calls only (the window's own calls run under its exclusive hold), and only
    # where the witness records the device's kernels: one that ran while the worker was aside
    # is its error
    if aside and witness.running and witness.unavailable is None:
        COMPILE_ASIDE["on"] = {"receive": receive, "stopped": stopped, "depth": [0]}
    stage("forward")
    for index in range(len(trials)):
        facts["calls"].append({"trial": index, "kind": "fresh", **run.call(index)})
        if index == 0 and confine and device.startswith("cuda"):
            if sandbox.forbid_process_creation() == "blocked":
                sandbox.STATE["process_creation"] = "blocked after the first call"
        step_aside()
    refill = payload.get("refill_from")
    if refill is not None:
        stage("forward refill")
        facts["calls"].append({"trial": refill, "kind": "refill", **run.call(refill)})
        step_aside()
    stage("forward repeat")
    facts["calls"].append({"trial": 0, "kind": "repeat", **run.call(0)})
    facts["children"] = len(_live_children())
    step_aside()
    COMPILE_ASIDE["on"] = None

    if payload.get("time", True) and payload.get("window") and payload.get("early_check"):
        # the parent compares a sample of the answers before the window: a wrong one is not
        # timed (it never takes the GPU alone)
        stage("early check")
        report({"checked": early_answer(facts["calls"])})
        if receive().strip() != "time":
            payload = {**payload, "time": False}
    if payload.get("time", True):
        stage("timing")
        before = _observed()
        calls = [0]

        def forward():
            calls[0] += 1
            return run.timed()  # instrumented exactly like the checked calls

        timer, timing = _serve_timing(forward, device, payload, witness, run.unseen,
                                      send=checked_report, after_work=run.check_timed_inputs,
                                      after_sample=run.sometimes_check_timed_inputs,
                                      prepared=run.before_window, place=run.turns.capture)
        timing["calls"] = calls[0]
        # (what an unseen check that never ran left: not held past the window)
        run.pristine = run.unseen_blocks = None
        run.check_timed_inputs()  # once more after the window, every placement (a graph's too)
        seen_patches.extend(dispatch_changed(dispatch))  # (one unregistered before the end)
        run.replay_agreement(tuple(payload.get("tolerance") or (0, 0)))
        after = _observed()
        timing["launches"] = after["launches"] - before["launches"]
        timing["ext_calls"] = after["ext_calls"] - before["ext_calls"]
        facts["timing"] = timing
        facts["unseen"] = run.unseen_facts
        stage("after timing")
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
            stage("graph check")
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
        stage("audit")
        facts["calls"].append({"trial": 0, "kind": "audit", **run.call(0)})
        facts["children"] = max(facts["children"], len(_live_children()))
    stage("ghost")
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
    facts["device_memory"] = device_memory(device, memory)  # the allocator's peaks, its GPU work done
    if payload.get("window"):
        report({"gpu_done": True})  # the rest is host work: the parent frees the GPU
    stage("witness stop")  # the profiler's session ended (Kineto's own processing)
    run.witness.pause()
    stage("witness read")  # its records read and placed call by call
    if aside:  # where the worker stepped aside, as the channel's writer kept it
        _audit_event(ASIDE_SPANS_EVENT, run.witness.aside_spans_ns)
    run.witnessed(facts)
    stage("result")  # the last facts, then (after return) their encoding and sending
    # Checked here as well as by the guard before encoding: the facts read after this line look
    # functions up (``sys.getprofile``, ``device_info``, ``sandbox.report``), and a patch that
    # answers one of them once and then undoes itself is gone by the guard's check
    facts["patched"] = sorted(set(check_patched(snapshot)) | set(dispatch_changed(dispatch)) |
                              set(seen_patches))
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
        patched = sorted(set(check_patched(snapshot)) | set(seen_patches) |
                         set(dispatch_changed(dispatch)))
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
