# problem: ref_row_sum
# expect: error
# Raises in forward.

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        raise RuntimeError('kernel not implemented')
