"""Mixture-of-experts layer: softmax router, top-2 gating, GELU expert MLPs, gated sum.

Each chosen expert's gate is its lead over the best expert left out: where a token's 2nd and
3rd router probabilities nearly tie, the expert that may swap in or out carries a gate near
zero, so the output is a continuous function of the router and a rounding of it moves the
output by a rounding (top-2 gates renormalized over the chosen probabilities jump there by a
whole expert's row, and renormalized leads step at a three-way tie: `stable_exact_outputs`
rejects both).

category: block
level: 3
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 2048
MODEL_DIM = 1024
HIDDEN = 1024
NUM_EXPERTS = 8
TOP_K = 2


class Model(nn.Module):
    def __init__(self, model_dim: int, hidden: int, num_experts: int, top_k: int):
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(model_dim, num_experts, bias=False)
        bound_in, bound_out = 1.0 / math.sqrt(model_dim), 1.0 / math.sqrt(hidden)
        w_in = torch.empty(num_experts, model_dim, hidden).uniform_(-bound_in, bound_in)
        w_out = torch.empty(num_experts, hidden, model_dim).uniform_(-bound_out, bound_out)
        self.w_in = nn.Parameter(w_in)
        self.w_out = nn.Parameter(w_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(self.router(x), dim=-1)
        top_p, top_i = torch.topk(probs, self.top_k + 1, dim=-1)
        lead = top_p[:, :-1] - top_p[:, -1:]  # over the best expert left out: 0 at a tie
        # scatter (not scatter_add): indices are distinct within a row, so this is deterministic
        gates = torch.zeros_like(probs).scatter(-1, top_i[:, :-1], lead)
        hidden = F.gelu(torch.einsum("td,edh->eth", x, self.w_in))
        expert_out = torch.einsum("eth,ehd->etd", hidden, self.w_out)
        return torch.einsum("te,etd->td", gates, expert_out)


def get_inputs():
    return [torch.randn(TOKENS, MODEL_DIM) * 2.0]


def get_init_inputs():
    return [MODEL_DIM, HIDDEN, NUM_EXPERTS, TOP_K]
