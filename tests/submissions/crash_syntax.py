# problem: ref_row_sum
# expect: error
# Does not parse.

import torch

class ModelNew(torch.nn.Module):
    def forward(self, x)
        return x
