"""Honest noise: what another summation order, or a kernel within the tolerance, makes of a
forward's float work (``_HonestNoise``: Gaussian noise at a share of each accumulating op's
RMS, ``_computed``), the ops it touches and the selections whose ties it splits."""
from __future__ import annotations

import math

# Ops whose result carries an honest kernel's rounding: matmul-class work (torch's FLOP
# formulas) and reductions, whose error follows the magnitude of what they sum, not of the result.
REDUCTIONS = frozenset({"sum", "mean", "var", "std", "var_mean", "std_mean", "norm",
                        "linalg_vector_norm", "logsumexp", "cumsum", "prod", "_softmax",
                        "_log_softmax", "native_layer_norm", "native_group_norm",
                        "native_batch_norm", "_native_batch_norm_legit",
                        "_native_batch_norm_legit_no_training", "_fused_rms_norm"})
# Selections whose order among exact ties is left to the implementation (argmax and argmin, and
# max/min over a dim, return the first of tied values: defined).
UNORDERED_SELECTIONS = frozenset({"topk", "sort", "kthvalue", "mode", "median", "nanmedian",
                                  "msort"})


# Ops that sum products or accumulate besides torch's FLOP formulas and ``REDUCTIONS``:
# matrix-vector and dot products, running products, averaging pools and interpolations,
# accumulating scatters, distances, losses. Ops that move, select, place constants (a
# triangular mask, padding, a fill) or cast compute nothing an honest kernel could round
# otherwise.
ACCUMULATING = frozenset({
    "mv", "dot", "vdot", "addmv", "addr", "cumprod", "logcumsumexp", "avg_pool1d",
    "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
    "adaptive_avg_pool3d", "_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "upsample_linear1d",
    "upsample_bilinear2d", "upsample_bicubic2d", "upsample_trilinear3d",
    "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa", "grid_sampler_2d", "grid_sampler_3d",
    "scatter_add", "scatter_add_", "index_add", "index_add_", "scatter_reduce",
    "_embedding_bag", "embedding_bag", "_cdist_forward", "_pdist_forward", "trace",
    "nll_loss_forward", "nll_loss2d_forward", "mse_loss", "l1_loss", "smooth_l1_loss",
    "huber_loss", "binary_cross_entropy", "kl_div", "_weight_norm_interface",
    # transforms: sums of products over a signal (an STFT, a spectral filter)
    "_fft_r2c", "_fft_c2c", "_fft_c2r"})


def _computed(func) -> bool:
    """Does ``func`` compute its values by accumulating (an honest kernel's summation order
    changes its rounding)? Torch's FLOP formulas, ``REDUCTIONS`` and ``ACCUMULATING``; an
    elementwise op rounds once, correctly (an ulp, far below the noise)."""
    from torch.utils.flop_counter import flop_registry

    name = func.overloadpacket.__name__
    return func.overloadpacket in flop_registry or name in REDUCTIONS or name in ACCUMULATING


class _HonestNoise:
    """A TorchDispatchMode that adds to the result of every accumulating op (``_computed``)
    ``rel`` times its RMS in Gaussian noise (what another summation order or a kernel within
    the tolerance makes of it), and moves the input of selections with unordered ties
    (``UNORDERED_SELECTIONS``) the same way, so exact ties split. Values that no such op
    touched (the inputs, the parameters, masks and what is only moved from them) stay exact: a
    selection over them is defined. Non-finite elements stay as they are; the noise is drawn on
    the tensor's device."""

    def __new__(cls, rel: float, seed: int):
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        generators: dict = {}

        def moved(x):
            if not (isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex())
                    and x.numel() > 1):
                return x
            gen = generators.get(x.device)
            if gen is None:
                gen = generators[x.device] = torch.Generator(device=x.device).manual_seed(seed)
            finite = torch.isfinite(x)
            count = int(finite.sum())
            if not count:
                return x
            kept = torch.where(finite, x, torch.zeros((), dtype=x.dtype, device=x.device))
            if kept.is_complex():  # the RMS of the magnitudes
                kept = torch.view_as_real(kept)
            rms = float(torch.linalg.vector_norm(kept, dtype=torch.float64)) / math.sqrt(count)
            del kept
            noise = torch.randn(x.shape, generator=gen, dtype=x.dtype, device=x.device)
            return torch.where(finite, x + noise.mul_(rel * rms), x)

        class Noise(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                name = func.overloadpacket.__name__
                if name in UNORDERED_SELECTIONS and args:
                    args = (moved(args[0]), *args[1:])
                out = func(*args, **kwargs)
                if _computed(func):
                    if isinstance(out, torch.Tensor):
                        return moved(out)
                    if isinstance(out, tuple) and out:
                        return (moved(out[0]), *out[1:])
                return out

        return Noise()
