"""Whose work a call's kernels were (T-09): the candidate's own, a vendor library's (cuBLAS,
cuDNN, CUTLASS, attention) or PyTorch's, from what ran on the device (CUDA: kernel records) or
inside the candidate's launches (CPU: the profiler's ranges)."""
from __future__ import annotations

import re

from kernelmill.core.taxonomy import GEMM_INNER_OPERAND
from torch.utils.flop_counter import flop_registry

from ..policy import (
    LIBRARY_KERNEL,
    VENDOR_KERNEL,
    VENDOR_OPS,
    Policy,
    compute_ops,
    op_base,
    reference_compute_ops,
)
from ..static import kernel_base, qualified_kernel_name
from ..witness import UNATTRIBUTED
from .context import Attribution

# What only library code is named: a vendor's marks anywhere in the demangled name (template
# arguments included), or a kernel function inside a library's namespace. A candidate's source
# may define a ``__global__`` of any base name (``reduce_kernel``, ``Kernel2``), never these.
VENDOR_MARK = re.compile(r"cublas|cudnn|cutlass|cutensor|nvjet|xmma", re.IGNORECASE)
LIBRARY_NAMESPACE = re.compile(r"^(?:at|c10|cub|thrust|std|cuda|cutlass|cute|flash\w*|"
                               r"pytorch\w*|torch|triton\w*)::")

# Vendor-library FLOPs a call may do beyond the reference's: another order of a GEMM chain, an
# im2col convolution's padding; an identity GEMM that adds two tensors does far more.
VENDOR_FLOP_RATIO = 2.0
VENDOR_FLOP_FLOOR = 1e6
# Vendor ops whose FLOPs the op trace counts: torch's formulas, and its own for every GEMM-class
# op (``core.taxonomy.GEMM_INNER_OPERAND``). Any other vendor op in a call (a convolution
# variant called by its own name, say) would do work the cap above cannot see (T-09).
FLOP_COUNTED = frozenset(str(op).rsplit(".", 1)[-1] for op in flop_registry) | \
    frozenset(GEMM_INNER_OPERAND)


def kernel_owner(kernel: list, own_kernels: frozenset | None) -> str:
    """Whose work one recorded GPU kernel ``[name, us, launcher]`` is: ``candidate`` (a Triton
    launch of its source; a kernel of its extension compiled from a ``__global__`` function its
    source defines), ``vendor`` (cuBLAS, cuDNN, CUTLASS, attention kernels) or ``library``
    (ATen, Inductor, anything else prebuilt, and kernels launched outside any op, Triton launch
    or extension call). Without ``own_kernels`` (None: no source seen), an extension's kernel
    is the candidate's unless its name is a library's; with it (even empty), only a kernel
    compiled from a ``__global__`` function the source defines is, and never one named as only
    a library's kernels are (``VENDOR_MARK``, ``LIBRARY_NAMESPACE``)."""
    name, _us, launcher = kernel
    if launcher == "triton":
        return "candidate"
    vendor = bool(VENDOR_KERNEL.search(name))
    if launcher == "extension":
        if VENDOR_MARK.search(name):
            return "vendor"
        if LIBRARY_NAMESPACE.match(qualified_kernel_name(name)):
            return "vendor" if vendor else "library"
        if own_kernels is not None:
            return "candidate" if kernel_base(name) in own_kernels else \
                ("vendor" if vendor else "library")
        if not vendor and not LIBRARY_KERNEL.search(name):
            return "candidate"
    return "vendor" if vendor and launcher != UNATTRIBUTED else "library"


def transfers(kernels: list) -> list:
    return [k for k in kernels if k[0].startswith(("Memcpy", "Memset"))]


def attribute(call, reference_ops: list, mine: list | None,
              own_kernels: frozenset | None) -> Attribution:
    """The owners of a call's kernels and the candidate's share of its time. Kernels of
    data-movement ops (fills, copies, allocations: Triton's autotuner clears the L2 with a fill
    between its runs) are nobody's compute, unless moving data is the whole problem
    (``reference_compute_ops``). On CPU: time inside the candidate's launches against PyTorch's
    computing ops."""
    kernels = call.get("kernels") or []
    moved = transfers(kernels)
    device = [k for k in kernels if k not in moved]
    owners = {id(k): kernel_owner(k, own_kernels) for k in device}
    result = Attribution(owners, device)
    if device:
        moving = {k[2] for k in device if k[2] not in ("triton", "extension", UNATTRIBUTED)
                  and not compute_ops([k[2]], mine)
                  and not reference_compute_ops([k[2]], reference_ops)}
        counted = [k for k in device if k[2] not in moving]
        own = sum(k[1] for k in counted if owners[id(k)] == "candidate")
        total = sum(k[1] for k in counted)
        result.library_us = [(k[0], k[1], owners[id(k)]) for k in counted
                             if owners[id(k)] != "candidate"]
    else:
        own = float(call.get("launch_us") or 0.0)
        total = own + sum(us for op, us in call.get("top_op_us") or []
                          if compute_ops([op], mine))
    if total > 0:
        result.share_us = (own, total, "GPU" if device else "compute")
    return result


def kernel_checks(name: str, call, policy: Policy, reference: dict, mine, hack,
                  own_kernels: frozenset | None = None) -> Attribution:
    """The checks on one call's kernels (``host_copies``, ``extension_kernels``) through a
    ``hack(code, detail)`` callback; returns the call's attribution."""
    reads = sum(1 for k in transfers(call.get("kernels") or []) if "DtoH" in k[0])
    if reads > policy.max_scalar_reads:
        hack("host_compute", f"{name}: {reads} device-to-host copies in forward")
    found = attribute(call, reference.get("ops", []), mine, own_kernels)
    extension_kernels(name, found, policy, reference.get("ops", []), hack)
    return found


def extension_kernels(name: str, found: Attribution, policy: Policy, reference_ops: list,
                      hack) -> None:
    """Vendor or library kernels an extension launched, and kernels launched outside any op,
    Triton launch or extension call (a replayed CUDA graph, a compiled graph's runtime, driver
    calls through an FFI: never the candidate's; a preset that counts shares counts them
    against it)."""
    ext = [k for k in found.device if k[2] == "extension"]
    vendor = [k[0] for k in ext if found.owners[id(k)] == "vendor"
              and not policy.allows_vendor_kernel(k[0], reference_ops)]
    library = [k[0] for k in ext if found.owners[id(k)] == "library"]
    if vendor:
        hack("torch_compute", f"{name}: vendor-library kernels launched by the extension "
             f"({policy.preset} policy): {sorted(set(vendor))[:3]}")
    if library and policy.switch("flag_extension_library_kernels"):
        hack("torch_compute", f"{name}: library kernels launched by the extension (not "
             f"compiled from its own __global__ functions): {sorted(set(library))[:3]}")
    foreign = sorted({k[0] for k in found.device if k[2] == UNATTRIBUTED})
    if foreign and policy.switch("flag_unattributed_kernels"):
        hack("torch_compute", f"{name}: GPU kernels launched outside any op, Triton launch or "
             f"extension call: {foreign[:3]}")


def device_work(found: list) -> dict | None:
    """What the verdict records of the work in the checked calls (their ``Attribution``s): the
    candidate's share of the GPU time (of the computing ops' time on CPU), and the library
    kernels that ran, by time."""
    parts = [a.share_us for a in found if a is not None and a.share_us]
    if not parts:
        return None
    own, total = sum(p[0] for p in parts), sum(p[1] for p in parts)
    library: dict[str, list] = {}
    for attribution in found:
        for kernel, us, owner in (attribution.library_us if attribution else []):
            entry = library.setdefault(kernel[:120], [0.0, owner])
            entry[0] += us
    top = sorted(library.items(), key=lambda item: -item[1][0])[:10]
    return {"clock": parts[0][2], "calls": len(parts), "candidate_us": round(own, 3),
            "total_us": round(total, 3),
            "candidate_share": round(own / total, 4) if total else None,
            "library_kernels": [{"name": k, "us": round(v[0], 3), "kind": v[1]} for k, v in top]}


def redoes_reference(ops: list[str], mine: list[str] | None,
                     reference_ops: list[str]) -> list[str]:
    """The reference's computing ops (by base name) when the candidate's call ran every one of
    them through PyTorch, else []. Then its own kernels, whatever their share of the time, are
    a token beside the library doing the whole problem (a copy after ``torch.relu(conv(x))``)."""
    base = lambda op: op_base(op).rstrip("_")
    wanted = {base(op) for op in compute_ops(reference_ops)}
    have = {base(op) for op in compute_ops(ops, mine)}
    return sorted(wanted) if wanted and wanted <= have else []


def share_check(found: list, policy: Policy, hack) -> None:
    """The candidate's kernels carry at least ``min_candidate_share`` of the time over all its
    checked calls together (a preset with ``check_candidate_share``). One call's share of a few
    µs of kernels moves by several points from run to run (an H100: a conv + Triton hybrid read
    30% on one call and above on the others); the sum does not wobble so."""
    parts = [a.share_us for a in found if a is not None and a.share_us]
    own, total = sum(p[0] for p in parts), sum(p[1] for p in parts)
    if policy.switch("check_candidate_share") and total > 0 and \
            own / total < policy.min_candidate_share:
        hack("torch_compute", f"the candidate's kernels carry {own / total:.0%} of the "
             f"{parts[0][2]} time over its {len(parts)} checked call(s) ({policy.preset} needs "
             f"{policy.min_candidate_share:.0%})")


def vendor_work(name: str, call, reference: dict, policy: Policy, hack,
                found: Attribution | None = None) -> None:
    """Where vendor ops (GEMMs, convolutions, attention) are allowed because the reference does
    that kind of work (``check_vendor_work``), not as a way to compute the rest: the call's
    FLOPs by torch's formulas may not be far beyond the reference's, and a GEMM whose inner
    dimension is 0 or 1 is elementwise work in a GEMM's name unless the reference has one too
    (a residual add as ``baddbmm`` with an identity matrix, a ReLU as ``_addmm_activation``
    over an empty inner dimension, a token kernel beside them). Vendor kernels an extension
    launches itself (``found``: the call's attribution) ran no op whose FLOPs torch counts, so
    the cap cannot weigh them: they fail closed here (an identity GEMM by ``cublasSgemm`` from
    inside an extension did the residual add of a convolution problem)."""
    if not policy.switch("check_vendor_work"):
        return
    if found is not None:
        # (those of a class the reference does not run are ``extension_kernels``' finding)
        unweighed = sorted({k[0] for k in found.device if k[2] == "extension"
                            and found.owners.get(id(k)) == "vendor"
                            and policy.allows_vendor_kernel(k[0], reference.get("ops") or [])})
        if unweighed:
            hack("torch_compute", f"{name}: vendor-library kernels launched from inside the "
                 f"extension {unweighed[:3]}: no op of theirs has FLOPs torch counts, so the "
                 f"{policy.preset} policy cannot weigh their work against the reference's "
                 "(call vendor work through PyTorch ops)")
    ref_flops, flops = reference.get("flops"), call.get("flops")
    if isinstance(ref_flops, (int, float)) and isinstance(flops, (int, float)) and \
            flops > VENDOR_FLOP_RATIO * ref_flops + VENDOR_FLOP_FLOOR:
        hack("torch_compute", f"{name}: vendor-library ops did {flops / 1e6:.4g} MFLOP where the "
             f"reference's did {ref_flops / 1e6:.4g}: library work beyond the problem's")
    # the dispatch trace's ops (composite ops decomposed, as the FLOPs were counted)
    traced = call.get("traced_ops") if "traced_ops" in call else call.get("ops")
    ran = {op_base(op) for op in traced or [] if isinstance(op, str)}
    uncounted = sorted(op for op in ran if op in VENDOR_OPS and op not in FLOP_COUNTED and
                       op not in {op_base(r) for r in reference.get("ops") or []})
    if uncounted:
        hack("torch_compute", f"{name}: vendor op(s) {uncounted[:3]} whose FLOPs are not "
             "counted and which the reference does not run: library work the FLOP cap cannot "
             "weigh")
    thin = call.get("thin_gemms") or []
    if thin and reference.get("thin_gemms") == 0:
        hack("torch_compute", f"{name}: {sorted(set(thin))[:3]} over an inner dimension of 0 or "
             "1: elementwise work in a GEMM's name")
