"""Every mutator: what it changes (formatting and comments kept, result valid) and when it refuses."""
from __future__ import annotations

import random
from pathlib import Path

from conftest import FIXTURES

import pytest
from kernelmill.core.problem import check_source
from kernelmill.synth.mutators import (
    MUTATORS,
    ConvPoolMutator,
    DtypeMutator,
    InputDistributionMutator,
    InsertEpilogueMutator,
    ReductionDimMutator,
    Refusal,
    RemoveEpilogueMutator,
    ResizeMutator,
    SwapOpMutator,
)
from kernelmill.synth.trace import trace_source

HEADER = '''"""{doc}

category: {category}
level: 1
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
'''

ACTIVATION = HEADER.format(doc="Row-wise GELU then a sum.", category="fused") + '''
ROWS = 4096   # rows of the batch
COLS = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the activation under test
        y = F.gelu(x)
        y = torch.tanh(y)
        return torch.sum(y, dim=1)


def get_inputs():
    return [torch.randn(ROWS, COLS) * 2.0]


def get_init_inputs():
    return []
'''

CONV = HEADER.format(doc="Conv, ReLU, max-pool.", category="convolution") + '''
BATCH = 16
IN_CHANNELS = 32
OUT_CHANNELS = 64
SIZE = 128
KERNEL_SIZE = 3


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=1)
        self.act = nn.ReLU()
        self.pool = nn.MaxPool2d(2)  # halves the map

    def forward(self, x):
        return self.pool(self.act(self.conv(x)))


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, KERNEL_SIZE]
'''

LINEAR = HEADER.format(doc="Linear layer with a LayerNorm.", category="fused") + '''
BATCH = 2048
FEATURES = 4096


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.norm = nn.LayerNorm(features)

    def forward(self, x):
        x = self.linear(x)
        x = self.norm(x)
        return x


def get_inputs():
    return [torch.randn(BATCH, FEATURES)]


def get_init_inputs():
    return [FEATURES]
'''

INTEGER = HEADER.format(doc="Embedding lookup.", category="other") + '''
BATCH = 4096
VOCAB = 32000


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, tokens, table):
        return torch.nn.functional.embedding(tokens, table)


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH,)), torch.randint(0, 7, (VOCAB, 64))]


def get_init_inputs():
    return []
'''


def mutate(mutator_cls, source, seed=0):
    return mutator_cls().mutate(source, random.Random(seed))


def changed_lines(before: str, after: str) -> list[str]:
    old = set(before.splitlines())
    return [line for line in after.splitlines() if line not in old]


def assert_valid(source: str) -> None:
    check_source(source)
    trace_source(source)


def test_every_mutator_has_a_docstring_saying_when_it_refuses():
    for cls in MUTATORS:
        assert cls.__doc__ and "Refuses" in cls.__doc__, cls.__name__


def test_resize_scales_constants_and_records_factor():
    m = mutate(ResizeMutator, ACTIVATION)
    assert m.operation["op"] == "resize" and m.operation["factor"] != 1.0
    assert "# rows of the batch" in m.source
    assert_valid(m.source)


def test_resize_refuses_without_size_constants():
    src = ACTIVATION.replace("ROWS = 4096   # rows of the batch\nCOLS = 8192\n", "").replace(
        "torch.randn(ROWS, COLS)", "torch.randn(4, 8)")
    with pytest.raises(Refusal):
        mutate(ResizeMutator, src)


def test_dtype_inserts_constant_and_threads_it_through_layers_and_inputs():
    m = mutate(DtypeMutator, LINEAR, seed=1)
    assert m.operation["from"] == "float32" and m.operation["to"] in ("float16", "bfloat16")
    assert f"DTYPE = torch.{m.operation['to']}" in m.source
    assert "nn.Linear(features, features, dtype=DTYPE)" in m.source
    assert "nn.LayerNorm(features, dtype=DTYPE)" in m.source
    assert "torch.randn(BATCH, FEATURES, dtype=DTYPE)" in m.source
    trace = trace_source(m.source)
    assert trace.outputs[0].dtype == m.operation["to"]


def test_dtype_refuses_integer_only_inputs():
    with pytest.raises(Refusal, match="integer"):
        mutate(DtypeMutator, INTEGER)


def test_dtype_refuses_ops_without_a_half_kernel():
    src = ACTIVATION.replace("torch.tanh(y)", "torch.logcumsumexp(y, dim=1)")
    with pytest.raises(Refusal, match="logcumsumexp"):
        mutate(DtypeMutator, src)


@pytest.mark.parametrize("spelling", ["F.gelu(x)", "torch.nn.functional.gelu(x)", "g(x)",
                                      "x.relu()", "torch.relu(x)"])
def test_swap_recognises_every_spelling_of_an_activation(spelling):
    src = ACTIVATION.replace("F.gelu(x)", spelling)
    if spelling == "g(x)":
        src = src.replace("import torch.nn.functional as F\n",
                          "import torch.nn.functional as F\nfrom torch.nn.functional import gelu as g\n")
    seen = set()
    for seed in range(6):
        m = mutate(SwapOpMutator, src, seed)
        assert_valid(m.source)
        seen.add(m.operation["from"])
        assert "# the activation under test" in m.source
    assert ("relu" if "relu" in spelling else "gelu") in seen


def test_swap_carries_the_reduction_dim():
    src = ACTIVATION.replace("        y = F.gelu(x)\n", "").replace("torch.tanh(y)", "torch.tanh(x)")
    for seed in range(8):
        m = mutate(SwapOpMutator, src, seed)
        if m.operation["from"] == "sum":
            assert m.operation["to"] in ("mean", "amax", "amin", "logsumexp")
            assert f"torch.{m.operation['to']}(y, dim=1)" in m.source
            return
    pytest.fail("sum was never swapped")


def test_swap_changes_modules_layer_norm_to_rms_norm():
    m = mutate(SwapOpMutator, LINEAR)
    assert m.operation == {"op": "swap_op", "from": "layer_norm", "to": "rms_norm"}
    assert "self.norm = nn.RMSNorm(features)" in m.source
    assert_valid(m.source)


def test_swap_refuses_without_swappable_ops():
    with pytest.raises(Refusal, match="no op with a compatible replacement"):
        mutate(SwapOpMutator, INTEGER)


def test_insert_epilogue_adds_a_statement_before_the_return():
    m = mutate(InsertEpilogueMutator, LINEAR)
    new = changed_lines(LINEAR, m.source)
    assert len(new) == 1 and new[0].strip().startswith("x = ")
    assert m.operation["op"] == "insert_epilogue" and m.operation["name"]
    assert_valid(m.source)


def test_insert_epilogue_refuses_tuple_returns():
    src = LINEAR.replace("        return x\n", "        return x, x\n")
    with pytest.raises(Refusal, match="single-tensor return"):
        mutate(InsertEpilogueMutator, src)


def test_remove_epilogue_drops_an_elementwise_statement():
    m = mutate(RemoveEpilogueMutator, ACTIVATION)
    assert m.operation == {"op": "remove_epilogue", "name": "tanh"}
    assert "torch.tanh" not in m.source and "F.gelu(x)" in m.source
    assert_valid(m.source)


def test_remove_epilogue_refuses_when_only_an_identity_would_remain():
    src = LINEAR.replace("        x = self.linear(x)\n        x = self.norm(x)\n",
                         "        x = torch.relu(x)\n")
    with pytest.raises(Refusal, match="identity"):
        mutate(RemoveEpilogueMutator, src)


def test_remove_epilogue_refuses_without_elementwise_ops():
    with pytest.raises(Refusal, match="no removable"):
        mutate(RemoveEpilogueMutator, LINEAR)


def test_reduction_dim_moves_to_a_different_axis():
    m = mutate(ReductionDimMutator, ACTIVATION)
    assert m.operation["from"] == 1 and m.operation["to"] in (0, -2)
    assert trace_source(m.source).outputs[0].shape == (8192,)


def test_reduction_dim_refuses_without_literal_dims():
    with pytest.raises(Refusal, match="literal dim"):
        mutate(ReductionDimMutator, LINEAR)


def test_conv_pool_changes_kernel_constant_and_same_padding_together():
    seen = set()
    for seed in range(6):
        m = mutate(ConvPoolMutator, CONV, seed)
        assert_valid(m.source)
        seen.add(m.operation["layer"])
        if m.operation["layer"] == "Conv2d":
            k = m.operation["kernel_size"]
            assert f"KERNEL_SIZE = {k}" in m.source
            assert f"padding={k // 2}" in m.source
            assert trace_source(m.source).outputs[0].shape == (16, 64, 64, 64)
        else:
            assert "# halves the map" in m.source
    assert seen == {"Conv2d", "MaxPool2d"}


def test_conv_pool_refuses_without_layers():
    with pytest.raises(Refusal, match="no convolution or pooling"):
        mutate(ConvPoolMutator, LINEAR)


def test_input_distribution_rewrites_one_draw():
    m = mutate(InputDistributionMutator, ACTIVATION)
    line = [l for l in m.source.splitlines() if l.strip().startswith("return [")][0]
    assert line != "    return [torch.randn(ROWS, COLS) * 2.0]"
    assert m.operation["from"] == "randn" and m.operation["dist"] in ("scale", "shift", "uniform")
    assert_valid(m.source)


def test_input_distribution_refuses_when_every_change_degenerates():
    # a ReLU right on the input: a uniform draw would feed it only non-negative values, a big
    # scale would saturate the sigmoid; only some changes are valid, never a degenerate one
    src = ACTIVATION.replace("F.gelu(x)", "torch.sigmoid(torch.relu(x))")
    for seed in range(4):
        try:
            m = mutate(InputDistributionMutator, src, seed)
        except Refusal as exc:
            assert "no valid result" in str(exc)
            continue
        assert m.operation["dist"] != "uniform" or "* 2 - 1" in m.source
    with pytest.raises(Refusal, match="no torch.randn"):
        mutate(InputDistributionMutator, INTEGER)


def test_mutation_is_deterministic_for_a_seed():
    a = mutate(SwapOpMutator, ACTIVATION, 3)
    b = mutate(SwapOpMutator, ACTIVATION, 3)
    assert a.source == b.source and a.operation == b.operation


def test_every_mutator_either_mutates_or_refuses_on_shipped_seeds():
    from kernelmill.data import SEEDS_DIR
    from kernelmill.synth.mutators import all_mutators
    seeds = sorted(SEEDS_DIR.glob("*.py"))[::9]
    outcomes = {}
    for mutator in all_mutators():
        for path in seeds:
            try:
                m = mutator.mutate(path.read_text(), random.Random(0))
            except Refusal as exc:
                assert exc.reason, (mutator.name, path.name)
                continue
            check_source(m.source)
            assert m.operation["op"] == mutator.name
            outcomes[mutator.name] = outcomes.get(mutator.name, 0) + 1
    assert {"resize", "dtype", "insert_epilogue", "input_distribution"} <= set(outcomes)


KERNELBENCH_STYLE = (FIXTURES / "synth" /
                     "kernelbench_style_conv_gelu_scale_pool.py").read_text()


def test_kernelbench_style_sources_with_lowercase_constants_after_the_class():
    # kernel sizes reach the layers through get_init_inputs: the constants are what changes
    seen = {}
    for seed in range(4):
        m = mutate(ConvPoolMutator, KERNELBENCH_STYLE, seed)
        seen[m.operation["layer"]] = m.source
        assert_valid(m.source)
    assert "kernel_size = 3" not in seen["Conv2d"] and "pool_kernel_size = 2" in seen["Conv2d"]
    m = mutate(DtypeMutator, KERNELBENCH_STYLE)
    assert "torch.rand(gain_shape, dtype=DTYPE)" in m.source
    assert "nn.Conv2d(in_channels, out_channels, kernel_size, dtype=DTYPE)" in m.source
    m = mutate(RemoveEpilogueMutator, KERNELBENCH_STYLE)
    assert m.operation["name"] == "gelu" and "# Per-channel gain" in m.source
