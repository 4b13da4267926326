# problem: ref_row_sum
# expect: error
# Never returns from forward.

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        while True:
            pass
