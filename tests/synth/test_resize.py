"""Resizing problem sources: scaling, validity rules, formatting, refusals, target sizes."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from kernelmill.core.problem import check_source
from kernelmill.data import SEEDS_DIR
from kernelmill.synth.resize import (
    ResizeError,
    largest_numel,
    resize_source,
    shrink_for_cpu,
    size_constants,
)

ATTENTION = '''"""Attention with a head split.

category: attention
level: 2
"""
import torch
import torch.nn as nn

BATCH   = 32     # sequences per step
SEQ_LEN = 1_024
MODEL_DIM = 768  # divisible by NUM_HEADS
NUM_HEADS = 12
KERNEL_SIZE = 3
MLP_DIM = 4 * MODEL_DIM


class Model(nn.Module):
    def __init__(self, model_dim, num_heads, mlp_dim):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = model_dim // num_heads
        self.fc = nn.Linear(model_dim, mlp_dim)

    def forward(self, x):
        b, s, d = x.shape
        y = x.view(b, s, self.num_heads, self.head_dim)
        return self.fc(y.reshape(b, s, d))


def get_inputs():
    return [torch.randn(BATCH, SEQ_LEN, MODEL_DIM)]


def get_init_inputs():
    # head size must divide evenly
    return [MODEL_DIM, NUM_HEADS, MLP_DIM]
'''

CONV = '''import torch
import torch.nn as nn

BATCH = 32
CHANNELS = 64
NUM_GROUPS = 32
HEIGHT = 100
WIDTH = 100
KERNEL_SIZE = 7


class Model(nn.Module):
    def __init__(self, channels, groups, k):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, k)
        self.norm = nn.GroupNorm(groups, channels)

    def forward(self, x):
        return self.norm(self.conv(x))


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS, NUM_GROUPS, KERNEL_SIZE]
'''


def _run(source: str):
    namespace: dict = {}
    exec(compile(source, "<resized>", "exec"), namespace)
    torch.manual_seed(0)
    model = namespace["Model"](*namespace["get_init_inputs"]())
    inputs = namespace["get_inputs"]()
    with torch.no_grad():
        return model(*inputs), inputs


def _constants(source: str) -> dict[str, int]:
    namespace: dict = {}
    exec(compile(source, "<resized>", "exec"), namespace)
    return {k: v for k, v in namespace.items() if k.isupper() and isinstance(v, int)}


def test_factor_scales_size_constants_and_nothing_else():
    result = resize_source(ATTENTION, factor=0.5)
    assert result.changes == {"BATCH": (32, 16), "SEQ_LEN": (1024, 512), "MODEL_DIM": (768, 384)}
    values = _constants(result.source)
    assert values["NUM_HEADS"] == 12 and values["KERNEL_SIZE"] == 3
    assert values["MLP_DIM"] == 4 * 384  # derived constants follow their inputs
    assert result.numel_before == 32 * 1024 * 768
    assert result.numel_after == 16 * 512 * 384
    check_source(result.source)
    out, _ = _run(resize_source(ATTENTION, factor=0.05).source)
    assert out.shape[-1] == _constants(resize_source(ATTENTION, factor=0.05).source)["MLP_DIM"]


def test_formatting_and_comments_survive():
    result = resize_source(ATTENTION, factor=2.0)
    old_lines, new_lines = ATTENTION.splitlines(), result.source.splitlines()
    assert len(old_lines) == len(new_lines)
    differing = [(a, b) for a, b in zip(old_lines, new_lines) if a != b]
    assert differing == [
        ("BATCH   = 32     # sequences per step", "BATCH   = 64     # sequences per step"),
        ("SEQ_LEN = 1_024", "SEQ_LEN = 2_048"),
        ("MODEL_DIM = 768  # divisible by NUM_HEADS", "MODEL_DIM = 1536  # divisible by NUM_HEADS"),
    ]


def test_refuses_with_a_reason():
    with pytest.raises(ResizeError, match="no module-level int size constants"):
        resize_source("import torch\n\ndef get_inputs():\n    return [torch.randn(4, 4)]\n",
                      factor=2)
    small = "K = 3\nSTRIDE = 2\n\ndef get_inputs():\n    return [K, STRIDE]\n"
    with pytest.raises(ResizeError) as info:
        resize_source(small, factor=2)
    assert "K (small constant" in info.value.reason and "STRIDE" in info.value.reason
    protected = "SPLIT = 64\n\ndef get_inputs():\n    return [torch.randn(4, 4096 // SPLIT)]\n"
    with pytest.raises(ResizeError, match="SPLIT \\(used as a divisor\\)"):
        resize_source(protected, factor=2)
    with pytest.raises(ResizeError, match="does not parse \\(line 2"):
        resize_source("N = 64\ndef get_inputs(:\n", factor=2)
    with pytest.raises(ResizeError, match="exactly one"):
        resize_source(ATTENTION, factor=2, target_numel=10)
    with pytest.raises(ResizeError, match="positive"):
        resize_source(ATTENTION, factor=0)
    unused = "BIG = 4096\n\ndef get_inputs():\n    return []\n"
    with pytest.raises(ResizeError, match="BIG \\(not used by the model"):
        resize_source(unused, factor=0.5)


def test_divisibility_and_kernel_floor_are_kept():
    for factor in (0.001, 0.013, 0.1, 0.37, 0.9, 1.7, 3.3):
        values = _constants(resize_source(ATTENTION, factor=factor).source)
        assert values["MODEL_DIM"] % 12 == 0 and values["MODEL_DIM"] % 8 == 0
        assert values["MLP_DIM"] % 12 == 0
        assert values["SEQ_LEN"] % 8 == 0 and values["SEQ_LEN"] >= 8
    for factor in (0.001, 0.05, 0.5):
        values = _constants(resize_source(CONV, factor=factor).source)
        assert values["CHANNELS"] % 32 == 0  # travels with NUM_GROUPS into the constructor
        assert values["HEIGHT"] >= 7 and values["WIDTH"] >= 7  # still fits the 7x7 kernel
        _run(resize_source(CONV, factor=factor).source)
    # BATCH = 32 = NUM_GROUPS is a coincidence: the batch still shrinks below 32
    assert _constants(resize_source(CONV, factor=0.05).source)["BATCH"] < 32


def test_constants_used_only_by_the_model_are_scaled_too():
    source = ("import torch\nimport torch.nn as nn\nTOKENS = 512\nIN_FEATURES = 256\n"
              "OUT_FEATURES = 1024\n\nclass Model(nn.Module):\n    def __init__(self):\n"
              "        super().__init__()\n"
              "        self.fc = nn.Linear(IN_FEATURES, OUT_FEATURES)\n\n"
              "    def forward(self, x):\n        return self.fc(x)\n\n"
              "def get_inputs():\n    return [torch.randn(TOKENS, IN_FEATURES)]\n\n"
              "def get_init_inputs():\n    return []\n")
    result = resize_source(source, factor=0.25)
    assert result.changes == {"TOKENS": (512, 128), "IN_FEATURES": (256, 64),
                              "OUT_FEATURES": (1024, 256)}
    out, _ = _run(result.source)
    assert out.shape == (128, 256)


def test_divisibility_follows_expressions_not_neighbouring_shape_entries():
    source = ("import torch\nBATCH = 16\nNUM_HEADS = 16\nSEQ = 2048\nDIM = 1040\n\n"
              "def get_inputs():\n"
              "    q = torch.randn(BATCH, NUM_HEADS, SEQ, 64)\n"
              "    x = torch.randn(BATCH, SEQ, NUM_HEADS, DIM // NUM_HEADS)\n"
              "    return [q, x]\n")
    values = _constants(resize_source(source, factor=0.05).source)
    assert values["BATCH"] == 8  # shares a shape with NUM_HEADS, needs no divisibility
    assert values["DIM"] % 16 == 0 and values["DIM"] < 1040  # divided by NUM_HEADS


def test_broken_derived_relation_freezes_the_constant():
    source = ("NUM_HEADS = 16\nDIM = 20\nBATCH = 64\nHIDDEN = 4 * DIM\n\n"
              "def get_inputs():\n    return [torch.randn(BATCH, HIDDEN // NUM_HEADS)]\n")
    result = resize_source(source, factor=0.5)
    values = _constants(result.source)
    assert values["HIDDEN"] % 16 == 0
    assert "DIM" not in result.changes and result.changes["BATCH"] == (64, 32)


@settings(max_examples=40, deadline=None)
@given(factor=st.floats(min_value=1e-3, max_value=8.0))
def test_any_factor_gives_valid_positive_sizes(factor):
    result = resize_source(ATTENTION, factor=factor)
    values = _constants(result.source)
    assert all(v > 0 for v in values.values())
    assert values["MODEL_DIM"] % 24 == 0
    for name, (old, new) in result.changes.items():
        assert new % 8 == 0 and new > 0
        # the new size is the nearest allowed multiple, not wildly off the requested factor
        assert abs(new - old * factor) <= max(24, old * factor * 0.5) or new == 24


def test_target_numel_matches_the_real_largest_input():
    result = resize_source(ATTENTION, target_numel=100_000)
    _, inputs = _run(result.source)
    real = max(t.numel() for t in inputs)
    assert real == largest_numel(result.source) == result.numel_after
    assert 100_000 / 8 < real <= 100_000
    grown = resize_source(ATTENTION, target_numel=50_000_000)
    assert grown.factor > 1 and 25_000_000 < grown.numel_after <= 50_000_000


def test_static_size_estimate_reads_common_input_builders():
    source = '''import torch
N = 64
C = 32
def get_inputs():
    x = torch.randn((N, C))
    idx = torch.randint(0, C, (N * 4,))
    big = torch.zeros(N, C, C).view(N, -1) * 2.0
    return [x, idx, big.softmax(-1), torch.full((N,), 3.0)]
def get_init_inputs():
    return [C]
'''
    assert largest_numel(source) == 64 * 32 * 32
    scalable, kept = size_constants(source)
    assert scalable == {"N": 64, "C": 32} and kept == {}


def test_shrink_for_cpu_leaves_small_problems_alone_and_shrinks_large_ones():
    small = resize_source(ATTENTION, factor=0.01).source
    unchanged = shrink_for_cpu(small)
    assert unchanged.source == small and unchanged.factor == 1.0 and unchanged.changes == {}
    shrunk = shrink_for_cpu(ATTENTION, max_numel=50_000)
    assert shrunk.numel_after <= 50_000 and shrunk.factor < 1


def test_every_seed_resizes_without_error():
    for path in sorted(SEEDS_DIR.glob("*.py")):
        source = path.read_text()
        half = resize_source(source, factor=0.5)
        check_source(half.source, str(path))
        assert half.changes, f"{path.name}: nothing scaled"
        assert all(new > 0 for _, new in half.changes.values())
        if half.numel_after and half.numel_before:
            assert half.numel_after < half.numel_before
            assert math.log(half.numel_before / half.numel_after, 2) >= 0.9



def test_literal_kernel_sizes_still_fit():
    source = '''import torch
import torch.nn as nn
import torch.nn.functional as F
BATCH = 64
CHANNELS = 48
HEIGHT = 100
WIDTH = 100
class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 11)
    def forward(self, x):
        return F.max_pool2d(torch.relu(self.conv(x)), kernel_size=(2, 3), ceil_mode=True)
def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]
def get_init_inputs():
    return [CHANNELS]
'''
    result = resize_source(source, factor=1e-4)
    values = _constants(result.source)
    assert values["HEIGHT"] == values["WIDTH"] == 11  # the literal 11x11 kernel still fits
    assert values["BATCH"] == values["CHANNELS"] == 16  # 11 rounded up to a multiple of 8
    out, _ = _run(result.source)
    assert out.shape == (16, 16, 1, 1)
