"""Pure parts of the validator: measurements, verdicts, tolerance, ablation, roofline, difficulty."""
import math

import pytest
import torch
from kernelmill.validate import checks as C
from kernelmill.validate.ablation import ablations
from kernelmill.validate.difficulty import difficulty
from kernelmill.validate.roofline import device_peaks, roofline


def t(*values):
    return torch.tensor(values, dtype=torch.float32)


def test_max_error_is_the_allclose_measure():
    a, b = t(1.0, 2.0, 0.0), t(1.0, 2.5, 0.0)
    err = C.max_error([a], [b])
    assert err == pytest.approx(0.5 / 3.5)
    assert torch.allclose(a, b, atol=err, rtol=err)
    assert not torch.allclose(a, b, atol=err * 0.99, rtol=err * 0.99)


def test_max_error_shapes_and_nans():
    assert C.max_error([t(1, 2)], [t(1, 2, 3)]) == math.inf
    nan = float("nan")
    assert C.max_error([t(nan, 1)], [t(nan, 1)]) == 0.0
    assert C.max_error([t(nan, 1)], [t(0, 1)]) == math.inf
    assert C.bitwise_equal([t(nan, 1)], [t(nan, 1)])
    assert not C.bitwise_equal([t(1, 2)], [t(1, 2.0000002)])



def _exact_errors(x, y):
    """The mixed error of every element pair in fp64 on the host (NaN pairs and equal
    infinities 0, a NaN on one side inf)."""
    x64 = (torch.view_as_real(x) if x.is_complex() else x).double().reshape(-1)
    y64 = (torch.view_as_real(y) if y.is_complex() else y).double().reshape(-1)
    err = (x64 - y64).abs() / (1 + y64.abs())
    same = (x64.isnan() & y64.isnan()) | (x64.isinf() & (x64 == y64))
    return err.masked_fill(same, 0.0).nan_to_num(nan=math.inf)


@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float32), (torch.float32, torch.float64),
                                    (torch.bfloat16, torch.float32), (torch.int64, torch.int64),
                                    (torch.int32, torch.float32), (torch.bool, torch.bool),
                                    (torch.complex64, torch.complex64)])
def test_the_working_precision_error_is_the_exact_one(dtypes, monkeypatch):
    """``max_error`` and ``mismatch_fraction`` in the pair's working precision agree with the
    fp64 measure over block boundaries, odd layouts, NaNs, infinities and fp32 overflow."""
    monkeypatch.setattr(C, "CHUNK", 1000)
    g = torch.Generator().manual_seed(1)
    dx, dy = dtypes
    base = torch.randn(37, 101, generator=g) * 10 ** torch.randint(-3, 4, (37, 1), generator=g)

    def make(dtype, noise):
        v = base + noise * torch.randn(base.shape, generator=g)
        if dtype == torch.bool:
            return v > 0
        if dtype.is_complex:
            return torch.complex(v, v.flip(0)).to(dtype)
        if not dtype.is_floating_point:
            return (v * 1e4).round().to(dtype)
        return v.to(dtype)

    x, y = make(dx, 1e-3).t(), make(dy, 0.0).t()  # transposed: blocks copied row by row
    want = _exact_errors(x, y)
    assert C.max_error([x], [y]) == pytest.approx(float(want.max()), rel=1e-5, abs=1e-12)
    for tol in (1e-6, 1e-4, 1e-2):
        assert C.mismatch_fraction([x], [y], tol) == pytest.approx(
            float((want > tol).double().mean()), abs=2 / want.numel())
    if not dx.is_floating_point or dx.is_complex:
        return
    nan, inf = float("nan"), float("inf")
    for left, right, expected in (((nan, 1.0), (nan, 1.0), 0.0), ((nan, 1.0), (0.0, 1.0), inf),
                                  ((inf, 1.0), (inf, 1.0), 0.0), ((inf, 1.0), (2.0, 1.0), None),
                                  ((3e38, 1.0), (-3e38, 1.0), 2.0)):
        xs, ys = torch.tensor(left, dtype=torch.float32), torch.tensor(right, dtype=torch.float32)
        got = C.max_error([xs.to(dx)], [ys.to(dy)])
        exact = float(_exact_errors(xs.to(dx), ys.to(dy)).max())
        assert got == pytest.approx(exact, rel=1e-6), (left, got)
        assert expected is None or got == pytest.approx(expected, rel=1e-2), (left, got)
    overflow = torch.tensor([3e38, 0.0]), torch.tensor([-3e38, 0.0])
    assert C.mismatch_fraction([overflow[0]], [overflow[1]], 1e-4) == 0.5


def test_the_working_precision_keeps_half_precision_denominators_and_tiny_errors():
    """``1 + |y|`` of a half-precision ``y`` beside an fp64 ``x`` is not rounded to half
    precision, and an fp64 output's tiny error is not lost to an fp32 output judged after it."""
    x = torch.tensor([0.0, 1000.0], dtype=torch.float64)
    y = torch.tensor([0.0, 1004.0], dtype=torch.bfloat16)
    assert C.max_error([x], [y]) == pytest.approx(float(_exact_errors(x, y).max()), rel=1e-9)
    tiny = torch.tensor([1e-50, 0.0], dtype=torch.float64), torch.zeros(2, dtype=torch.float64)
    same = torch.ones(3), torch.ones(3)
    assert C.max_error([tiny[0], same[0]], [tiny[1], same[1]]) == pytest.approx(1e-50)

def test_mismatch_zero_and_constant_fractions():
    ref = torch.arange(100, dtype=torch.float32)
    moved = ref.clone()
    moved[:7] += 1.0
    assert C.mismatch_fraction([moved], [ref], 1e-4) == pytest.approx(0.07)
    assert C.mismatch_fraction([moved], [ref], 1e-4, margin=1e5) == 0.0
    sparse = torch.zeros(1000)
    sparse[:5] = 3.0
    assert C.zero_fraction([sparse], 1e-4) == pytest.approx(0.995)
    assert C.constant_fraction([torch.full((50,), 2.0)], 1e-4) == 1.0
    assert C.constant_fraction([ref], 1e-4) == pytest.approx(0.01)


def test_affine_residual_tells_inert_from_real_nonlinearity():
    g = torch.Generator().manual_seed(0)
    x1, x2 = torch.rand(4, 3, 16, generator=g), torch.rand(4, 3, 16, generator=g)
    assert C.affine_residual([x1, x2], [torch.relu(x1) * 2 + 1, torch.relu(x2) * 2 + 1]) < 1e-6
    n1, n2 = x1 - 0.5, x2 - 0.5
    assert C.affine_residual([n1, n2], [torch.relu(n1), torch.relu(n2)]) > 1e-2
    scale = torch.tensor([1.0, -2.0, 3.0]).view(1, 3, 1)
    y1, y2 = x1 * scale, x2 * scale
    assert C.affine_residual([x1, x2], [y1, y2]) > 1e-2  # one a for all channels: no
    assert C.affine_residual([x1, x2], [y1, y2], channel_dim=1) < 1e-6  # per channel: yes
    # a normalisation's a, b depend on the draw: not affine across two draws
    norm = [(x - x.mean(dim=(0, 2), keepdim=True)) / x.std(dim=(0, 2), keepdim=True)
            for x in (x1, x2)]
    assert C.affine_residual([x1, x2], norm, channel_dim=1) > 1e-3


def test_calibrated_tolerance_floor_margin_and_cap():
    assert C.calibrate_tolerance(1e-9, "float32")["tol"] == 1e-4
    cal = C.calibrate_tolerance(1e-4, "float32", margin=10)
    assert cal["tol"] == pytest.approx(1e-3) and cal["within_cap"]
    assert not C.calibrate_tolerance(0.01, "float32")["within_cap"]
    assert C.calibrate_tolerance(1e-5, "bfloat16")["tol"] == 2e-2
    assert C.calibrate_tolerance(None, "float16") == {"tol": 1e-2, "floor": 1e-2, "cap": 1e-1,
                                                      "within_cap": True}


def test_digest_compares_across_processes():
    a = [torch.linspace(0, 1, 10)]
    da, db = C.output_digest(a), C.output_digest([a[0].clone()])
    assert da["sha256"] == db["sha256"] and C.digest_error(da, db) == 0.0
    dc = C.output_digest([a[0] + 1e-3])
    assert dc["sha256"] != da["sha256"]
    assert C.digest_error(dc, da) == pytest.approx(1e-3, rel=1e-3)  # at the element 0.0
    assert C.digest_error(C.output_digest([torch.ones(3)]), da) == math.inf


def _measurements(**changes):
    m = {"resized": None, "output_shapes": [[4]], "finite": True, "nonfinite_fraction": 0.0,
         "mutated_inputs": [], "deterministic": {"bitwise": True, "error": 0.0},
         "stochastic_error": 0.0, "input_sensitivity": [{"label": "input 0", "fraction": 0.9}],
         "weight_sensitivity": None, "zero_fraction": 0.1, "constant_fraction": 0.2,
         "affine": [{"output": 0, "input": 0, "tensor": 0.0, "channel": None}],
         "ablation": {"tried": 3, "dead": []}, "aten_ops": ["aten.relu", "aten.mul"],
         "tolerance": {"tol": 1e-4, "noise": 1e-8, "within_cap": True, "cap": 1e-2,
                       "dtype": "float32"},
         "timing": {"device": "cpu", "eager_ms": 1.0}}
    m.update(changes)
    return m


def test_judge_flags_and_skips():
    checks = C.judge(_measurements())
    passed, flags = C.summarize(checks)
    assert flags == ["not_affine"] and not passed  # relu in the trace, yet exactly affine
    assert checks["weight_sensitive"]["passed"] is None  # no parameters: skipped
    assert checks["runtime"]["passed"] is None and checks["launch_overhead"]["passed"] is None
    # only affine ops traced: affine by construction passes
    ok = C.judge(_measurements(aten_ops=["aten.mul", "aten.add", "aten.view"]))
    assert C.summarize(ok) == (True, [])
    cuda = C.judge(_measurements(aten_ops=["aten.mul"], timing={
        "device": "cuda", "eager_ms": 0.05, "host_ms": 0.045, "launch_ratio": 0.9}))
    assert C.summarize(cuda)[1] == ["runtime", "launch_overhead"]
    syncing = C.judge(_measurements(aten_ops=["aten.mul"], timing={
        "device": "cuda", "eager_ms": 0.5, "host_ms": 0.5, "launch_ratio": 1.0, "host_syncs": 2}))
    assert syncing["launch_overhead"]["passed"] is None and syncing["runtime"]["passed"]
    bad = C.judge(_measurements(aten_ops=["aten.mul"], stochastic_error=0.3, zero_fraction=1.0,
                                ablation={"tried": 2, "dead": ["line 3: x"]},
                                deterministic={"bitwise": False, "error": 1e-6}))
    assert C.summarize(bad)[1] == ["not_stochastic", "not_near_zero", "no_dead_ops"]
    assert "not bitwise" in bad["deterministic"]["detail"]
    assert C.summarize(bad, gating=("runs",)) == (True, [])


def test_judge_inductor():
    assert C.judge_inductor(None, 1.0, 1e-4)["passed"] is None
    assert C.judge_inductor({"error": "boom"}, 1.0, 1e-4)["passed"] is False
    good = C.judge_inductor({"error_vs_eager": 1e-6, "ms": 0.5}, 1.0, 1e-4)
    assert good["passed"] and good["value"] == pytest.approx(2.0)
    assert C.judge_inductor({"error_vs_eager": 1e-2, "ms": 0.5}, 1.0, 1e-4)["passed"] is False


def test_compute_and_affine_op_classes():
    ops = ["aten.view", "aten.add", "aten.clone", "aten.mul_", "aten._softmax"]
    assert C.compute_ops(ops) == ["aten.add", "aten.mul_", "aten._softmax"]
    assert not C.affine_by_construction(ops)
    assert C.affine_by_construction(ops[:4])


SOURCE = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        """docstring is never removed"""
        b = x.shape[0]
        unused = torch.exp(x)  # a comment survives
        x = self.lin(x).contiguous()
        x = F.relu(x) * 2
        x = x.clamp(min=0.0).view(b, -1)
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(2, 8)]


def get_init_inputs():
    return []
'''


def test_ablations_one_change_each():
    variants = ablations(SOURCE)
    labels = [v["label"] for v in variants]
    assert labels == [
        "line 14: remove `unused = torch.exp(x) # a comment survives`",
        "line 15: remove `x = self.lin(x).contiguous()`",
        "line 16: remove `x = F.relu(x) * 2`",
        "line 17: remove `x = x.clamp(min=0.0).view(b, -1)`",
        "line 14: `torch.exp(x)` -> `x`",
        "line 15: `self.lin(x)` -> `x`",
        "line 16: `F.relu(x)` -> `x`",
        "line 17: `x.clamp(min=0.0)` -> `x`",
        "line 18: `torch.softmax(x, dim=-1)` -> `x`",
    ]
    bypass_relu = variants[6]["source"]
    assert "x = x * 2" in bypass_relu and "# a comment survives" in bypass_relu
    assert sum(a != b for a, b in zip(SOURCE.splitlines(), bypass_relu.splitlines())) == 1
    removed = variants[0]["source"].splitlines()[13]
    assert removed.strip() == "pass"
    for v in variants:
        compile(v["source"], "<variant>", "exec")
    assert len(ablations(SOURCE, max_variants=3)) == 3
    assert ablations("def f(:\n") == [] and ablations("x = 1\n") == []


def test_a_module_built_and_applied_in_one_line_is_not_replaced_by_its_argument():
    """``Quantizer(8, 2)(x)``: the inner call makes a callable; its first argument (8) cannot
    stand in for it (``8(x)``, a variant that cannot run). The calls inside its argument are
    ablated as anywhere else."""
    source = SOURCE.replace("return torch.softmax(x, dim=-1)",
                            "return Quantizer(8, 2)(torch.softmax(x, dim=-1))")
    labels = [v["label"] for v in ablations(source)]
    assert not any("`Quantizer(8, 2)` ->" in label for label in labels), labels
    assert "line 18: `torch.softmax(x, dim=-1)` -> `x`" in labels
    for v in ablations(source):
        compile(v["source"], "<variant>", "exec")


def test_roofline_table_and_fallback():
    peaks, source = device_peaks("NVIDIA H100 80GB HBM3")
    assert source == "table:H100" and peaks["bandwidth"] == 3.35e12
    assert device_peaks("NVIDIA H200")[1] == "table:H200"
    assert device_peaks("NVIDIA H100 PCIe")[1] == "table:H100 PCIe"
    assert device_peaks("Mystery GPU")[1] == "fallback:generic"
    # 1 GB moved on an H100 is ~0.3 ms, far above 1 MFLOP of compute: memory-bound
    r = roofline(10**6, 10**9, dtype="float32", device_name="NVIDIA H100", eager_ms=0.6)
    assert r["bound"] == "memory" and r["roofline_ms"] == pytest.approx(1e9 / 3.35e12 * 1e3)
    assert r["headroom"] == pytest.approx(0.6 / r["roofline_ms"])
    big = roofline(2 * 4096**3, 3 * 4 * 4096**2, dtype="bfloat16", device_name="H100")
    assert big["bound"] == "compute" and big["headroom"] is None
    assert big["compute_ms"] == pytest.approx(2 * 4096**3 / 989e12 * 1e3)
    # float32 is bounded by TF32 tensor cores: no honest kernel can beat the bound
    fp32 = roofline(2 * 4096**3, 3 * 4 * 4096**2, dtype="float32", device_name="H100")
    assert fp32["compute_ms"] == pytest.approx(2 * 4096**3 / 494e12 * 1e3)


def test_difficulty_is_monotone_in_its_terms():
    one = difficulty(["aten.relu"], inductor_speedup=1.0, headroom=50)
    many = difficulty([f"aten.op{i}" for i in range(12)] * 2, inductor_speedup=3.0, headroom=1.5)
    assert one["tier"] == "easy" and many["tier"] == "hard"
    assert 0 <= one["score"] < many["score"] <= 1
    mid = difficulty(["aten.mm", "aten.add", "aten.relu"])
    assert mid["terms"]["inductor"] == 0.5 and mid["terms"]["headroom"] == 0.5


@pytest.mark.parametrize("chunk", [7, 64])
def test_statistics_over_blocks_equal_the_whole_tensor_ones(monkeypatch, chunk):
    """Every measurement gives the same answer when it walks the tensors in small blocks
    (how a 1.6e9-element output is measured without a 12.8 GB fp64 copy); an affine fit's
    residual, computed in fp32 where the tensors are, to fp32's rounding."""
    import math

    import torch

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 5, 9, generator=gen)
    y = 2.0 * x + 0.5 + 1e-3 * torch.randn(6, 5, 9, generator=gen)
    y_alt = y.clone()
    y_alt[1, 2, 3] += 0.5
    odd = y.clone()
    odd[0, 0, :3] = torch.tensor([math.nan, math.inf, -math.inf])
    strided = y.transpose(0, 2)
    x2 = torch.randn(6, 5, 9, generator=gen)
    y2 = 2.0 * x2 + 0.5

    def measure():
        return {
            "max": C.max_error([y_alt, odd], [y, odd]),
            "mismatch": C.mismatch_fraction([y_alt, strided], [y, strided.contiguous()], 1e-3),
            "zero": C.zero_fraction([y, odd], 0.3),
            "constant": C.constant_fraction([y.round(), odd], 0.1),
            "affine": C.affine_residual([x, x2], [y, y2]),
            "affine_channel": C.affine_residual([x, x2], [y, y2], 1),
            "equal": (C.bitwise_equal([odd], [odd.clone()]), C.bitwise_equal([y], [y_alt])),
            "digest": C.output_digest([odd, strided])["sha256"],
            "stats": C.output_stats([odd], 1e-3),
        }

    whole = measure()
    monkeypatch.setattr(C, "CHUNK", chunk)
    blocks = measure()
    assert blocks.keys() == whole.keys()
    for key in whole:
        if key == "stats":
            for a, b in zip(blocks[key], whole[key]):
                assert a.keys() == b.keys()
                for k in a:
                    assert a[k] == (b[k] if isinstance(b[k], str) else
                                    pytest.approx(b[k], rel=1e-12, abs=1e-12, nan_ok=True)), k
        elif key in ("digest", "equal"):
            assert blocks[key] == whole[key], key
        elif key == "constant":  # the constant is the median of an even sample: close, not equal
            assert blocks[key] == pytest.approx(whole[key], abs=0.05)
        elif key.startswith("affine"):  # fp32 blocks, fp64 sums: fp32's rounding of a residual
            assert blocks[key] == pytest.approx(whole[key], abs=2e-7), key
        else:
            assert blocks[key] == pytest.approx(whole[key], rel=1e-9, abs=1e-12), key
    assert whole["equal"] == (True, False)
    assert whole["max"] > 0.1 and whole["affine"] < 1e-2


@pytest.mark.parametrize("case", ["affine", "offset", "relu", "curved", "per_channel",
                                  "large", "half", "fp64", "steep_zero_crossing", "overflow"])
def test_affine_fits_in_working_precision_match_their_fp64_definition(case):
    """``affine_residuals`` in fp32 blocks (fp64 sums) against the same fit on fp64 copies: the
    residuals agree to fp32's rounding of ``1 + |y|`` (an exact fit reads ~1e-7, never a
    tolerance of 1e-4), an offset of 273 costs no precision, and non-affine outputs read the
    same error; fp64 tensors are fitted in fp64, and so is a residual fp32 reads near any
    tolerance (a steep output crossing zero) or not finite (squares past fp32's range)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    x1, x2 = (torch.randn(64, 16, 32, generator=gen) for _ in range(2))
    w = torch.randn(1, 16, 1, generator=gen)
    make = {"affine": lambda x: 2 * x + 1, "offset": lambda x: 273.15 + 0.2 * x,
            "relu": torch.relu, "curved": lambda x: 3 * x + 1e-3 * x * x,
            "per_channel": lambda x: w * x - 5, "large": lambda x: 1e6 * x + 1e7,
            "half": lambda x: 2 * x, "fp64": lambda x: 2 * x + 1,
            # per-channel slopes of 1e4 crossing zero: fp32's rounding of the prediction's
            # cancelling terms would read 1e-4; and squares past fp32's range
            "steep_zero_crossing": lambda x: 1e4 * w * (x - 0.3 * w),
            "overflow": lambda x: 1e20 * x}[case]
    xs = [x1, x2]
    if case == "half":
        xs = [x.half() for x in xs]
    if case == "fp64":
        xs = [x.double() for x in xs]
    ys = [make(x) for x in xs]
    got = C.affine_residuals(xs, ys, 1)
    want = C.affine_residuals([x.double() for x in xs], [y.double() for y in ys], 1)
    for a, b in zip(got, want):
        assert a == pytest.approx(b, abs=3e-7), (got, want)
    if case in ("steep_zero_crossing", "overflow"):  # taken again in fp64
        assert got == want and min(got) < 1e-4, (got, want)  # affine under fp32's floor
    if case == "fp64":
        assert got == want
    if case in ("relu", "curved"):
        assert got[0] > 1e-3
    if case in ("affine", "offset", "large", "half"):
        assert max(got) < 3e-7


def test_device_fingerprint_sees_any_one_bit_change(monkeypatch):
    """The GPU digest (wrapping sums of words, one weighted by index) changes with any word, in
    any block, and stays the same for the same bytes (run here on host tensors: same code)."""
    import torch

    monkeypatch.setattr(C, "CHUNK", 64)
    x = torch.randn(10, 37, generator=torch.Generator().manual_seed(1))
    base = C._device_fingerprint(x)
    assert base == C._device_fingerprint(x.clone()) == C._device_fingerprint(x.t().t())
    for pos in (0, 63, 64, 65, 369):
        y = x.clone().reshape(-1)
        y.view(torch.int32)[pos] ^= 1  # one bit of one element
        assert C._device_fingerprint(y.reshape(10, 37)) != base, pos
    swapped = x.clone().reshape(-1)
    swapped[[3, 4]] = swapped[[4, 3]]  # same words, other places
    assert C._device_fingerprint(swapped.reshape(10, 37)) != base
    across = x.clone().reshape(-1)
    across[[5, 69]] = across[[69, 5]]  # the same place in two blocks
    assert C._device_fingerprint(across.reshape(10, 37)) != base
    assert C._device_fingerprint(torch.zeros(4)) != C._device_fingerprint(-torch.zeros(4))


def test_statistics_kept_on_the_device_match_their_plain_definitions(monkeypatch):
    """The running counts, sums and extremes stay tensors until the end (one read per
    statistic, not one per block): the numbers are those of the plain definitions."""
    gen = torch.Generator().manual_seed(1)
    y = torch.randn(50, generator=gen).double()
    y[[3, 17]] = math.nan
    y[[5, 40]] = torch.tensor([math.inf, -math.inf], dtype=torch.float64)
    monkeypatch.setattr(C, "CHUNK", 7)
    finite = y[torch.isfinite(y)]
    (stats,) = C.output_stats([y], 1e-3)
    assert stats["finite_fraction"] == pytest.approx(46 / 50)
    assert stats["mean"] == pytest.approx(float(finite.mean()), rel=1e-12)
    assert stats["std"] == pytest.approx(float(finite.std()), rel=1e-12)
    assert (stats["min"], stats["max"]) == (float(finite.min()), float(finite.max()))
    assert stats["abs_mean"] == pytest.approx(float(finite.abs().mean()), rel=1e-12)
    sample = y[:: -(-50 // 7)]  # the constant: the median of an even sample of CHUNK elements
    c = float(sample[~torch.isnan(sample)].median())
    kept = y[~torch.isnan(y)]  # 48 elements, the infinities among them
    expected = float(((c - kept).abs() <= 0.5 * (1 + kept.abs())).sum()) / 48
    assert C.constant_fraction([y], 0.5) == pytest.approx(expected, rel=1e-12)
    other = y.clone()
    other[3] = 0.0  # a NaN on one side only
    assert C.max_error([other], [y]) == math.inf
    assert not C.bitwise_equal([other], [y]) and C.bitwise_equal([y], [y.clone()])
    assert not C.all_finite([y]) and C.all_finite([finite])
    assert C.zero_fraction([torch.zeros(20), torch.ones(20)], 1e-3) == 0.5


def test_the_validators_timing_settings_reach_the_measurement(monkeypatch):
    """``timing_ci_pct``/``timing_cap_ms`` (ValidateConfig) travel in the workers' payload and
    set the confidence target and time cap of each timed forward; absent, the defaults."""
    from kernelmill.validate import probe_device as PD
    from kernelmill.validate import timer as T
    from kernelmill.validate.settings import ValidateConfig

    seen = []
    monkeypatch.setattr(T, "measure", lambda fn, device, **kw: seen.append(kw) or {})
    model, inputs = torch.nn.Identity(), [torch.ones(3)]
    PD._time_forward(model, inputs, "cpu", timing={"ci_target_pct": 3.0, "cap_ms": 250.0})
    PD._time_forward(model, inputs, "cpu")
    assert (seen[0]["ci_target_pct"], seen[0]["cap_ms"]) == (3.0, 250.0)
    assert (seen[1]["ci_target_pct"], seen[1]["cap_ms"]) == \
        (PD.VALIDATE_TIMING["ci_target_pct"], PD.VALIDATE_TIMING["cap_ms"])
    cfg = ValidateConfig()
    assert (cfg.timing_ci_pct, cfg.timing_cap_ms) == (PD.VALIDATE_TIMING["ci_target_pct"],
                                                      PD.VALIDATE_TIMING["cap_ms"])


@pytest.mark.parametrize("make", [
    lambda: torch.randn(1, 5, 1).expand(6, 5, 7),  # a bias broadcast to the output's shape
    lambda: torch.randn(7, 5, 6).permute(2, 1, 0),  # a transpose
    lambda: torch.randn(1, 1, 1).expand(6, 5, 7)])
def test_blocks_of_a_tensor_not_viewable_flat_copy_a_block_at_a_time(make):
    """Statistics run over aligned flat blocks; an expanded or transposed tensor is copied one
    block at a time (a bias expanded to a 1.6e9-element output is no full-size copy), in the
    same row-major order as a flat view."""
    from kernelmill.validate.checks import _blocks

    x, y = make(), torch.randn(6, 5, 7)
    for chunk in (1, 4, 7, 35, 36, 1000):
        got = list(_blocks(x, y, chunk=chunk))
        assert torch.equal(torch.cat([a for a, _ in got]), x.reshape(-1))
        assert torch.equal(torch.cat([b for _, b in got]), y.reshape(-1))
        assert max(a.numel() for a, _ in got) <= max(chunk, 7)  # a block, or one innermost row
