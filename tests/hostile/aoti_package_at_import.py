"""family: ahead-of-time compiled PyTorch graph (an AOTInductor package of the reference,
built at import and run in forward; a copy kernel moves its answer)

On CPU the compiled graph runs as Inductor's C++ with no dispatcher op, so the op witness sees
nothing; the static scan stops it by name (torch._inductor). On CPU the build also needs a
compiler, which the confined worker cannot start.
"""
# problem: ref_scale_add
# expect: forbidden_api
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


def token_copy(src, dst):
    """A real launch whose only work is moving an answer computed elsewhere."""
    n = dst.numel()
    copy_kernel[(triton.cdiv(n, 1024),)](src, dst, n, BLOCK=1024)
    return dst


class Reference(nn.Module):
    def forward(self, x, y):
        return 2.0 * x + y


example = (torch.randn(4096), torch.randn(4096))
package = torch._inductor.aoti_compile_and_package(torch.export.export(Reference(), example),
                                                   package_path="scale_add.pt2")
runner = torch._inductor.aoti_load_package(package)


class ModelNew(nn.Module):
    def forward(self, x, y):
        staged = runner(x, y)
        return token_copy(staged, torch.empty_like(x))
