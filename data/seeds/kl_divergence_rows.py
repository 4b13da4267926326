"""KL divergence between two row-wise softmax distributions given as logits, one value per row.

category: loss
level: 1
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 8192
COLS = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
        log_p = F.log_softmax(student_logits, dim=-1)
        log_q = F.log_softmax(teacher_logits, dim=-1)
        return F.kl_div(log_p, log_q, reduction="none", log_target=True).sum(dim=-1)


def get_inputs():
    teacher = torch.randn(ROWS, COLS) * 2.0
    noise = torch.randn(ROWS, COLS) * (torch.rand(ROWS, 1) * 2.0)
    return [teacher + noise, teacher]


def get_init_inputs():
    return []
