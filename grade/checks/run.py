"""Checks over the whole run, after every checked call: answers across calls, the kernels'
share, and what the worker saw of the process outside the calls (patches, host memory,
threads, children, the op witness)."""
from __future__ import annotations

from ..compare import bitwise_equal, compare
from ..policy import compute_ops, op_base
from .attribution import share_check
from .registry import Finding, HackCode, Layer, collect, register

H = HackCode


@register(H.CACHED_OUTPUT, threat="T-07", layer=Layer.BEHAVIOURAL, scope="run")
def no_output_of_other_inputs(ctx):
    calls, found = [v.call for v in ctx.views], []
    for i, later in enumerate(calls):
        if later["outputs"] is None or ctx.views[i].ok:
            continue
        for earlier in calls[:i]:
            if earlier["outputs"] is None or earlier["trial"] == later["trial"]:
                continue
            same = len(earlier["outputs"]) == len(later["outputs"]) and all(
                bitwise_equal(a, b) for a, b in zip(earlier["outputs"], later["outputs"]))
            if same:
                found.append(Finding(H.CACHED_OUTPUT, f"{later['kind']}:{later['trial']} "
                                     f"returned the output of {earlier['kind']}:"
                                     f"{earlier['trial']} (other inputs)"))
    return found


@register(H.INCONSISTENT, threat="T-07", layer=Layer.BEHAVIOURAL, scope="run")
def same_inputs_same_answer(ctx):
    first = next((v for v in ctx.views if v.call["kind"] == "fresh" and v.call["trial"] == 0),
                 None)
    repeat = next((v for v in ctx.views if v.call["kind"] == "repeat"), None)
    if first and repeat and first.ok and not repeat.ok:
        return [Finding(H.INCONSISTENT, "the same inputs gave a right answer, then a wrong one")]
    return []


@register(H.TORCH_COMPUTE, threat="T-09", layer=Layer.DEVICE, scope="run",
          switch="check_candidate_share")
def candidate_share_of_time(ctx):
    return collect(H.TORCH_COMPUTE, lambda hack: share_check(
        [v.attribution for v in ctx.views], ctx.policy, hack))


@register(H.PATCHED_FUNCTION, threat="T-05", layer=Layer.BEST_EFFORT, scope="run")
def harness_functions_intact(ctx):
    value = ctx.run.get("patched")
    return [Finding(H.PATCHED_FUNCTION, f"replaced: {', '.join(value[:6])}")] if value else []


@register(H.FORBIDDEN_API, threat="T-01", layer=Layer.BEST_EFFORT, scope="run")
def no_refused_compile(ctx):
    refused = ctx.run.get("refused_compiles")
    return [Finding(H.FORBIDDEN_API, f"{refused[0]} (refused)")] if refused else []


@register(H.HOST_COMPUTE, threat="T-10", layer=Layer.BEST_EFFORT, scope="run")
def no_tensor_over_python_memory(ctx):
    alias = ctx.run.get("host_alias")
    return [Finding(H.HOST_COMPUTE, f"{alias} tensor(s) made over Python-owned memory "
                    "(frombuffer, from_file, from_numpy): what kernels write there Python can "
                    "compute")] if alias else []


@register(H.HOST_COMPUTE, threat="T-10", layer=Layer.BEST_EFFORT, scope="run")
def memory_is_torch_allocated(ctx):
    foreign = [f"{c['kind']}:{c['trial']}" for c in ctx.run.get("calls") or []
               if c.get("foreign_memory") or c.get("foreign")]
    if foreign or (ctx.run.get("timed") or {}).get("foreign"):
        return [Finding(H.HOST_COMPUTE, f"{', '.join(foreign[:4]) or 'the timed output'}: a "
                        "kernel's argument, a copy or the output lay in memory torch did not "
                        "allocate (NumPy's, a buffer's, a shared or mapped file's), which Python "
                        "reads and writes unseen")]
    return []


@register(H.HOST_COMPUTE, threat="T-10", layer=Layer.BEST_EFFORT, scope="run")
def no_host_view(ctx):
    views = ctx.run.get("host_view")
    return [Finding(H.HOST_COMPUTE, f"{views} host view(s) of tensor memory taken (numpy, "
                    "__array__, DLPack, from_buffer, a host data_ptr): what kernels write there "
                    "Python can compute")] if views else []


@register(H.BACKGROUND_THREAD, threat="T-08", layer=Layer.BEST_EFFORT, scope="run")
def no_thread_outside_calls(ctx):
    started = ctx.run.get("threads_started")
    return [Finding(H.BACKGROUND_THREAD, f"the submission's code started {started} thread(s) "
                    "outside its calls (at import or in __init__): what they run escapes each "
                    "call's traces and CPU clock")] if started else []


@register(H.PATCHED_FUNCTION, threat="T-05", layer=Layer.BEST_EFFORT, scope="run")
def no_torch_mode_left(ctx):
    if ctx.run.get("modes_after_import") or ctx.run.get("modes_at_end"):
        return [Finding(H.PATCHED_FUNCTION, "a torch function/dispatch mode was left active")]
    return []


@register(H.PATCHED_FUNCTION, threat="T-05", layer=Layer.BEST_EFFORT, scope="run")
def no_profile_hook(ctx):
    return [Finding(H.PATCHED_FUNCTION, "a trace/profile hook was installed")] \
        if ctx.run.get("profile_hooks") else []


@register(H.LEAKED_PROCESS, threat="T-03", layer=Layer.BEST_EFFORT, scope="run")
def no_child_process(ctx):
    children = ctx.run.get("children")
    return [Finding(H.LEAKED_PROCESS, f"{children} child process(es) alive after forward")] \
        if children else []


@register(H.TRACE_EVADED, threat="T-11", layer=Layer.BEST_EFFORT, scope="run")
def witness_intact(ctx):
    witness = ctx.run.get("witness") or {}
    return [Finding(H.TRACE_EVADED, f"op witness: {witness['error']}")] \
        if witness.get("error") else []


@register(H.TIMING_BEHAVIOUR, threat="T-13", layer=Layer.BEST_EFFORT, scope="run")
def no_torch_compute_while_timed(ctx):
    """Timed calls run under the same instrumentation as checked ones (``grade.witness``)."""
    if "timed_ops" not in ctx.run:
        return []
    policy = ctx.policy
    allowed = policy.allowed_library_ops(ctx.reference_ops)
    pairs = [p if isinstance(p, (list, tuple)) else (p, p) for p in ctx.run["timed_ops"]]
    judged = sorted({op for op, root in pairs
                     if not (allowed and op != root and op_base(root) in allowed)})
    compute = [op for op in compute_ops(judged, ctx.run.get("timed_candidate_ops"))
               if allowed is not None and op_base(op) not in allowed]
    # what the checked calls computed in PyTorch already is torch_compute there: timing is the
    # evidence only for compute the checked calls did not run
    checked = {op_base(op) for view in ctx.views for op in view.compute}
    compute = [op for op in compute if op_base(op) not in checked]
    return [Finding(H.TIMING_BEHAVIOUR, f"PyTorch computed {compute[:6]} in timed calls, "
                    "which the checked calls did not")] \
        if len(compute) > policy.max_torch_ops else []


@register(H.TORCH_COMPUTE, threat="T-11", layer=Layer.BEST_EFFORT, scope="run")
def no_stray_ops(ctx):
    """Outside the candidate's calls, while the witness records, the harness itself runs only
    copies, views and fills (loading inputs, shipping outputs, the ghost call's poison): any
    other op there, a library's or one the candidate registered, was run by the candidate's
    code from wherever it reached (a hook on a lookup the harness makes before a call's range
    opens or after it closes: a module ``__getattr__``, a dict key's ``__eq__``, an audit hook,
    a dict subclass in a module's globals). One rule for every such route, over every op
    there, nested ones too: an op of the submission's named as a copy (an overload it defined
    under a copy's name) runs its compute inside."""
    stray = ctx.run.get("stray_ops")
    if not isinstance(stray, dict):
        return []
    ran = compute_ops(sorted(str(op) for op in stray), [])
    return [Finding(H.TORCH_COMPUTE, f"ran {ran[:6]} outside the candidate's calls, where the "
                    "harness runs only copies: the submission's code ran them from a hook")] \
        if ran else []


@register(H.TIMING_BEHAVIOUR, threat="T-13", layer=Layer.BEHAVIOURAL, scope="run")
def timed_calls_right_on_swapped_inputs(ctx):
    """A timed call whose inputs a secret swapped for another trial's must be right."""
    found = []
    for check in ctx.run.get("timed_checks") or []:
        trial = ctx.trials[check["trial"]]
        ok, why = compare(trial["outputs"], check.get("outputs"), *ctx.tolerance(trial))
        if not ok and ctx.all_correct:
            found.append(Finding(H.TIMING_BEHAVIOUR, f"timed call {check['call']} on trial "
                                 f"{check['trial']}'s inputs gave a wrong answer: {why}"))
    return found
