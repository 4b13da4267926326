"""The one op taxonomy: which PyTorch (aten) ops compute and which only move memory.

The validator asks "does this problem compute anything, and is it only affine?"; the grader asks
"which of the candidate's ops are PyTorch doing the work?". Both answer from the sets below, built
from a few disjoint groups, so a view op cannot be free for one and compute for the other.

Standard library only: worker-side modules import it.
"""
from __future__ import annotations


def _ops(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Views and reshapes: no data is read or written.
VIEW_OPS = _ops("""
alias as_strided t transpose permute unsqueeze squeeze select slice narrow split split_with_sizes
chunk unbind unflatten flatten view _unsafe_view view_as reshape _reshape_alias expand expand_as
diagonal movedim view_as_real view_as_complex detach lift lift_fresh set_ as_strided_ conj
resolve_conj resolve_neg
""")
# Allocation without meaningful contents.
ALLOCATION_OPS = _ops("""
empty empty_like empty_strided new_empty new_empty_strided resize_ record_stream
""")
# Metadata queries and host scalars.
METADATA_OPS = _ops("""
size stride dim numel sym_size sym_stride sym_numel sym_storage_offset is_contiguous
is_same_size result_type _has_compatible_shallow_copy_type _local_scalar_dense item is_nonzero
is_floating_point is_complex
""")
# Constant fills: the contents do not depend on any input.
FILL_OPS = _ops("""
zeros zeros_like new_zeros ones ones_like new_ones full full_like new_full fill_ zero_
scalar_tensor arange
""")
# Copies: the same values somewhere else (another layout, dtype or device).
COPY_OPS = _ops("""
copy_ _copy copy clone contiguous to _to_copy _copy_from _copy_from_and_resize lift_fresh_copy
type_as
""")

# Rearrangements: compute ops in name only, each output element one input element (or a
# constant pad), no arithmetic. A reference made of these and copies only moves data.
REARRANGE_OPS = _ops("""
cat concat concatenate stack hstack vstack dstack pad constant_pad_nd reflection_pad1d
reflection_pad2d reflection_pad3d replication_pad1d replication_pad2d replication_pad3d repeat
tile roll flip fliplr flipud index_select gather take narrow_copy
""")

# Everything that moves, views, allocates or fills memory without computing from inputs.
DATA_MOVEMENT_OPS = VIEW_OPS | ALLOCATION_OPS | METADATA_OPS | FILL_OPS | COPY_OPS
# Free even when the reference itself uses them (copies and fills are not: a reference that is
# a copy makes the copy the work).
PURE_MEMORY_OPS = VIEW_OPS | ALLOCATION_OPS | METADATA_OPS

# Compute ops that are affine in each tensor argument (the others held fixed).
AFFINE_OPS = _ops("""
add add_ sub sub_ rsub mul mul_ div div_ neg neg_ cat stack sum mean cumsum pad constant_pad_nd
repeat roll flip index_select gather
""")
# Elementwise ops: what a fused kernel absorbs for free after a producer.
ELEMENTWISE_OPS = _ops("""
abs add addcmul addcdiv clamp clamp_min clamp_max cos div elu eq erf exp exp2 expm1 gelu ge gt
hardsigmoid hardswish hardtanh le leaky_relu lerp log log1p log2 logical_and logical_not lt
maximum minimum mish mul ne neg pow reciprocal relu relu6 rsqrt rsub selu sigmoid sign silu sin
softplus sqrt square sub tanh threshold where celu glu logit masked_fill sgn floor ceil round
trunc fmod remainder bitwise_and bitwise_or _softmax
""")


# GEMM-class ops, each with the index of the operand whose last dimension is the inner one: the
# grader counts their FLOPs (2 x that operand's elements x the other's last dimension) where
# torch's formulas do not (``addbmm``, ``addmv``, ``mv``, ``dot``...), and finds GEMMs over an
# inner dimension of 0 or 1 (elementwise work in a GEMM's name).
GEMM_INNER_OPERAND = {
    "mm": 0, "bmm": 0, "matmul": 0, "mv": 0, "dot": 0, "vdot": 0, "_scaled_mm": 0, "linear": 0,
    "addmm": 1, "addbmm": 1, "baddbmm": 1, "addmv": 1, "_addmm_activation": 1}


def op_namespace(name: str) -> str:
    """``aten.add.Tensor`` -> ``aten``; ``mylib::op`` -> ``mylib``."""
    return name.replace("::", ".", 1).split(".", 1)[0]


def op_base(name: str) -> str:
    """``aten.relu_.default`` / ``aten.relu`` -> ``relu_`` (namespace and overload stripped); a
    bare name is its own base."""
    parts = name.replace("::", ".", 1).split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def moves_data_only(name: str) -> bool:
    """True for an op of DATA_MOVEMENT_OPS (in-place spelling included: ``fill_``/``fill``)."""
    base = op_base(name)
    return base in DATA_MOVEMENT_OPS or base.rstrip("_") in DATA_MOVEMENT_OPS
