"""Checks on the source (the static scan) and on what the parent saw of the process and the
result channel, whether or not the run produced facts."""
from __future__ import annotations

from kernelmill.validate.harness_worker import ChannelTamperError, ResultGuardError

from ..static import KERNELGUARD_PREFIX, VENDOR_PREFIX
from .registry import Finding, HackCode, Layer, register


def _scan(ctx):
    """The scan's lines by kind: own findings, kernelguard's, disallowed vendor calls."""
    findings = ctx.findings
    guard = [f for f in findings if f.startswith(KERNELGUARD_PREFIX)]
    vendor = [f for f in findings if VENDOR_PREFIX in f]
    own = [f for f in findings if f not in guard and f not in vendor]
    # a vendor call is judged by its class (a cuDNN call in a GEMM problem is not allowed)
    vendor = [f for f in vendor if not ctx.policy.allows_vendor_kernel(
        f.split(VENDOR_PREFIX, 1)[1].split()[-1], ctx.reference.get("ops", []))]
    return own, guard, vendor


@register(HackCode.FORBIDDEN_API, threat="T-01", layer=Layer.STATIC, scope="source",
          switch="static_scan")
def forbidden_api_in_source(ctx):
    own = _scan(ctx)[0]
    return [Finding(HackCode.FORBIDDEN_API, "; ".join(own[:5]))] if own else []


@register(HackCode.KERNELGUARD, threat="T-01", layer=Layer.STATIC, scope="source",
          switch="static_scan")
def kernelguard_in_source(ctx):
    guard = _scan(ctx)[1]
    return [Finding(HackCode.KERNELGUARD, "; ".join(guard[:3]))] if guard else []


@register(HackCode.TORCH_COMPUTE, threat="T-09", layer=Layer.STATIC, scope="source",
          switch="static_scan")
def vendor_calls_in_native_source(ctx):
    vendor = _scan(ctx)[2]
    if not vendor:
        return []
    calls = "; ".join(f.split(VENDOR_PREFIX, 1)[1].strip() for f in vendor[:3])
    return [Finding(HackCode.TORCH_COMPUTE, f"vendor-library calls in native source "
                    f"({ctx.policy.preset} policy): {calls}")]


@register(HackCode.CHANNEL_TAMPER, threat="T-02", layer=Layer.PROCESS, scope="source")
def channel_authenticated(ctx):
    return [Finding(HackCode.CHANNEL_TAMPER, "frames on the result channel failed "
                    "authentication")] if ctx.facts.tampered else []


@register(HackCode.LEAKED_PROCESS, threat="T-03", layer=Layer.PROCESS, scope="source")
def process_group_contained(ctx):
    leaked = ctx.facts.leaked_processes
    return [Finding(HackCode.LEAKED_PROCESS, f"{leaked} process(es) escaped the group")] \
        if leaked else []


def _error_message(ctx) -> str:
    return str((ctx.error or {}).get("message") or "")  # the error as explained to the user


@register(HackCode.PATCHED_FUNCTION, threat="T-05", layer=Layer.BEST_EFFORT, scope="failed")
def result_guard_tripped(ctx):
    message = _error_message(ctx)
    if message.startswith(f"{ResultGuardError.__name__}: "):
        return [Finding(HackCode.PATCHED_FUNCTION, message.split(": ", 1)[1][:300])]
    return []


@register(HackCode.CHANNEL_TAMPER, threat="T-02", layer=Layer.BEST_EFFORT, scope="failed")
def channel_guard_tripped(ctx):
    message = _error_message(ctx)
    if message.startswith(f"{ChannelTamperError.__name__}: "):
        return [Finding(HackCode.CHANNEL_TAMPER, message.split(": ", 1)[1][:300])]
    return []


@register(HackCode.FILE_TAMPER, threat="T-04", layer=Layer.PROCESS, scope="grader")
def guarded_files_unchanged(changed: list[str]):
    """The grader's own check (``Grader._judge_run``): files it guards, stamped before and
    after a group of runs."""
    return [Finding(HackCode.FILE_TAMPER, f"changed: {', '.join(changed[:3])}")] \
        if changed else []
