"""Building a mined candidate on the meta device (worker side: torch and the standard library
only): ``meta_build``, with the value writes of weight initialization skipped. Used by the
probe (``mine_worker``: counting a candidate's elements before it is built) and by sizing
(``mine_sizing``). Moved out of ``mine_worker``.
"""
from __future__ import annotations

import torch

# in-place ops that only write values (weight initialization: ``nn.init``, timm's
# ``trunc_normal_``); on the meta device there are no values to write
_VALUE_WRITES = frozenset((
    "uniform_", "normal_", "erfinv_", "mul_", "add_", "sub_", "div_", "clamp_", "clamp_min_",
    "clamp_max_", "fill_", "zero_", "copy_", "exp_", "log_", "sqrt_", "neg_", "abs_",
    "bernoulli_", "random_", "exponential_", "log_normal_", "cauchy_", "geometric_", "pow_",
    "tanh_", "sigmoid_", "erf_", "floor_", "ceil_", "round_", "fmod_", "remainder_", "lerp_",
    "addcmul_", "addcdiv_", "trunc_normal_", "orthogonal_", "kaiming_uniform_",
    "kaiming_normal_", "xavier_uniform_", "xavier_normal_", "constant_", "ones_", "zeros_",
    "eye_", "dirac_", "sparse_"))


class _MetaBuild(torch.overrides.TorchFunctionMode):
    """Skips the value writes of a module built on the meta device: initializing a model's
    weights there ran every op's Python reference for nothing (timm's ``trunc_normal_``
    over a ViT's parameters: a fifth of the probing workers' time on timm). Only ops that
    keep their tensor's shape are skipped, so what is built is the same."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in _VALUE_WRITES and args and isinstance(
                args[0], torch.Tensor) and args[0].is_meta:
            return args[0]
        return func(*args, **(kwargs or {}))


def meta_build():
    """The context to build a candidate on the meta device in: ``torch.device("meta")``,
    with value writes skipped (``_MetaBuild``)."""
    import contextlib

    stack = contextlib.ExitStack()
    stack.enter_context(torch.device("meta"))
    stack.enter_context(_MetaBuild())
    return stack
