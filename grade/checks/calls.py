"""Checks on each checked forward call (``fresh``, ``refill``, ``repeat``, ``audit``), run in
this order on every call. Each takes the judge's context and the call's view."""
from __future__ import annotations

import torch

from ..policy import compute_ops, custom_ops, qualified_op
from ..witness import op_qualname
from .attribution import extension_kernels, redoes_reference, transfers, vendor_work
from .registry import Finding, HackCode, Layer, collect, register

H = HackCode


@register(H.TENSOR_SUBCLASS, threat="T-06", layer=Layer.BEHAVIOURAL, scope="call")
def output_is_plain_tensor(ctx, view):
    if not view.call.get("subclass"):
        return []
    other = [t for t in view.call["types"] if t != "torch.Tensor"]
    return [Finding(H.TENSOR_SUBCLASS, f"{view.name} returned "
                    f"{other[0] if other else 'a subclass'}")]


@register(H.OUTPUT_ALIASES_INPUT, threat="T-06", layer=Layer.BEHAVIOURAL, scope="call")
def output_owns_storage(ctx, view):
    return [Finding(H.OUTPUT_ALIASES_INPUT, f"{view.name}: output shares storage with an input")] \
        if view.call.get("alias") else []


@register(H.INPUT_MUTATED, threat="T-06", layer=Layer.BEHAVIOURAL, scope="call")
def inputs_unchanged(ctx, view):
    return [Finding(H.INPUT_MUTATED, f"{view.name}: input {index} changed by forward")
            for index, (before, after) in enumerate(zip(view.trial["inputs"],
                                                        view.call["inputs_after"]))
            if isinstance(before, torch.Tensor) and not ctx.unchanged(before, after)]


@register(H.BACKGROUND_THREAD, threat="T-08", layer=Layer.BEST_EFFORT, scope="call")
def no_python_threads(ctx, view):
    call = view.call
    if not (call["threads"] or call.get("thread_starts")):
        return []
    return [Finding(H.BACKGROUND_THREAD, f"{view.name}: started {call.get('thread_starts', 0)} "
                    f"thread(s); alive after forward: {call['threads'][:3]}")]


@register(H.BACKGROUND_THREAD, threat="T-08", layer=Layer.BEST_EFFORT, scope="call",
          switch="flag_native_threads")
def no_native_threads(ctx, view):
    native = view.call.get("native_threads")
    return [Finding(H.BACKGROUND_THREAD, f"{view.name}: new OS threads {native[:3]}")] \
        if native else []


@register(H.PATCHED_FUNCTION, threat="T-05", layer=Layer.BEST_EFFORT, scope="call")
def no_torch_mode_in_call(ctx, view):
    return [Finding(H.PATCHED_FUNCTION, f"{view.name}: a torch function/dispatch mode was "
                    "active")] if view.call.get("modes") else []


@register(H.TRACE_EVADED, threat="T-11", layer=Layer.BEST_EFFORT, scope="call")
def trace_matches_profiler(ctx, view):
    """The dispatch trace and the profiler see the same ops (the profiler also their callers):
    one the trace saw and the profiler did not was hidden from the profiler (its collection
    paused while it still reported itself on). On a GPU only a call whose computing ops the
    profiler missed every one of."""
    recorded = {qualified_op(op) for op in view.call.get("ops", [])}
    traced = compute_ops(view.call.get("traced_ops") or [], view.mine)
    unrecorded = sorted({op for op in traced if qualified_op(op) not in recorded})
    if unrecorded and ("cuda" not in ctx.ref_device or len(unrecorded) == len(set(traced))):
        return [Finding(H.TRACE_EVADED, f"{view.name}: the op trace saw {unrecorded[:4]}, the "
                        "profiler did not")]
    return []


@register(H.HOST_COMPUTE, threat="T-10", layer=Layer.DEVICE, scope="call")
def device_to_host_copies(ctx, view):
    reads = sum(1 for k in transfers(view.call.get("kernels") or []) if "DtoH" in k[0])
    return [Finding(H.HOST_COMPUTE, f"{view.name}: {reads} device-to-host copies in forward")] \
        if reads > ctx.policy.max_scalar_reads else []


@register(H.TORCH_COMPUTE, threat="T-09", layer=Layer.DEVICE, scope="call")
def extension_kernels_are_own(ctx, view):
    return collect(H.TORCH_COMPUTE, lambda hack: extension_kernels(
        view.name, view.attribution, ctx.policy, ctx.reference_ops, hack))


@register(H.TORCH_COMPUTE, threat="T-09", layer=Layer.BEST_EFFORT, scope="call",
          switch="flag_redone_reference")
def reference_not_redone(ctx, view):
    redone = redoes_reference(view.call.get("ops", []), view.mine, ctx.reference_ops)
    return [Finding(H.TORCH_COMPUTE, f"{view.name}: PyTorch ran every computing op of the "
                    f"reference ({', '.join(redone[:4])}): the candidate's kernels did none of "
                    "its work")] if redone else []


@register(H.TORCH_COMPUTE, threat="T-09", layer=Layer.BEST_EFFORT, scope="call")
def torch_ops_within_allowance(ctx, view):
    if len(view.compute) > ctx.policy.max_torch_ops:
        return [Finding(H.TORCH_COMPUTE, f"{view.name}: PyTorch computed "
                        f"{sorted(set(view.compute))[:6]}")]
    return []


@register(H.TORCH_COMPUTE, threat="T-09", layer=Layer.BEST_EFFORT, scope="call",
          switch="check_vendor_work")
def vendor_work_within_reference(ctx, view):
    return collect(H.TORCH_COMPUTE, lambda hack: vendor_work(
        view.name, view.call, ctx.reference, ctx.policy, hack, view.attribution))


@register(H.TORCH_COMPUTE, threat="T-09", layer=Layer.BEST_EFFORT, scope="call")
def output_not_written_by_copies(ctx, view):
    return [Finding(H.TORCH_COMPUTE, f"{view.name}: the output was written by PyTorch copies, "
                    "not by a custom kernel")] if view.call.get("output_by_copy") else []


@register(H.TORCH_COMPUTE, threat="T-10", layer=Layer.BEST_EFFORT, scope="call")
def scalar_reads_within_allowance(ctx, view):
    reads = sum(1 for op in view.call.get("ops", []) if "_local_scalar_dense" in op)
    return [Finding(H.TORCH_COMPUTE, f"{view.name}: {reads} scalar reads (.item()): host-side "
                    "compute")] if reads > ctx.policy.max_scalar_reads else []


@register(H.HOST_COMPUTE, threat="T-10", layer=Layer.BEST_EFFORT, scope="call")
def inputs_not_read_on_host(ctx, view):
    reads = view.call.get("input_reads")
    return [Finding(H.HOST_COMPUTE, f"{view.name}: {reads} element(s) of its floating-point "
                    "inputs read on the host (.item(), float(), a truth value): a key to the "
                    "inputs' values")] if reads else []


@register(H.HOST_COMPUTE, threat="T-10", layer=Layer.BEST_EFFORT, scope="call")
def elements_not_handed_to_python(ctx, view):
    access = view.call.get("host_access", 0)
    return [Finding(H.HOST_COMPUTE, f"{view.name}: {access} tensor elements handed to Python "
                    "(map_/apply_/tolist/storage bytes): computed on the host")] \
        if access > ctx.policy.max_scalar_reads else []


@register(H.TRACE_EVADED, threat="T-11", layer=Layer.BEST_EFFORT, scope="call")
def dispatch_state_kept(ctx, view):
    return [Finding(H.TRACE_EVADED, f"{view.name}: the dispatch-key state changed inside "
                    "forward (a guard that hides ops from the trace)")] \
        if view.call.get("dispatch_state") else []


@register(H.NO_CUSTOM_KERNEL, threat="T-09", layer=Layer.BEST_EFFORT, scope="call",
          switch="require_custom_kernel")
def custom_kernel_launched(ctx, view):
    """An op of the candidate's whose kernels are all Python is a wrapper, not a kernel."""
    call = view.call
    python = set(ctx.run.get("python_ops") or ())
    native = None if view.mine is None else [op for op in view.mine
                                             if op_qualname(op) not in python]
    if call["launches"] or call["ext_calls"] or custom_ops(call.get("ops", []), native):
        return []
    return [Finding(H.NO_CUSTOM_KERNEL, f"{view.name}: no Triton launch or extension call in "
                    "forward")]
