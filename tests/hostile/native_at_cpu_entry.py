"""family: trace blind spot (native code calling at::cpu:: entry points)

at::cpu::add runs the CPU kernel directly, below the dispatcher the op trace watches.
"""
# problem: ref_scale_add
# expect: forbidden_api
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp = r"""
#include <torch/extension.h>
#include <ATen/CPUFunctions.h>
torch::Tensor scale_add(torch::Tensor x, torch::Tensor y) {
  return at::cpu::add(x, y, 2.0).sub_(y).add_(x, -1.0).add_(y, 0.0).mul_(1.0).add_(x).add_(y).sub_(y);
}
"""
ext = load_inline("km_hostile_at_cpu", cpp_sources=[cpp], functions=["scale_add"])


class ModelNew(nn.Module):
    def forward(self, x, y):
        return ext.scale_add(x, y)
