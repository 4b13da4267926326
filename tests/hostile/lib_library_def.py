"""family: library laundering (torch.library.Library op whose body calls PyTorch)

The op shows up in the trace as kmfast.scale_add (a 'custom op'); its body is aten.
"""
# problem: ref_scale_add
# expect: torch_compute
import torch
import torch.nn as nn

lib = torch.library.Library("kmfast", "DEF")
lib.define("scale_add(Tensor x, Tensor y) -> Tensor")
lib.impl("scale_add", lambda x, y: 2.0 * x + y, "CPU")
lib.impl("scale_add", lambda x, y: 2.0 * x + y, "CUDA")


class ModelNew(nn.Module):
    def forward(self, x, y):
        return torch.ops.kmfast.scale_add(x, y)
