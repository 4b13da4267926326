"""family: ahead-of-time compiled PyTorch graph, built where processes are allowed

The word load_inline in this docstring makes the grader import the submission in its extension
compile worker first, where a compiler may run: there the AOTInductor package of the reference
is built into the extension folder, which the candidate worker (no process creation) then only
loads with the C++ package loader. torch._inductor is reached through pkgutil.resolve_name with
a name built at run time, so no forbidden name appears in the source. Caught by the static
scan: pkgutil is no module a kernel needs, torch._C is a library internal.
"""
# problem: ref_scale_add
# expect: forbidden_api
import os
import pkgutil

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


aot = pkgutil.resolve_name("torch." + "".join(["_", "ind", "uctor"]))
package = os.path.join(os.getenv("TORCH_EXTENSIONS_DIR") or os.getcwd(), "scale_add.pt2")
if not os.path.exists(package):
    example = (torch.randn(4096), torch.randn(4096))
    aot.aoti_compile_and_package(torch.export.export(Reference(), example),
                                 package_path=package)
# The C++ loader: no compiler probe (aoti_load_package runs `c++ --version`, a process).
loader = torch._C._aoti.AOTIModelPackageLoader(package, "model", False, 1, -1)


class ModelNew(nn.Module):
    def forward(self, x, y):
        return token_copy(loader.run([x, y])[0], torch.empty_like(x))
