"""family: library laundering (TORCH_LIBRARY op in C++ whose body calls ATen)

"""
# problem: ref_scale_add
# expect: torch_compute
# cpu: cuda suite only (an extension build of 40-80 s on a 2-core CPU; its mechanism's CPU
# test: test_a_library_extension_loads_only_the_build_the_compile_worker_reported)
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp = r"""
#include <torch/extension.h>
torch::Tensor scale_add(torch::Tensor x, torch::Tensor y) { return x.mul(2.0).add(y); }
TORCH_LIBRARY(kmcpp, m) { m.def("scale_add(Tensor x, Tensor y) -> Tensor"); }
TORCH_LIBRARY_IMPL(kmcpp, CPU, m) { m.impl("scale_add", scale_add); }
TORCH_LIBRARY_IMPL(kmcpp, CUDA, m) { m.impl("scale_add", scale_add); }
"""
load_inline("km_hostile_torch_library", cpp_sources=[cpp], is_python_module=False)


class ModelNew(nn.Module):
    def forward(self, x, y):
        return torch.ops.kmcpp.scale_add(x, y)
