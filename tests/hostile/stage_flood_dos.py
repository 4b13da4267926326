"""family: red-team round 4, memory DoS of the grader's parent through the worker's own channel.
With builtins as ``divmod.__self__`` (hole 2) the submission calls the harness worker's
mark_stage with a 256 MiB stage name, eight times, at import. Each is a valid (HMAC-signed)
stage frame; the parent's _Reader accepts frames up to MAX_FRAME (4 GiB) of any kind, copies
the body (bytes(body)), json-decodes it and keeps every stage name in ``stages``: the parent
holds ~2 GiB for the whole grade (more with larger or more frames; the worker's own memory
need not grow, the same string is sent again). The forward is an honest Triton kernel: the
grade itself is certified."""
# problem: ref_scale_add
# expect: not_certified
import torch
import torch.nn as nn
import triton
import triton.language as tl

_b = divmod.__self__
_get, _load = _b.getattr, _b.__import__
_hw = _load("kernel" + "mill.validate.harness_worker", None, None, ["main"])
_mark = _get(_hw, "mark" + "_stage")
_name = "x" * (256 << 20)
for _ in range(8):
    _mark(_name)
_mark("import")
del _name


@triton.jit
def _scale_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, 2.0 * x + y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        _scale_add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
