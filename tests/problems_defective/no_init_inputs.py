"""Lacks get_init_inputs: not a KernelBench-format problem.

expect: runs
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(8, 8)]
