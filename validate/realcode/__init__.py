"""Worker-side measurements for the patterns real model code carries.

Each function takes a built model, its inputs and its reference output and returns plain numbers
and labels; ``checks.judge`` turns them into verdicts. Imports only torch, the standard library
and ``checks`` (torch inside functions).

* ``submodule_bypass``: every sub-module that computes something is bypassed in turn (its output
  replaced by zeros, or by its input where the shapes allow), on the declared parameters and on a
  state whose exactly-constant parameters are drawn again: a bypass that leaves the output within
  tolerance is a dead branch (a low-rank adapter whose second factor starts at zero, residual
  blocks under a layer-scale of 1e-6, an RMSNorm of weight 1 after a LayerNorm).
* ``constant_parameters``: each floating-point parameter or buffer that is exactly constant after
  construction (zeros, ones, a tiny layer-scale) is drawn again alone: the output must move.
* ``liveness``: which elements of each computed intermediate reach the output (a backward pass
  from a random cotangent, with piecewise-linear selections such as ReLU and max pooling passing
  their gradient densely, so only structural deadness counts): a decoder layer that returns its
  last position, or attention whose band admits one key, leaves most of its work unreachable.
  Float work counts only where torch has a FLOP formula for it (matmul, convolution,
  attention), and the live elements are united over several input draws, so data-dependent
  sparsity (a router's choice of experts) does not read as dead.
* ``exact_outputs``: integer and boolean outputs (argmax, top-k indices, comparisons) must not
  change when the float work (matmul-class ops, reductions) carries noise at the tolerance's
  scale (selections whose order among ties is unspecified also see their input moved, which
  splits exact ties), nor with the thread count.
* ``duplicate_writes``: scatter / index_put / index_copy / put writing two values to one place
  (the winner is up to the device and its threads).
* ``contrast``: the slack the tolerance's relative term gives on the output's magnitude, next to
  the output's variation across inputs (an output of 273.15 +- 0.2 graded with rtol 1e-4 leaves
  14% slack on its informative part), read on the whole output and on its part that is not an
  affine function of its same-shaped inputs (``nonaffine``: an identity passthrough carries the
  variation and the magnitude of ``x + 0.01 * mlp(x)`` but costs nothing).
* ``reduced_precision``: the output with matmul-class operands rounded to a lower precision,
  what a bf16-GEMM answer to an fp32 problem returns.
* ``advanced_counters``: the counters a call moves (integers and floats, on modules or plain
  objects they hold), advanced as if a grader's thousands
  of calls had run, and the output for the same input compared (a periodic redraw, an anneal).
"""
from __future__ import annotations

from .bypass import MOST_BYPASSES, submodule_bypass
from .common import forward, within
from .constants import MOST_CONSTANTS, constant_parameters, constant_tensors, redraw
from .counters import advanced_counters
from .exact import exact_outputs
from .liveness import liveness
from .noise import REDUCTIONS, UNORDERED_SELECTIONS
from .precision import contrast, reduced_precision, rounded_errors
from .writes import duplicate_writes

__all__ = ["MOST_BYPASSES", "MOST_CONSTANTS", "REDUCTIONS", "UNORDERED_SELECTIONS",
           "advanced_counters", "constant_parameters", "constant_tensors", "contrast", "duplicate_writes",
           "exact_outputs", "forward", "liveness", "redraw",
           "reduced_precision", "rounded_errors", "submodule_bypass", "within"]
