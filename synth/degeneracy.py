"""Every rule that rejects a problem degenerate by construction, in one place.

A rule looks at one traced ``Node`` of the forward pass (its op, input shapes and value ranges,
parameters and producer) or at the trace's outputs, and returns a one-line reason when the
computation is degenerate: its output is constant, an identity, saturated, undefined, or random.
The composer and every mutator run the same rules (through ``check_trace``) on what they emit, so
composed problems and mutated seeds are held to one standard. The audit of KernelBench that
motivates them: constant outputs (softmax over a size-1 dim, mean of softmax rows, min-then-clamp),
identities (ReLU fed non-negative values), outputs that barely change (saturated logits) and
nondeterminism (dropout or randomness inside forward).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .trace import Node, Trace, _Recorder

SATURATION_SCALE = 8.0   # sigmoid/tanh inputs with an RMS beyond this are almost all saturated
EXP_SCALE = 4.0
# beyond these offsets the op's output is constant to within fp32/fp16 resolution
SATURATION_OFFSET = {"sigmoid": 8.0, "tanh": 5.0, "erf": 4.0, "hardsigmoid": 3.0}          # exp/square inputs beyond this overflow fp16 or swamp everything else

_SCAN_OR_REDUCE_OF_SIZE1 = ("reduction", "attention", "normalization")


@dataclass(frozen=True)
class Violation:
    rule: str
    reason: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.reason}"


NodeRule = Callable[[Node], "str | None"]
RULES: dict[str, NodeRule] = {}


def rule(name: str) -> Callable[[NodeRule], NodeRule]:
    def register(fn: NodeRule) -> NodeRule:
        RULES[name] = fn
        return fn
    return register


def _producer_name(node: Node) -> str | None:
    x = node.x
    return x.producer.name if x is not None and x.producer is not None else None


@rule("softmax_size1")
def softmax_over_size1(node: Node) -> str | None:
    """softmax over a size-1 dim is all ones (log_softmax all zeros)."""
    if node.name in ("softmax", "log_softmax") and node.x is not None:
        for d in node.reduced_dims():
            if node.x.shape[d] == 1:
                return f"{node.name} over dim {d} of size 1 is constant"
    return None


@rule("reduce_size1")
def reduction_over_size1(node: Node) -> str | None:
    """A reduction, scan or normalisation over size-1 dims does nothing (or yields zeros)."""
    op = node.op
    if op is None or node.x is None or node.name in ("softmax", "log_softmax"):
        return None
    if op.reduces and op.norm_dims is None and op.group in _SCAN_OR_REDUCE_OF_SIZE1:
        dims = node.reduced_dims()
        if dims and all(node.x.shape[d] == 1 for d in dims):
            return f"{node.name} over size-1 dim(s) {dims}"
    if op.norm_dims == "last" and node.x.shape and node.x.shape[-1] == 1:
        return f"{node.name} over a last dim of size 1 outputs its bias"
    if op.norm_dims == "spatial" and len(node.x.shape) > 2 and all(
            s == 1 for s in node.x.shape[2:]):
        return f"{node.name} over a 1-element spatial extent outputs its bias"
    return None


@rule("softmax_row_sum")
def reduction_of_softmax_row(node: Node) -> str | None:
    """sum (or mean) of softmax over the softmax dim is the constant 1 (or 1/n)."""
    if node.name not in ("sum", "mean", "logsumexp") or node.x is None:
        return None
    producer = node.x.producer
    if producer is None or producer.name not in ("softmax", "log_softmax"):
        return None
    if node.name == "logsumexp" and producer.name != "log_softmax":
        return None
    if node.name != "logsumexp" and producer.name != "softmax":
        return None
    if set(producer.reduced_dims()) & set(node.reduced_dims()):
        return f"{node.name} of {producer.name} over its own dim is constant"
    return None


@rule("identity_clamp")
def clamp_that_changes_nothing(node: Node) -> str | None:
    """ReLU / ReLU6 / hardtanh / clamp whose bounds contain every input value is an identity."""
    op = node.op
    x = node.x
    if op is None or x is None or op.bounds is None or op.out != "clip":
        return None
    lo, hi = _Recorder.bounds(node)
    if lo <= x.lo and x.hi <= hi:
        return f"{node.name} bounds [{lo}, {hi}] contain its input range [{x.lo:.3g}, {x.hi:.3g}]"
    return None


@rule("identity_abs")
def abs_of_nonnegative(node: Node) -> str | None:
    """abs of values that are all non-negative (after relu, sigmoid, softmax ...) is an identity."""
    if node.name == "abs" and node.x is not None and node.x.lo >= 0:
        return f"abs of non-negative values [{node.x.lo:.3g}, {node.x.hi:.3g}] is an identity"
    return None


@rule("rectifier_nonneg")
def rectifier_fed_nonnegative(node: Node) -> str | None:
    """ReLU-family ops (LeakyReLU, ELU, SELU, PReLU ...) fed only non-negative values are linear."""
    op = node.op
    x = node.x
    if op is None or x is None or op.requires != "signed" or op.out == "clip":
        return None
    if x.lo >= 0:
        source = _producer_name(node) or "its input"
        return f"{node.name} is fed only non-negative values (from {source})"
    return None


@rule("constant_clamp")
def clamp_to_constant(node: Node) -> str | None:
    """A clamp whose input lies entirely beyond one bound (min-then-clamp) outputs a constant."""
    op = node.op
    x = node.x
    if op is None or x is None or op.bounds is None:
        return None
    lo, hi = _Recorder.bounds(node)
    if x.hi <= lo or x.lo >= hi:
        return f"{node.name} to [{lo}, {hi}] of values in [{x.lo:.3g}, {x.hi:.3g}] is constant"
    return None


@rule("shrink_to_zero")
def shrink_of_small_values(node: Node) -> str | None:
    """softshrink/hardshrink whose threshold exceeds every (or nearly every) input value is 0."""
    x = node.x
    if node.name not in ("softshrink", "hardshrink") or x is None:
        return None
    lambd = node.params.get("lambd", 0.5)
    if not isinstance(lambd, (int, float)):
        return None
    if -lambd <= x.lo and x.hi <= lambd:
        return f"{node.name}(lambd={lambd}) of values in [{x.lo:.3g}, {x.hi:.3g}] is all zeros"
    if x.known and x.scale < lambd / 8:
        return f"{node.name}(lambd={lambd}) of values of magnitude ~{x.scale:.3g} is almost all zeros"
    return None


@rule("idempotent_twice")
def idempotent_applied_twice(node: Node) -> str | None:
    """relu(relu(x)), abs(abs(x)), round(round(x)) ...: the second application is redundant."""
    op = node.op
    x = node.x
    if op is None or not op.idempotent or x is None or x.producer is None:
        return None
    prev = x.producer
    def same(params: dict) -> dict:
        return {k: v for k, v in params.items() if k != "inplace"}
    if prev.name == node.name and same(prev.params) == same(node.params):
        return f"{node.name} applied twice in a row"
    return None


@rule("saturation")
def saturated_squash(node: Node) -> str | None:
    """sigmoid/tanh/erf fed values with a huge spread output (nearly) constant +-1 / 0 / 1."""
    op = node.op
    x = node.x
    if op is None or x is None or op.requires != "unsaturated" or not x.known:
        return None
    if x.scale > SATURATION_SCALE:
        return f"{node.name} saturates: input magnitude ~{x.scale:.3g}"
    limit = SATURATION_OFFSET.get(node.name)
    if limit is not None and (x.lo >= limit or x.hi <= -limit):
        return f"{node.name} saturates: all inputs in [{x.lo:.3g}, {x.hi:.3g}]"
    return None


@rule("domain")
def outside_domain(node: Node) -> str | None:
    """log/sqrt/rsqrt/reciprocal fed values that may be negative or zero give NaN or inf."""
    op = node.op
    x = node.x
    if op is None or x is None or not x.known:
        return None
    if op.requires == "positive" and not x.lo > 0:
        return f"{node.name} needs positive input, gets values from {x.lo:.3g}"
    if op.requires == "nonneg" and not x.lo >= 0:
        return f"{node.name} needs non-negative input, gets values from {x.lo:.3g}"
    return None


@rule("overflow")
def overflowing_growth(node: Node) -> str | None:
    """exp or square of widely spread values overflows (fp16) or is dominated by outliers."""
    op = node.op
    x = node.x
    if op is None or x is None or op.requires != "small_scale" or not x.known:
        return None
    if x.scale > EXP_SCALE:
        return f"{node.name} of values with magnitude ~{x.scale:.3g} overflows"
    return None


@rule("random_in_forward")
def randomness_in_forward(node: Node) -> str | None:
    """Random numbers or training-mode dropout inside forward make the output nondeterministic."""
    if node.phase != "forward":
        return None
    if node.name in ("randn", "rand", "randn_like", "rand_like", "randint", "randint_like",
                     "normal", "bernoulli", "multinomial", "randperm", "rrelu"):
        return f"{node.name} inside forward is nondeterministic"
    if "dropout" in node.name and node.params.get("p", 0.5) and node.params.get("training", True):
        return f"{node.name} in training mode inside forward is nondeterministic"
    return None


# Writes where two values aimed at one place leave the winner to the device and its threads
# (accumulating variants, scatter with a reduction and index_add are order-free up to rounding).
_UNORDERED_WRITES = frozenset({"scatter", "scatter_", "index_copy", "index_copy_", "index_put",
                               "index_put_", "put", "put_"})
_RANDOM_INDICES = frozenset({"randint", "randint_like"})


@rule("undefined_write_order")
def undefined_write_order(node: Node) -> str | None:
    """scatter / index_copy / index_put / put with indices that repeat: random integers (which
    collide), or more indices than distinct values their range holds."""
    if node.name not in _UNORDERED_WRITES or node.params.get("reduce") or \
            node.params.get("accumulate"):
        return None
    for index in node.inputs[1:]:
        if not index.integer or index.numel < 2:
            continue
        producer = index.producer.name if index.producer is not None else None
        if producer in _RANDOM_INDICES:
            return f"{node.name} with random indices ({producer}): repeated ones write twice"
        slots = index.hi - index.lo + 1
        if slots < index.numel:
            return (f"{node.name} writes {index.numel} indices drawn from {slots:g} values: "
                    "repeated ones write twice")
    return None


def _output_rules(trace: Trace) -> list[Violation]:
    found = []
    for i, out in enumerate(trace.outputs):
        if out.depends and (out.producer is None or out.producer.phase != "forward"):
            found.append(Violation("identity", f"output {i} is an input, unchanged"))
        elif not out.depends:
            found.append(Violation("input_independent", f"output {i} does not depend on any input"))
        elif out.constant:
            found.append(Violation("constant_output", f"output {i} is the constant {out.lo:g}"))
    return found


def check_nodes(nodes: list[Node]) -> list[Violation]:
    found = []
    for node in nodes:
        if node.phase != "forward":
            continue
        for name, fn in RULES.items():
            reason = fn(node)
            if reason:
                found.append(Violation(name, reason))
    return found


def check_trace(trace: Trace) -> list[Violation]:
    """All degeneracy violations of a traced problem (empty when it is fine)."""
    return check_nodes(trace.nodes) + _output_rules(trace)
