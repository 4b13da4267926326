"""Each degeneracy rule fires on the chain it exists for, and not on its healthy neighbour."""
from __future__ import annotations

import pytest
from kernelmill.synth.checks import Rejected, vet_source
from kernelmill.synth.degeneracy import RULES, check_trace
from kernelmill.synth.trace import trace_source

TEMPLATE = '''"""Rule fixture.

category: fused
level: 2
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 64
COLS = 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(COLS, COLS)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
{body}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
'''


def source(body: str, inputs: str = "torch.randn(ROWS, COLS)") -> str:
    lines = "\n".join("        " + line for line in body.strip().splitlines())
    return TEMPLATE.format(body=lines, inputs=inputs)


def rules_fired(body: str, inputs: str = "torch.randn(ROWS, COLS)") -> set[str]:
    return {v.rule for v in check_trace(trace_source(source(body, inputs)))}


# (rule, degenerate forward, its healthy neighbour, inputs)
CASES = [
    ("softmax_size1", "return torch.softmax(x.sum(dim=1, keepdim=True), dim=1)",
     "return torch.softmax(x, dim=1)", None),
    ("softmax_size1", "return F.log_softmax(x.unsqueeze(2), dim=2)",
     "return F.log_softmax(x.unsqueeze(2), dim=1)", None),
    ("reduce_size1", "return x.unsqueeze(1).sum(dim=1)", "return x.unsqueeze(1).sum(dim=2)", None),
    ("reduce_size1", "return torch.amax(x[:, :1], dim=-1)", "return torch.amax(x[:, :2], dim=-1)",
     None),
    ("softmax_row_sum", "return torch.softmax(x, dim=-1).sum(dim=-1)",
     "return torch.softmax(x, dim=-1).sum(dim=0)", None),
    ("softmax_row_sum", "return torch.mean(F.softmax(self.linear(x), dim=1), dim=1)",
     "return torch.mean(F.softmax(self.linear(x), dim=1) * x, dim=1)", None),
    ("identity_clamp", "return torch.relu(torch.sigmoid(x))", "return torch.relu(torch.tanh(x))",
     None),
    ("identity_clamp", "return F.relu(torch.softmax(x, dim=-1))", "return F.relu(x)", None),
    ("identity_clamp", "return nn.ReLU()(x.abs())", "return nn.ReLU()(x)", None),
    ("identity_clamp", "return torch.clamp(torch.sigmoid(x), min=-1.0, max=2.0)",
     "return torch.clamp(torch.sigmoid(x), min=0.2, max=0.8)", None),
    ("identity_clamp", "return x.relu()", "return x.relu()", "torch.rand(ROWS, COLS)"),
    ("identity_abs", "return torch.abs(torch.exp(x))", "return torch.abs(torch.sin(x))", None),
    ("rectifier_nonneg", "return F.leaky_relu(x, 0.1)", "return F.leaky_relu(x * 2 - 1, 0.1)",
     "torch.rand(ROWS, COLS)"),
    ("rectifier_nonneg", "return F.elu(torch.exp(x))", "return F.elu(torch.sin(x))", None),
    ("rectifier_nonneg", "return F.gelu(torch.relu(self.linear(x)))",
     "return F.gelu(self.linear(x))", None),
    ("constant_clamp", "y = torch.min(self.linear(x), torch.tensor(0.5))\n"
                       "return torch.clamp(y, min=0.5, max=1.0)",
     "y = torch.min(self.linear(x), torch.tensor(0.5))\nreturn torch.clamp(y, min=0.0, max=1.0)",
     None),
    ("constant_clamp", "return F.relu6(F.logsigmoid(x))", "return F.relu6(F.silu(x))", None),
    ("constant_clamp", "return torch.clamp(torch.var(x, dim=1), max=0.2)",
     "return torch.clamp(torch.var(x, dim=1), max=2.0)", None),
    ("constant_clamp", "return torch.relu(torch.amin(x, dim=1))",
     "return torch.relu(torch.mean(x, dim=1))", None),
    ("constant_clamp", "return F.relu(torch.logcumsumexp(F.log_softmax(x, dim=1), dim=1))",
     "return F.relu(torch.logcumsumexp(x, dim=1))", None),
    ("shrink_to_zero", "return F.softshrink(torch.clamp(x, min=-0.25, max=0.25), lambd=0.5)",
     "return F.softshrink(torch.clamp(x, min=-1.0, max=1.0), lambd=0.5)", None),
    ("shrink_to_zero", "return F.hardshrink(F.tanhshrink(torch.softmax(x, dim=1)), lambd=0.1)",
     "return F.hardshrink(F.tanhshrink(x), lambd=0.1)", None),
    ("constant_output", "return torch.amin(F.silu(x), dim=1)",
     "return torch.amin(F.silu(x * 0.1), dim=1)", None),
    ("constant_clamp", "return torch.relu(F.glu(F.logsigmoid(x), dim=-1))",
     "return torch.relu(F.glu(x, dim=-1))", None),
    ("idempotent_twice", "return torch.relu(F.relu(x))", "return torch.relu(F.gelu(x))", None),
    ("idempotent_twice", "return torch.abs(torch.abs(x))", "return torch.abs(torch.neg(x))", None),
    ("idempotent_twice", "return torch.round(torch.round(x * 4))", "return torch.round(x * 4)", None),
    ("saturation", "return torch.sigmoid(x @ x.T)", "return torch.sigmoid(x @ x.T / COLS ** 0.5)",
     None),
    ("saturation", "return torch.tanh(x * 50.0)", "return torch.tanh(x * 2.0)", None),
    ("saturation", "return torch.sigmoid(torch.logsumexp(x, dim=1) + 5.0)",
     "return torch.sigmoid(torch.mean(x, dim=1) + 0.5)", None),
    ("saturation", "return torch.tanh(torch.topk(x * 6.0, 4, dim=1).values)",
     "return torch.tanh(torch.topk(x * 6.0, 4, dim=1).values / 10.0)", None),
    ("domain", "return torch.log(self.linear(x))", "return torch.log(torch.sigmoid(x))", None),
    ("domain", "return torch.sqrt(x - 0.5)", "return torch.sqrt(x + 0.5)", "torch.rand(ROWS, COLS)"),
    ("domain", "return torch.log(F.hardshrink(torch.sigmoid(x), lambd=0.5))",
     "return torch.log(F.hardshrink(torch.sigmoid(x), lambd=0.5) + 1.0)", None),
    ("overflow", "return torch.exp(x * 30.0)", "return torch.exp(x)", None),
    ("random_in_forward", "return x + torch.randn_like(x)", "return x + torch.ones_like(x)", None),
    ("random_in_forward", "return self.drop(self.linear(x))", "return self.linear(x)", None),
    ("undefined_write_order",
     "idx = torch.randint(0, ROWS, (ROWS,))\nreturn torch.zeros(ROWS, COLS).index_copy(0, idx, x)",
     "idx = torch.arange(ROWS)\nreturn torch.zeros(ROWS, COLS).index_copy(0, idx, x)", None),
    ("undefined_write_order",
     "idx = torch.randint(0, 8, (ROWS, COLS))\nreturn torch.zeros(ROWS, 8).scatter(1, idx, x)",
     "idx = torch.randint(0, 8, (ROWS, COLS))\nreturn torch.zeros(ROWS, 8).scatter_add(1, idx, x)",
     None),
    ("identity", "return x", "return x * 2.0", None),
    ("input_independent", "return torch.ones(ROWS, COLS) * 3.0", "return torch.ones(ROWS, COLS) * x",
     None),
    ("constant_output", "return torch.amax(torch.clamp(x, min=-0.5, max=0.5), dim=1)",
     "return torch.amax(torch.clamp(x * 0.1, min=-0.5, max=0.5), dim=1)", None),
    ("constant_output", "return torch.clamp(torch.sigmoid(x), min=2.0, max=3.0)",
     "return torch.clamp(torch.sigmoid(x), min=0.0, max=0.5)", None),
]


@pytest.mark.parametrize("rule,bad,good,inputs", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule_fires_on_degenerate_chain_only(rule, bad, good, inputs):
    inputs = inputs or "torch.randn(ROWS, COLS)"
    assert rule in rules_fired(bad, inputs)
    if good != bad:
        assert rule not in rules_fired(good, inputs)


def test_relu_on_unit_interval_input_is_flagged_but_on_signed_input_not():
    assert "identity_clamp" in rules_fired("return torch.relu(x)", "torch.rand(ROWS, COLS)")
    assert rules_fired("return torch.relu(x)", "torch.rand(ROWS, COLS) * 2 - 1") == set()


def test_every_rule_has_a_case():
    covered = {c[0] for c in CASES}
    assert set(RULES) <= covered, set(RULES) - covered


def test_vet_source_reports_the_rule_as_the_drop_label():
    with pytest.raises(Rejected) as info:
        vet_source(source("return torch.softmax(x, dim=-1).sum(dim=-1)"))
    assert info.value.label == "degenerate: softmax_row_sum"
    problem, trace = vet_source(source("return F.gelu(self.linear(x))"))
    assert problem.category == "fused" and trace.outputs[0].shape == (64, 256)


def test_shape_errors_are_reported_with_the_stage():
    with pytest.raises(Rejected) as info:
        vet_source(source("return x @ x"))
    assert info.value.label == "trace: forward"
