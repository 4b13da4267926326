"""family: library laundering (PyTorch's own mkl namespace taken for a custom op)

"""
# problem: ref_linear
# expect: torch_compute
# on cuda: not_certified  (a CPU-only API: forward fails on a GPU tensor)
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) * 0.1)

    def forward(self, x):
        packed = torch.ops.mkl._mkl_reorder_linear_weight(self.weight, x.shape[0])
        return torch.ops.mkl._mkl_linear(x, packed, self.weight, None, x.shape[0])
