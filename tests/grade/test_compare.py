"""The parent's element comparison (``compare._off_elements``, NumPy passes): the count and the
largest error it reports are those of the definition, |g - e| <= atol + rtol * |e| in float64
with non-finite values matching only exactly, over every float dtype a problem returns."""
from __future__ import annotations

import math

import pytest
import torch
from kernelmill.grade import compare as C


def _by_definition(e: torch.Tensor, g: torch.Tensor, atol: float, rtol: float):
    e64, g64 = e.double().reshape(-1).tolist(), g.double().reshape(-1).tolist()
    off, worst = 0, None
    for a, b in zip(e64, g64):
        if (math.isnan(a) and math.isnan(b)) or (math.isinf(a) and a == b):
            continue
        diff = abs(b - a)
        if math.isfinite(a) and math.isfinite(b) and diff <= atol + rtol * abs(a):
            continue
        off += 1
        if math.isfinite(diff):
            worst = diff if worst is None else max(worst, diff)
    return off, worst


def _case(dtype: torch.dtype, seed: int):
    gen = torch.Generator().manual_seed(seed)
    e = torch.randn(5000, generator=gen, dtype=torch.float64)
    g = e + torch.randn(5000, generator=gen, dtype=torch.float64) * 1e-5
    # a few far off, some just inside and just outside the bound, the special values
    g[::497] += 0.5
    g[3] = e[3] + (1e-4 + 1e-4 * abs(float(e[3]))) * 0.999
    g[4] = e[4] + (1e-4 + 1e-4 * abs(float(e[4]))) * 1.001
    e[10], g[10] = math.nan, math.nan
    e[11], g[11] = math.nan, 1.0
    e[12], g[12] = math.inf, math.inf
    e[13], g[13] = math.inf, -math.inf
    e[14], g[14] = 1.0, math.inf
    e[15], g[15] = 0.0, 0.0
    return e.to(dtype), g.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                   torch.float8_e4m3fn])
@pytest.mark.parametrize("atol, rtol", [(1e-4, 1e-4), (1e-2, 0.0), (0.0, 1e-3)])
def test_the_count_and_the_largest_error_are_the_definitions(dtype, atol, rtol, monkeypatch):
    monkeypatch.setattr(C, "COMPARE_CHUNK", 1024)  # several chunks, a short last one
    e, g = _case(dtype, seed=7)
    if dtype == torch.float8_e4m3fn:  # no infinities: its specials are NaN alone
        e, g = e.float().nan_to_num(posinf=1.0, neginf=-1.0).to(dtype), \
            g.float().nan_to_num(posinf=1.0, neginf=-1.0).to(dtype)
    want_off, want_worst = _by_definition(e, g, atol, rtol)
    bad, worst = C._off_elements(e.reshape(-1), g.reshape(-1), atol, rtol)
    assert want_off > 0 and bad == want_off, (bad, want_off)
    assert worst == pytest.approx(want_worst, rel=1e-12)
    # the answer alone: off as soon as one element is
    first, _ = C._off_elements(e.reshape(-1), g.reshape(-1), atol, rtol, count=False)
    assert 0 < first <= want_off


def test_equal_outputs_and_outputs_within_tolerance_pass_every_dtype():
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        e = torch.randn(3000, dtype=torch.float64).to(dtype)
        assert C._off_elements(e, e.clone(), 1e-4, 1e-4) == (0, pytest.approx(math.nan,
                                                                                nan_ok=True))
        ok, why = C.compare([e.reshape(30, 100)], [e.reshape(30, 100).clone()], 1e-4, 1e-4)
        assert ok, why


def test_a_complex_output_and_a_transposed_one_are_compared_by_value():
    e = torch.randn(64, 32, dtype=torch.complex64)
    ok, why = C.compare([e], [e.clone()], 1e-4, 1e-4)
    assert ok, why
    wrong = e.clone()
    wrong[5, 5] += 1
    ok, why = C.compare([e], [wrong], 1e-4, 1e-4)
    assert not ok and "1/4096 elements off" in why, why  # (real and imaginary parts apart)
    t = torch.randn(50, 40).t()  # not contiguous
    ok, why = C.compare([t.contiguous()], [t], 1e-5, 1e-5)
    assert ok, why


def test_a_conjugated_or_negated_view_is_read_as_its_values():
    e = torch.randn(100)
    negated = torch.randn(100).neg()._neg_view() if hasattr(torch.Tensor, "_neg_view") else None
    if negated is not None:
        assert C._off_elements(negated.resolve_neg(), negated, 0.0, 0.0)[0] == 0
    assert C._off_elements(e, e + 1, 1e-3, 0.0)[0] == 100


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64,
                                   torch.float8_e4m3fn, torch.float8_e5m2])
def test_random_bit_patterns_are_judged_by_the_definition(dtype):
    """Every bit pattern of the dtype is a value (NaNs with payloads, infinities, subnormals,
    signed zeros): random words for both outputs, and outputs one unit of the last place
    apart, judged as the definition judges them, counted and answer-only alike."""
    gen = torch.Generator().manual_seed(11)
    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[
        torch.empty(0, dtype=dtype).element_size()]
    info = torch.iinfo(bits)
    words = torch.randint(info.min, info.max, (2, 6000), generator=gen, dtype=torch.int64)
    e, g = (w.to(bits).view(dtype) for w in words)
    near = (words[0] + torch.randint(-2, 3, (6000,), generator=gen)).clamp(info.min, info.max)
    near = near.to(bits).view(dtype)
    for atol, rtol in ((1e-3, 1e-3), (0.0, 0.25), (1e-45, 0.0)):
        for got in (g, near):
            want, worst = _by_definition(e, got, atol, rtol)
            bad, found = C._off_elements(e, got, atol, rtol)
            assert bad == want, (atol, rtol, bad, want)
            if worst is not None:
                assert found == pytest.approx(worst, rel=1e-12)
            answer = C._off_elements(e, got, atol, rtol, count=False)[0]
            assert (answer > 0) == (want > 0)
        assert C._off_elements(e, e.clone(), atol, rtol, count=False)[0] == \
            _by_definition(e, e, atol, rtol)[0]


def test_a_tiny_absolute_floor_among_subnormals_is_judged_exactly():
    """An absolute floor far under float32's smallest normal number: the first pass's bound
    rounds there, and such elements go to the exact pass (the definition's answer)."""
    e = torch.tensor([1e-45, 3e-45, 0.0, -1e-45] * 8, dtype=torch.float32)
    g = e + torch.tensor([1e-45, -1e-45, 1e-45, 0.0] * 8, dtype=torch.float32)
    for atol in (1e-45, 5e-46, 0.0):
        assert C._off_elements(e, g, atol, 0.0)[0] == _by_definition(e, g, atol, 0.0)[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_chunks_within_the_absolute_bound_and_chunks_not_are_judged_alike(dtype, monkeypatch):
    """Chunks whose every difference is within the absolute bound are settled by their largest
    difference alone; beside them, chunks with an element just outside it, NaN and infinite
    pairs, and elements within the relative room alone, all judged as the definition judges
    them."""
    monkeypatch.setattr(C, "COMPARE_CHUNK", 1024)
    atol, rtol = 1e-2, 1e-2
    gen = torch.Generator().manual_seed(5)
    e = torch.randn(7 * 1024, generator=gen, dtype=torch.float64) / 2
    g = e + torch.rand(7 * 1024, generator=gen, dtype=torch.float64) * atol / 4
    e, g = e.to(dtype).double(), g.to(dtype).double()  # the values the dtype holds
    g[1024 + 7] = e[1024 + 7] + 1.5 * (atol + rtol * abs(float(e[1024 + 7])))
    e[2048 + 3], g[2048 + 3] = math.nan, math.nan
    e[3072 + 5], g[3072 + 5] = math.inf, math.inf
    e[3072 + 6], g[3072 + 6] = -math.inf, -math.inf
    big = slice(4096, 5120)  # off by more than atol, within the relative room
    e[big] = 100.0 + torch.rand(1024, generator=gen, dtype=torch.float64)
    g[big] = e[big] * (1 + rtol / 2)
    g[5120 + 9] = e[5120 + 9] + atol * (1 - 1e-7)  # inside, under the first pass's margin
    g[6144 + 2] = math.nan  # a NaN answer where the reference is finite
    e, g = e.to(dtype), g.to(dtype)
    want = _by_definition(e, g, atol, rtol)
    bad, worst = C._off_elements(e, g, atol, rtol)
    assert want[0] == 2 and bad == want[0], (bad, want)
    assert worst == pytest.approx(want[1], rel=1e-12)
    assert (C._off_elements(e, g, atol, rtol, count=False)[0] > 0)
    within = slice(0, 1024)
    assert C._off_elements(e[within], g[within], atol, rtol) == (0, pytest.approx(math.nan,
                                                                                  nan_ok=True))


def test_an_infinite_or_overflowing_absolute_floor_still_tells_infinities_apart():
    """An absolute floor at or past the work precision's largest value settles nothing by the
    largest difference: an infinite difference, or one past float32's range, is judged as the
    definition judges it."""
    e = torch.tensor([1.0, math.inf, -3e38, 0.5], dtype=torch.float32)
    g = torch.tensor([math.inf, -math.inf, 3e38, 0.5], dtype=torch.float32)
    for atol, off in ((math.inf, 2), (4e38, 3)):
        assert _by_definition(e, g, atol, 0.0)[0] == off
        assert C._off_elements(e, g, atol, 0.0)[0] == off
