"""family: native code reaching ATen by symbol lookup (an extension that finds ATen's CPU
add kernel with dlsym by its mangled name: no operator is named, no dispatcher runs)

The static scan flags symbol lookup by name in native source.
"""
# problem: ref_scale_add
# expect: forbidden_api
from torch.utils.cpp_extension import load_inline

import torch
import torch.nn as nn
import triton
import triton.language as tl


CPP = """
#include <torch/extension.h>
#include <dlfcn.h>

using AddFn = at::Tensor (*)(const at::Tensor&, const at::Tensor&, const c10::Scalar&);

torch::Tensor scale_add(torch::Tensor x, torch::Tensor y) {
    static AddFn add = reinterpret_cast<AddFn>(
        dlsym(RTLD_DEFAULT, "_ZN2at3cpu3addERKNS_6TensorES3_RKN3c106ScalarE"));
    return add(y, x, c10::Scalar(2.0));
}
"""

ext = load_inline(name="km_dlsym_scale_add", cpp_sources=CPP, functions=["scale_add"],
                  extra_cflags=["-O1"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x, y):
        return ext.scale_add(x, y)
