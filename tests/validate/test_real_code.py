"""The validator's checks for patterns real model code carries (validate/realcode/).

The defective fixtures of each family (tests/fixtures/problems_defective/, with ``expect:`` and
``reason:`` lines) run in test_validate_probe.py; here the healthy controls must pass every check,
and the measurements are checked on small direct cases.
"""
import math

from conftest import FIXTURES

import pytest
import torch
import torch.nn as nn
from kernelmill.validate import checks as C
from kernelmill.validate import realcode as R
from kernelmill.validate.ablation import ablations
from kernelmill.validate.probe import probe_problem

HEALTHY = sorted((FIXTURES / "problems_healthy").glob("*.py"))
REAL_CODE_CHECKS = ("no_dead_branches", "constant_params_used", "no_dead_work",
                    "stable_exact_outputs", "unique_writes", "contrast", "no_call_history")


@pytest.mark.parametrize("path", HEALTHY, ids=lambda p: p.stem)
def test_healthy_control_passes_every_check(path):
    source = path.read_text()
    m = probe_problem({"source": source, "device": "cpu", "seed": 0,
                       "ablations": ablations(source)})
    checks = C.judge(m)
    passed, flags = C.summarize(checks)
    assert passed, {f: checks[f]["detail"] for f in flags}
    # measured where they apply: every control has sub-modules, varies with its inputs and
    # returns to its caller with no state kept
    for name in ("no_dead_branches", "unique_writes", "contrast", "no_call_history"):
        assert checks[name]["passed"] is True, (name, checks[name])


def _linear_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8))


def test_a_zero_branch_is_dead_and_a_live_one_is_not():
    class Adapter(nn.Module):
        def __init__(self):
            super().__init__()
            self.base, self.up = nn.Linear(8, 8), nn.Linear(8, 8, bias=False)
            nn.init.zeros_(self.up.weight)

        def forward(self, x):
            return self.base(x) + self.up(x)

    torch.manual_seed(0)
    x = [torch.randn(4, 8)]
    model = Adapter()
    ref = R.forward(model, x, 0)
    found = R.submodule_bypass(model, x, ref, 0, 1e-4, 1)
    assert [d.split(" ")[0] for d in found["dead"]] == ["up"]
    live = _linear_model()
    assert R.submodule_bypass(live, x, R.forward(live, x, 0), 0, 1e-4, 1)["dead"] == []


def test_redraw_keeps_sign_and_scale_of_constants():
    gen = torch.Generator().manual_seed(0)
    var, tiny, zero = torch.ones(64), torch.full((64,), -1e-6), torch.zeros(16, 4)
    for t in (var, tiny, zero):
        R.redraw(t, gen)
    assert (var > 0).all() and var.std() > 0.1
    assert (tiny < 0).all() and tiny.abs().max() < 1e-5
    assert 0.2 < float(zero.std()) < 1.0  # about 1/sqrt(fan_in) = 0.5


def test_constant_tensors_finds_exactly_constant_ones():
    model = nn.LayerNorm(8)
    names = [n for n, _t in R.constant_tensors(model)]
    assert names == ["weight", "bias"]
    assert R.constant_tensors(nn.Linear(4, 4)) == []


def _windows(step: int, write) -> torch.Tensor:
    """8 zeros, ``write`` into their windows of 4 at ``step`` (a view PyTorch cannot tell
    overlap-free)."""
    zeros = torch.zeros(8)
    write(zeros.unfold(0, 4, step))
    return zeros


@pytest.mark.parametrize("write, repeats", [
    (lambda i: torch.zeros(8).index_put_((i,), torch.arange(6.0)), 2),
    (lambda i: torch.zeros(8).index_put_((i,), torch.arange(6.0), accumulate=True), 0),
    (lambda i: torch.zeros(8).index_put_((i,), torch.tensor(1.0)), 0),
    (lambda i: torch.zeros(8, 2).index_copy(0, i, torch.ones(6, 2)), 2),
    (lambda i: torch.zeros(8).scatter(0, i, torch.arange(6.0)), 2),
    (lambda i: torch.zeros(8).scatter_add(0, i, torch.arange(6.0)), 0),
    (lambda i: torch.zeros(8).scatter(0, i, 1.0), 0),
    (lambda i: torch.zeros(8).index_copy(0, torch.arange(6), torch.ones(6)), 0),
    # a view over shared memory (windows of 4 at a step of 2: places 2-5 in two windows each)
    (lambda i: _windows(2, lambda v: v.copy_(torch.arange(12.0).view(3, 4))), 4),
    (lambda i: _windows(4, lambda v: v.copy_(torch.arange(8.0).view(2, 4))), 0),  # disjoint
    (lambda i: _windows(2, lambda v: v.copy_(torch.ones(3, 4))), 0),  # every write agrees
    (lambda i: _windows(2, lambda v: v.fill_(1.0)), 0),
    (lambda i: _windows(2, lambda v: v.add_(torch.arange(12.0).view(3, 4))), 4),
])
def test_duplicate_writes_are_found_only_where_the_winner_is_undefined(write, repeats):
    index = torch.tensor([0, 1, 1, 3, 5, 5])

    class Write(nn.Module):
        def forward(self, i):
            return write(i)

    found = R.duplicate_writes(Write(), [index], 0)
    assert (len(found) == 1 and f": {repeats} place(s)" in found[0]) if repeats else not found


def test_exact_outputs_flag_ties_and_pass_separated_or_untouched_values():
    class Pick(nn.Module):
        def __init__(self, how):
            super().__init__()
            self.how = how
            self.fc = nn.Linear(16, 16)

        def forward(self, x):
            if self.how == "input":  # an argmax of the inputs themselves: nothing to round
                return x.argmax(dim=-1)
            h = self.fc(x)
            if self.how == "tied":  # top-k among exact ties: the order is the implementation's
                return torch.topk(h.round(), 4, dim=-1).indices
            return h.argmax(dim=-1)

    torch.manual_seed(0)
    x = [torch.randn(64, 16) * 2]
    for how, unstable in (("tied", True), ("separated", False), ("input", False)):
        model = Pick(how)
        ref = R.forward(model, x, 0)
        found = R.exact_outputs(model, x, ref, 0, 1e-4, 1, "cpu")
        assert (found["jittered_changed"]["changed"] > 0) == unstable, how
        verdict = C.judge_exact_outputs(found)
        assert verdict["passed"] is not unstable and "\n" not in verdict["detail"], how
        if unstable:  # one line: what is graded exactly, why it fails, how much of it
            changed = found["jittered_changed"]["changed"]
            assert verdict["detail"].startswith("integer/boolean outputs (int64) are graded "
                                                "exactly but are decided by near-tied float")
            assert f"{changed} of {64 * 4} elements" in verdict["detail"]
    assert R.exact_outputs(_linear_model(), [torch.randn(2, 8)], [torch.randn(2)], 0, 1e-4, 1,
                           "cpu") is None


def test_contrast_is_magnitude_slack_over_variation_across_inputs():
    y, z = torch.randn(1000), torch.randn(1000)
    healthy = R.contrast([y], [z], 1e-4)[0]
    assert healthy["ratio"] < 1e-3
    offset = R.contrast([273.15 + 0.2 * y], [273.15 + 0.2 * z], 1e-4)[0]
    assert offset["ratio"] > 0.1  # 273 x 1e-4 of slack next to 0.2 of variation
    assert math.isclose(offset["informative"], 0.2, rel_tol=0.15)



def test_contrast_reads_the_same_in_working_precision_as_in_fp64(monkeypatch):
    """The squared changes summed from fp32 squares agree with the fp64 ones; a change that is
    not finite (a NaN, an infinity, an fp32 square past its range) is summed again exactly,
    over the finite changes alone."""
    from kernelmill.validate.realcode import precision

    monkeypatch.setattr(C, "CHUNK", 500)
    g = torch.Generator().manual_seed(3)
    y, z = torch.randn(40, 60, generator=g) * 30, torch.randn(40, 60, generator=g) * 30
    for a, b in ((y, z), (y.t(), z.t()), (y.double(), z), (y.bfloat16(), z.bfloat16())):
        fast, n = precision._squared_change(a, b, exact=False)
        exact, m = precision._squared_change(a, b, exact=True)
        assert n == int(m) == a.numel() and float(fast) == pytest.approx(float(exact), rel=1e-6)
    broken = y.clone()
    broken[0, :3] = torch.tensor([math.nan, math.inf, 3e30])  # 3e30 squared: past fp32
    fast, _ = precision._squared_change(broken, z, exact=False)
    assert not math.isfinite(float(fast))
    entry = R.contrast([broken], [z], 1e-4)[0]
    d = (broken.double() - z.double()).reshape(-1)[2:]  # the NaN and the infinity left out
    assert entry["informative"] == pytest.approx(math.sqrt(float((d * d).mean()) / 2), rel=1e-9)
    # changes whose fp32 squares fall below fp32's normal numbers are summed again in fp64
    small_y, small_z = y * 1e-21, z * 1e-21
    entry = R.contrast([small_y], [small_z], 1e-4)[0]
    d = (small_y.double() - small_z.double()).reshape(-1)
    assert entry["informative"] == pytest.approx(math.sqrt(float((d * d).mean()) / 2), rel=1e-6)

def test_liveness_sees_a_slice_and_not_relu_or_max_pool():
    class Last(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 16)

        def forward(self, x):
            return self.fc(x)[:, -1]

    class Pooled(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(2, 4, 3, padding=1)

        def forward(self, x):
            return torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2).amax(dim=1)

    torch.manual_seed(0)
    last = R.liveness(Last(), [[torch.randn(2, 8, 16)]], 0, 1)
    assert last["dead_share"] > 0.8
    pooled = R.liveness(Pooled(), [[torch.randn(2, 2, 8, 8)], [torch.randn(2, 2, 8, 8)]], 0, 1)
    assert pooled["dead_share"] == 0.0


@pytest.mark.parametrize("kind", ["mv", "cdist", "rfft"])
def test_liveness_counts_work_torch_has_no_flop_formula_for(kind):
    """Matrix-vector products (``h @ w`` with a vector ``w``), distances and FFTs are work too:
    scoring every position and returning the last one's leaves most of it dead."""
    class Scored(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(64))
            self.keys = nn.Parameter(torch.randn(32, 64))

        def forward(self, h):
            if kind == "mv":
                return (h @ self.w)[-1:]
            if kind == "cdist":
                return torch.cdist(h, self.keys)[-1]
            return torch.fft.rfft(h, dim=-1).abs()[-1]

    torch.manual_seed(0)
    found = R.liveness(Scored(), [[torch.randn(256, 64)]], 0, 1)
    assert found is not None and found["dead_share"] > 0.9, found


def test_judge_skips_what_was_not_measured():
    m = {"tolerance": {"tol": 1e-4, "dtype": "float32"},
         "deterministic": {"error": 0.0}, "stochastic_error": 0.0}
    checks = C.judge_real_code(m, C.DEFAULT_THRESHOLDS)
    assert set(checks) == set(REAL_CODE_CHECKS)
    assert all(c["passed"] is None for c in checks.values())
    m["liveness"] = {"error": "RuntimeError: boom"}
    assert "boom" in C.judge_real_code(m, C.DEFAULT_THRESHOLDS)["no_dead_work"]["detail"]


def test_a_constant_that_cancels_is_reported_but_does_not_gate():
    from kernelmill.validate.runner import NON_GATING

    class Attention(nn.Module):  # a key bias, zero as Hugging Face's init leaves it
        def __init__(self):
            super().__init__()
            self.q, self.k = nn.Linear(16, 16), nn.Linear(16, 16)
            nn.init.zeros_(self.k.bias)

        def forward(self, x):
            return torch.softmax(self.q(x) @ self.k(x).transpose(-1, -2), dim=-1) @ x

    torch.manual_seed(0)
    model, x = Attention(), [torch.randn(2, 8, 16)]
    found = R.constant_parameters(model, x, R.forward(model, x, 0), 0, 1e-4, 1)
    assert found["unused"] == ["k.bias (constant 0)"]
    assert "constant_params_used" in NON_GATING


def test_reduced_precision_rounds_only_matmul_operands():
    model = _linear_model()
    x = [torch.randn(16, 8)]
    ref = R.forward(model, x, 0)
    low = R.reduced_precision(model, x, 0, "bfloat16")
    assert 1e-4 < C.max_error(low, ref) < 5e-2  # bf16 operands: about 3e-3
    assert R.reduced_precision(nn.Tanh(), x, 0, "bfloat16") is None  # no matmul-class call


def test_contrast_judges_the_variation_and_rounded_operands_on_inflated_tolerances():
    entries = [{"output": 0, "informative": 1.0, "magnitude": 1.0, "ratio": 1e-4}]
    th = C.DEFAULT_THRESHOLDS
    bf16 = {"dtype": "bfloat16", "error": 3e-3}
    fine = C.judge_contrast(entries, "float32", th, 1e-4, bf16)
    assert fine["passed"] is True and "bfloat16 fail it" in fine["detail"]
    # at the floor, rounded operands that pass are reported (the absolute floor's question) ...
    small = C.judge_contrast(entries, "float32", th, 1e-4, {"dtype": "bfloat16", "error": 5e-5})
    assert small["passed"] is True and "bfloat16 pass it" in small["detail"]
    # ... and fail a tolerance the calibration inflated
    inflated = C.judge_contrast(entries, "float32", th, 1e-2, bf16)
    assert inflated["passed"] is False and "100x the float32 floor" in inflated["detail"]
    offset = [{"output": 0, "informative": 0.2, "magnitude": 273.0, "ratio": 0.14}]
    assert C.judge_contrast(offset, "float32", th, 1e-4)["passed"] is False


def test_liveness_counts_a_call_by_its_live_output():
    class Attention(nn.Module):  # the averaged attention weights are returned and dropped
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(16, 2, batch_first=True)

        def forward(self, x):
            out, _weights = self.attn(x, x, x)
            return out

    torch.manual_seed(0)
    found = R.liveness(Attention(), [[torch.randn(2, 64, 16)]], 0, 1)
    assert found["dead_share"] < 0.05, found


def test_judges_skip_measurements_that_failed_instead_of_raising():
    """A measurement the probe could not make is ``{"error": reason}`` (``forwards._measured``):
    the contrast and buffer judges skip it with the reason, never raise in the parent."""
    th = C.DEFAULT_THRESHOLDS
    failed = {"error": "RuntimeError: boom"}
    verdict = C.judge_contrast([{"output": 0, "ratio": 0.01, "magnitude": 1.0,
                                 "informative": 1.0}], "float32", th, 1e-3, failed)
    assert verdict["passed"] is True and "rounded" not in verdict["detail"]
    assert C.judge_contrast(failed, "float32", th, 1e-3, None)["passed"] is None
    skipped = C.judge_buffers(failed, th)
    assert skipped["passed"] is None and "boom" in skipped["detail"]


def test_a_float_buffer_of_indices_is_left_out_and_a_perturbation_that_breaks_forward_counts():
    """A permutation kept as a float buffer is not perturbed (out-of-range indices; on a GPU a
    device-side assert); the probe still completes and judges the other buffers."""
    source = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
              "    def __init__(self):\n        super().__init__()\n"
              "        self.register_buffer('perm', torch.randperm(256).float())\n"
              "        self.register_buffer('scale', torch.rand(256) + 0.5)\n\n"
              "    def forward(self, x):\n        return x[:, self.perm.long()] * self.scale\n\n\n"
              "def get_inputs():\n    return [torch.randn(64, 256)]\n\n\n"
              "def get_init_inputs():\n    return []\n")
    m = probe_problem({"source": source, "device": "cpu", "seed": 0, "ablations": None})
    measured = m["buffer_sensitivity"]
    assert "error" not in measured, measured
    assert [e["label"] for e in measured["entries"]] == ["buffer scale"]
    assert C.judge(m)["buffer_sensitive"]["passed"] is True


def test_honest_noise_reaches_every_accumulating_op_and_no_op_that_moves_or_places_values():
    from kernelmill.validate.realcode.noise import _computed

    aten = torch.ops.aten
    # accumulating: a matrix-vector and a dot product (no FLOP formula in torch), a matmul, a sum
    for op in (aten.mv.default, aten.dot.default, aten.mm.default, aten.sum.dim_IntList,
               aten.avg_pool2d.default):
        assert _computed(op), op
    # moved, selected, placed or elementwise: a causal mask's triu, padding, gather, max pooling
    for op in (aten.triu.default, aten.constant_pad_nd.default, aten.gather.default,
               aten.max_pool2d_with_indices.default, aten.cat.default, aten.mul.Tensor,
               aten.full_like.default, aten._to_copy.default):
        assert not _computed(op), op


CAUSAL_ARGMAX = """
import torch
import torch.nn as nn

T = 12


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        mask = torch.triu(torch.full((T, T), float("-inf")), 1)
        att = torch.softmax(q @ k.transpose(-1, -2) / 4.0 + mask, dim=-1)
        return (att @ v).argmax(-1)


def get_inputs():
    return [torch.randn(4, T, 16)]


def get_init_inputs():
    return []
"""


def test_a_causal_mask_stays_exact_under_honest_noise():
    m = probe_problem({"source": CAUSAL_ARGMAX, "device": "cpu", "seed": 0, "ablations": None})
    exact = m["exact_outputs"]
    # the -inf mask gets no noise (it is placed, not computed): only near-ties may flip
    assert exact["jittered_changed"]["fraction"] < 0.1, exact


def test_a_guard_read_only_on_the_host_leaves_dead_work_dead():
    class Guarded(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(16, 16)

        def forward(self, x):
            h = self.proj(x)
            if torch.isinf(h).any():  # steers the host only
                h = h.clamp(-1e4, 1e4)
            return h[:, -1]

    class Masked(Guarded):
        def forward(self, x):
            h = self.proj(x)
            return (h * (h > 0).float())[:, -1] + (h > 0).sum()  # the comparison reaches it

    torch.manual_seed(0)
    draws = [[torch.randn(4, 8, 16)] for _ in range(3)]
    guarded = R.liveness(Guarded(), iter(draws), 0, 0, copies=True)
    masked = R.liveness(Masked(), iter(draws), 0, 0, copies=True)
    assert guarded["dead_share"] > 0.8, guarded
    assert masked["dead_share"] < 0.2, masked


def test_dead_slices_are_whole_channels_or_positions_and_not_a_causal_triangle():
    from kernelmill.validate.realcode.liveness import _dead_slices

    channels = torch.ones(2, 8, 5, dtype=torch.bool)
    channels[:, 5:] = False  # three of eight channels never read
    assert _dead_slices(channels) == pytest.approx(3 / 8)
    causal = torch.ones(16, 16, dtype=torch.bool).tril()  # half dead, no row or column whole
    assert _dead_slices(causal) == 0.0
    assert _dead_slices(torch.ones(4, 4, dtype=torch.bool)) == 0.0


SITES = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(32, 32)
        self.branch = nn.Linear(32, 32)
        self.weight = nn.Parameter(torch.ones(32))  # a gain of ones: live once drawn again
        self.gamma = nn.Parameter(torch.full((32,), {gamma}))

    def forward(self, x):
        h = self.proj(x)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
        return h + self.gamma * self.branch(h)


def get_inputs():
    return [torch.randn(64, 32)]


def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("gamma, dead", [(1e-6, True), (1.0, False)])
def test_an_inline_branch_scaled_to_nothing_is_a_dead_call_site(gamma, dead):
    source = SITES.replace("{gamma}", repr(gamma))
    m = probe_problem({"source": source, "device": "cpu", "seed": 0, "ablations": None})
    sites = m["submodule_bypass"]["dead_sites"]
    # the branch's linear (or its scaling) is dead only at a layer-scale of 1e-6; the epsilon and
    # the gain of ones never are
    assert bool(sites) is dead, sites
    assert not any("1e-6" in s and "add" in s for s in sites), sites
    if dead:
        assert C.judge(m)["no_dead_branches"]["passed"] is False


def _from_source(source: str):
    """A model built from ``source`` as the validator loads a problem (its lines are sites)."""
    from kernelmill.validate.measure import load_namespace

    ns = load_namespace(source, "reference")
    torch.manual_seed(0)
    model = ns["Model"]()
    torch.manual_seed(1)
    return model, list(ns["get_inputs"]())


INLINE_ADAPTER = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.base = nn.Linear(16, 16)
        self.a = nn.Parameter(torch.randn(2, 16) * 0.3)
        self.b = nn.Parameter(torch.zeros(16, 2) if ZERO else torch.randn(16, 2))
        self.ln = nn.LayerNorm(16)
        self.shift = nn.Parameter(torch.zeros(16))

    def forward(self, x):
        h = self.ln(self.base(x)) + self.shift
        return h + x @ self.a.T @ self.b.T

def get_inputs():
    return [torch.randn(8, 16)]
"""


def test_work_killed_by_its_initialization_is_dead_and_a_norm_of_ones_is_not():
    """``sites.dead_sites``: a call site dead on the declared constants alone (an inline adapter
    whose second factor starts at zero) is dead at initialization; a LayerNorm of weight ones
    and bias zero, and an added zero bias, zeroed, change the output in every state."""
    from kernelmill.validate.realcode.constants import perturbed_constants
    from kernelmill.validate.realcode.sites import dead_sites

    for zero_factor in (True, False):
        model, x = _from_source(f"ZERO = {zero_factor}\n" + INLINE_ADAPTER)
        alt = perturbed_constants(model, 3)
        labels, tried = dead_sites(model, alt, x, R.forward(model, x, 0),
                                   R.forward(alt, x, 0), 0, 1e-4)
        assert tried >= 3
        at_init = [label for label in labels if "dead at initialization" in label]
        assert bool(at_init) == zero_factor, labels
        assert all("matmul" in label for label in labels), labels


ZERO_QUERY = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(16, 16)
        nn.init.zeros_(self.q.weight)
        self.register_buffer("filled", torch.zeros(16, 16))

    def forward(self, x):
        self.filled.copy_(torch.eye(16) * 2)  # zero as declared, written before its use
        return torch.tanh(self.q(x)) * (x @ self.filled)

def get_inputs():
    return [torch.randn(8, 16)]
"""


def test_a_product_with_a_zero_parameter_is_dead_work_and_a_buffer_the_forward_fills_is_not():
    from kernelmill.validate.realcode.sites import dead_sites

    model, x = _from_source(ZERO_QUERY)
    labels, _ = dead_sites(model, None, x, R.forward(model, x, 0), None, 0, 1e-4)
    zero = [label for label in labels if "exactly zero as declared" in label]
    assert len(zero) == 1 and "`q.weight`" in zero[0] and "linear" in zero[0], labels


NORM_AFTER = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)
        self.ln = nn.LayerNorm(32)
        self.log_temperature = nn.Parameter(torch.tensor(0.3))

    def forward(self, x):
        keep = (x.abs().sum(-1, keepdim=True) > 0).to(x.dtype)  # admits every row drawn
        h = self.fc(x) * keep / torch.exp(self.log_temperature)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)  # counts, but under a LN
        if AFTER:
            g = self.ln(h)
            h = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + 1e-6)  # redundant
        return torch.tanh(h)

def get_inputs():
    return [torch.randn(16, 32)]
"""


def test_a_normalization_of_what_is_normalized_already_is_redundant_and_others_are_not():
    """``sites``: a rescaling by a statistic of its own operand, skipped up to one factor,
    within tolerance is a redundant normalization: an RMS norm after a LayerNorm of weight one,
    and one before a LayerNorm (which undoes any scaling of a row); a mask computed from the
    inputs that admits every row, a scalar temperature, and an RMS norm whose scale reaches the
    output (through tanh) are not."""
    from kernelmill.validate.realcode.sites import dead_sites

    for after in (True, False):
        model, x = _from_source(f"AFTER = {after}\n" + NORM_AFTER)
        labels, _ = dead_sites(model, None, x, R.forward(model, x, 0), None, 0, 1e-4)
        redundant = sorted(label.split("`")[1].split("#")[0].strip() for label in labels
                           if "redundant normalization" in label)
        assert redundant == (["h = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + 1e-6)",
                              "h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)"]
                             if after else []), labels
        assert not any("* keep" in label or "temperature" in label for label in labels), labels


HEALTHY_SITES = {
    "a zero-initialized bias (BERT/GPT/ViT)": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 64)
        nn.init.zeros_(self.fc.bias)
        self.b = nn.Parameter(torch.zeros(64))
        self.w = nn.Parameter(torch.randn(64, 64) / 8)
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        nn.init.zeros_(self.conv.bias)

    def forward(self, x):
        h = torch.relu(F.linear(x, self.fc.weight, self.fc.bias)) + self.fc(x)
        h = torch.tanh(torch.addmm(self.b, h, self.w))
        return h + self.conv(h.view(8, 4, 4, 4)).view(8, 64)
""",
    "a norm clip that never bites on the draws": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 64)

    def forward(self, x):
        h = self.fc(x)
        return torch.tanh(h * (100 / h.norm(dim=-1, keepdim=True)).clamp(max=1))
""",
    "a guard mask of the non-empty rows": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 64)

    def forward(self, x):
        h = self.fc(x)
        return torch.tanh(h * (h.abs().sum(-1, keepdim=True) > 0).to(h.dtype))
""",
}


@pytest.mark.parametrize("name", sorted(HEALTHY_SITES))
def test_healthy_sites_are_not_dead(name):
    """A zero bias is added, not multiplied; a factor made through a clip or a test is not a
    rescaling by a statistic (what a kernel may skip there is what the draws never reach, which
    the sites do not judge)."""
    from kernelmill.validate.realcode.constants import perturbed_constants
    from kernelmill.validate.realcode.sites import dead_sites

    source = ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n" +
              HEALTHY_SITES[name] + "\ndef get_inputs():\n    return [torch.randn(8, 64)]\n")
    model, x = _from_source(source)
    alt = perturbed_constants(model, 3)
    labels, tried = dead_sites(model, alt, x, R.forward(model, x, 0),
                               R.forward(alt, x, 0) if alt is not None else None, 0, 1e-4)
    assert tried >= 1 and labels == [], labels


@pytest.mark.parametrize("freeze", ["no_grad", "inference_mode", "detach"])
def test_liveness_sees_work_a_forward_hides_from_autograd(freeze):
    """A frozen backbone (its forward under ``no_grad``, ``inference_mode`` or detached) whose
    head reads one position: its other positions are dead work all the same."""
    class Probe(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone, self.head = nn.Linear(16, 16), nn.Linear(16, 4)

        def forward(self, x):
            if freeze == "detach":
                feats = self.backbone(x).detach()
            else:
                with getattr(torch, freeze)():
                    feats = self.backbone(x)
            return self.head(feats[:, 0])

    torch.manual_seed(0)
    live = R.liveness(Probe(), [[torch.randn(2, 8, 16)]], 0, 1)
    backbone = next(o for o in live["ops"] if o["live"] < 1.0)
    assert backbone["live"] == pytest.approx(1 / 8)  # one position of eight
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()


def test_liveness_measures_a_forward_that_rewrites_a_saved_tensor_in_place():
    class Normalized(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 16)

        def forward(self, x):
            h = torch.sigmoid(self.fc(x))  # sigmoid saves its result for the backward
            h /= h.norm(dim=-1, keepdim=True)
            return h[:, :4]

    torch.manual_seed(0)
    live = R.liveness(Normalized(), [[torch.randn(8, 16)]], 0, 1)
    assert live is not None and live["ops"][0]["live"] == 1.0  # each row's norm reads all


def test_liveness_accounts_each_draw_alone_where_the_calls_change_with_the_data():
    """Experts a router hits differ between draws (calls of other shapes): each draw's own
    account decides, the least dead; a head reading the last token leaves most dead."""
    class Routed(nn.Module):
        def __init__(self, last: bool):
            super().__init__()
            self.last = last
            self.router = nn.Linear(16, 4)
            self.experts = nn.ModuleList(nn.Linear(16, 16) for _ in range(4))

        def forward(self, x):
            choice = self.router(x).argmax(-1)
            out = torch.zeros_like(x)
            for e, expert in enumerate(self.experts):
                hit = (choice == e).nonzero().squeeze(-1)
                if hit.numel():
                    out[hit] = expert(x[hit])
            return out[-1:] if self.last else out

    torch.manual_seed(0)
    draws = [[torch.randn(32, 16)] for _ in range(3)]
    dead = R.liveness(Routed(True), iter(draws), 0, 1)
    assert dead["calls_changed"] and dead["dead_share"] > 0.7
    live = R.liveness(Routed(False), iter(draws), 0, 1)
    assert live["calls_changed"] and live["dead_share"] == 0.0


def test_indices_beside_values_decide_only_where_read():
    from kernelmill.validate.realcode.exact import _decides

    class Router(nn.Module):
        def forward(self, x, read):
            values, index = x.max(dim=-1)
            return values * (index.float() if read else 1.0)

    class Pooled(nn.Module):
        def forward(self, x, read):
            return nn.functional.max_pool2d(x, 2, return_indices=True)[0]

    x = torch.randn(2, 3, 8, 8)
    assert _decides(Router(), [x, True], 0, True)[0]
    assert not _decides(Router(), [x, False], 0, True)[0]
    assert not _decides(Pooled(), [x, True], 0, True)[0]


class _Counted(nn.Module):
    """A call counter as a buffer or an attribute that changes the output only past a number
    of calls (``every``: a redraw every that many; ``after``: an anneal's floor reached)."""

    def __init__(self, every: int = 0, after: int = 0, as_buffer: bool = True,
                 before: bool = False, dtype=torch.int64):
        super().__init__()
        self.fc, self.every, self.after, self.before = nn.Linear(8, 8), every, after, before
        if as_buffer:
            self.register_buffer("calls", torch.tensor(0, dtype=dtype))
        else:
            self.calls = 0

    def forward(self, x):
        calls = int(self.calls)  # (``before``: tested before its increment)
        self.calls += 1
        calls = calls if self.before else int(self.calls)
        changed = (self.every and calls % self.every == 0) or (self.after and calls > self.after)
        return self.fc(x) * (2.0 if changed else 1.0)


@pytest.mark.parametrize("counted, moves", [
    ({"every": 1000}, True), ({"every": 1024, "as_buffer": False}, True),
    ({"after": 50_000}, True), ({"after": 10**9}, False), ({}, False),
    ({"every": 1000, "before": True}, True), ({"after": 30_000, "dtype": torch.int16}, True)])
def test_counters_a_call_moves_are_advanced_as_after_many_calls(counted, moves):
    torch.manual_seed(0)
    model = _Counted(**counted)
    found = R.advanced_counters(model, [torch.randn(4, 8)], 0, True)
    assert found["counters"] == ["calls"]
    assert (found["error"] > 0.1) is moves, found
    assert int(model.calls) == 0  # measured on copies


def test_a_batch_norm_in_training_counts_its_calls_and_its_output_does_not_follow():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, momentum=None))
    found = R.advanced_counters(model, [torch.randn(2, 3, 8, 8)], 0, True)
    assert found["counters"] == ["1.num_batches_tracked"] and found["error"] == 0.0


IN_PLACE_NORMS = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 64)
        self.norm = nn.LayerNorm(64, elementwise_affine=False)

    def forward(self, x):
        h = self.norm(self.fc(x)) if NORMED else torch.tanh(self.fc(x))
        h.div_(h.norm(dim=-1, keepdim=True))
        g = torch.log_softmax(self.fc(x), dim=-1)
        return torch.tanh(h) + (torch.log_softmax(g, dim=-1) if NORMED else g.exp())

def get_inputs():
    return [torch.randn(16, 64)]
"""


@pytest.mark.parametrize("normed", [True, False])
def test_an_in_place_or_idempotent_normalization_of_normalized_rows_is_redundant(normed):
    """An in-place division by the row norm of a LayerNorm's output (a constant: skipped from
    the operand as it was before the call) and a log-softmax of log-probabilities are redundant;
    the same calls on rows whose norms differ, or on logits, are not."""
    from kernelmill.validate.realcode.sites import dead_sites

    model, x = _from_source(f"NORMED = {normed}\n" + IN_PLACE_NORMS)
    labels, _ = dead_sites(model, None, x, R.forward(model, x, 0), None, 0, 1e-4)
    redundant = sorted(label.split(": ")[1].split(" ")[0] for label in labels
                       if "redundant normalization" in label)
    assert redundant == (["div_", "log_softmax"] if normed else []), labels


DAMPED_FORMS = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(64, 64 + 256)  # fused: zeroing it kills the live branch too
        self.down = nn.Parameter(torch.randn(64, 256) / 16)
        self.k = nn.Linear(64, 64)
        self.gamma = nn.Parameter(torch.full((64,), SCALE))  # a layer-scale, per channel

    def forward(self, x):
        a, ff = self.proj(x).split((64, 256), dim=-1)
        resid = x + torch.tanh(a)
        if KIND == "alpha":
            return torch.addmm(resid, F.gelu(ff), self.down.t(), alpha=SCALE)
        if KIND == "positional":  # the deprecated (beta, input, alpha, mat1, mat2) form
            return torch.addmm(1, resid, SCALE, F.gelu(ff), self.down.t())
        if KIND == "per call":  # a live first step, then steps each damped by their own alpha
            h = resid
            for s in (1.0, SCALE, SCALE, SCALE):
                h = torch.addmm(h, F.gelu(ff), self.down.t(), alpha=s)
            return h
        if KIND == "layer-scale":
            return torch.addmm(resid, F.gelu(ff), self.down.t() * self.gamma)
        if KIND == "chain through copies":
            third = SCALE ** (1 / 3)
            g = ((F.gelu(ff) * third).contiguous() * third).t().contiguous().t() * third
            return torch.addmm(resid, g, self.down.t())
        if KIND == "in place":
            return torch.addmm(resid, F.gelu(ff).mul_(SCALE), self.down.t())
        if KIND == "chained":
            third = SCALE ** (1 / 3)
            return torch.addmm(resid, F.gelu(ff) * third * third * third, self.down.t())
        if KIND == "on the weight":
            return torch.addmm(resid, F.gelu(ff), self.down.t() * SCALE)
        g = self.k(x).t() @ self.k(x)  # a jitter added by alpha: no work in the term
        return resid + torch.add(g, torch.eye(64), alpha=SCALE)[:16]

def get_inputs():
    return [torch.randn(16, 64)]
"""


@pytest.mark.parametrize("kind", ["alpha", "positional", "per call", "in place", "chained",
                                  "chain through copies", "on the weight", "layer-scale",
                                  "jitter"])
@pytest.mark.parametrize("scale", [1e-6, 0.1])
def test_a_branch_damped_by_a_keyword_an_in_place_or_a_chained_constant_is_dead(kind, scale):
    """A branch of a fused block damped by ``alpha=1e-6`` (as a keyword, in the deprecated
    positional form, or in three of a loop's four calls) or by a weight scaled by 1e-6 or by a
    layer-scale parameter inside ``addmm`` (each tried with its term dropped), by an in-place
    ``mul_(1e-6)``, or by three factors of 0.01 (a chain of scalings read as one, through
    copies and transposes too) is dead; at 0.1 it is live, and a jitter added by ``alpha`` is
    never tried."""
    from kernelmill.validate.realcode.sites import dead_sites

    model, x = _from_source(f"KIND = {kind!r}\nSCALE = {scale}\n" + DAMPED_FORMS)
    labels, _ = dead_sites(model, None, x, R.forward(model, x, 0), None, 0, 1e-4)
    assert bool(labels) is (scale < 1e-3 and kind != "jitter"), labels
    terms = [label for label in labels if "term damped by" in label]
    if kind in ("alpha", "positional", "per call", "on the weight") and labels:
        assert terms, labels
        assert ("argument 3" in terms[0]) is (kind == "positional"), terms
        assert ("3 of its 4 calls" in terms[0]) is (kind == "per call"), terms
    elif kind == "layer-scale" and labels:  # the scaling itself may be zeroed first
        assert terms or any("mul" in label for label in labels), labels
    elif labels:  # the damped scaling zeroed (the product it feeds may drop its term too)
        assert any("zeroed" in label for label in labels), labels


PRODUCT_FORMS = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(64, 64) / 8)
        self.b = nn.Parameter(torch.zeros(64))  # a bias initialised at zero, as usual
        self.gamma = nn.Parameter(torch.full((64,), 1e-6))

    def forward(self, x):
        if KIND == "zero bias, positional":
            return torch.tanh(torch.addmm(1, self.b, 1, x, self.w))
        if KIND == "zero bias, beta only":
            return torch.tanh(torch.addmm(1, self.b, x, self.w))
        # a layer-scale moved onto the weight and detached: no factor to read
        return torch.tanh(torch.addmm(x, x, (self.w * self.gamma).detach()))

def get_inputs():
    return [torch.randn(4096, 64)]
"""


@pytest.mark.parametrize("kind", ["zero bias, positional", "zero bias, beta only",
                                  "detached layer-scale"])
def test_a_product_term_is_tried_dropped_and_a_zero_bias_is_no_operand(kind):
    """Every ``addmm``-like call's product is tried dropped (``alpha`` 0), however its operand
    is damped; the added input of the deprecated positional forms is not a multiplied operand
    (a bias initialised at zero is not dead work)."""
    from kernelmill.validate.realcode.sites import dead_sites

    model, x = _from_source(f"KIND = {kind!r}\n" + PRODUCT_FORMS)
    labels, _ = dead_sites(model, None, x, R.forward(model, x, 0), None, 0, 1e-4)
    if kind.startswith("zero bias"):
        assert labels == [], labels
    else:
        assert any("product term dropped" in label for label in labels), labels


COSINE_OF_NORMED = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 64)
        self.norm = nn.LayerNorm(64)

    def forward(self, q, d):
        qe = self.norm(self.fc(q)) if NORMED else torch.tanh(self.fc(q))
        de = self.norm(self.fc(d)) if NORMED else torch.tanh(self.fc(d))
        if BY_HAND:
            return (qe @ de.t()) / (qe.norm(dim=-1)[:, None] * de.norm(dim=-1)[None, :])
        return F.cosine_similarity(qe[:, None, :], de[None, :, :], dim=-1)

def get_inputs():
    return [torch.randn(16, 64), torch.randn(24, 64)]
"""


@pytest.mark.parametrize("by_hand", [False, True])
@pytest.mark.parametrize("normed", [True, False])
def test_a_cosine_similarity_of_rows_of_one_norm_is_a_redundant_normalization(normed, by_hand):
    """Cosine similarity normalizes inside: of LayerNorm outputs (rows of norm sqrt(D) at the
    declared weight) its norms are one constant and its dot product up to one factor is the
    answer; of tanh embeddings, whose norms differ by row, it is not."""
    from kernelmill.validate.realcode.sites import dead_sites

    model, x = _from_source(f"NORMED = {normed}\nBY_HAND = {by_hand}\n" + COSINE_OF_NORMED)
    labels, _ = dead_sites(model, None, x, R.forward(model, x, 0), None, 0, 1e-4)
    redundant = [label for label in labels if "redundant normalization" in label]
    called = "/ (qe.norm" if by_hand else ": cosine_similarity"
    assert [called in label for label in redundant] == ([True] if normed else []), labels


@pytest.mark.parametrize("kind, follows", [("argsort", True), ("stable", False),
                                           ("values", False), ("topk", True)])
def test_an_output_that_follows_the_order_among_tied_integer_keys_is_caught(kind, follows):
    """Tokens sorted by their expert id (many ties) and then a running sum: which tied token
    comes first is up to the sort. A stable sort defines it; sorted values do not depend on it;
    a top-k over tied keys picks among them."""
    from kernelmill.validate.verdicts_realcode import judge_exact_outputs

    class Ordered(nn.Module):
        def forward(self, keys, x):
            if kind == "values":
                return torch.sort(keys).values.float().cumsum(0) + x.sum()
            if kind == "topk":
                return x[torch.topk(keys, 5).indices].sum(-1)
            order = torch.argsort(keys, stable=kind == "stable")
            return x[order].cumsum(0)

    torch.manual_seed(0)
    inputs = [torch.randint(0, 4, (64,)), torch.randn(64, 8)]
    model = Ordered()
    ref = R.forward(model, inputs, 0)
    exact = R.exact_outputs(model, inputs, ref, 0, 1e-4, 1, "cpu", True, 1e-4)
    if kind == "stable":  # nothing sorts with its order among ties left open
        assert exact is None
        return
    assert bool(exact["reordered"]["moved"]["changed"]) is follows, exact
    assert (judge_exact_outputs(exact)["passed"] is False) is follows


class Router(nn.Module):
    """The top-1 expert of 8 by their scores as given (an identity gate)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.eye(8))

    def forward(self, x):
        return (x @ self.w).argmax(-1)


@pytest.mark.parametrize("small", [0, 8])
def test_decisions_fail_only_where_a_tenth_of_the_noise_flips_them_too(small):
    """A router over thousands of tokens meets a near-tie under noise at the tolerance's scale
    (one token of 2048 at 1e-4) but not under a tenth of it: reported, not failed. Flips that
    the smaller noise makes too fail, integer outputs and float jumps alike."""
    from kernelmill.validate.verdicts_realcode import judge_exact_outputs

    torch.manual_seed(0)
    x = torch.randn(2048, 8)
    x[:64, 0] = 4.0  # the best two of these rows nearly tie:
    x[:small, 1] = 4.0 + 1e-7  # by far less than a tenth of the noise
    x[small:64, 1] = 4.0 + 1e-4  # by about the full noise (RMS ~1.1): some of them flip

    model = Router()
    ref = R.forward(model, [x], 0)
    exact = R.exact_outputs(model, [x], ref, 0, 1e-4, 1, "cpu")
    assert exact["jittered_changed"]["changed"] > small, exact
    assert exact["small_jittered_changed"]["changed"] <= small * exact["small_draws"]
    verdict = judge_exact_outputs({**exact, "threads_changed": None})
    assert verdict["passed"] is (small == 0), verdict
    assert "under noise of 1e-05" in verdict["detail"] or "none under 1e-05" in verdict["detail"]


@pytest.mark.parametrize("kind, jumps", [("angle", True), ("atan2", True), ("log", True),
                                         ("sqrt", True), ("half_angle", True),
                                         ("half_angle_shifted", False), ("unit", False),
                                         ("magnitude", False)])
def test_a_phase_read_across_its_branch_cut_is_a_decision(kind, jumps):
    """The phase of a spectrum (``angle``, ``atan2``, inside a complex ``log`` or ``sqrt``, or
    written out as the half-angle ``2 atan(im / (|z| + re))``, whose pole no single op has)
    jumps across the negative reals, where a real FFT's DC and Nyquist bins sit exactly (an
    imaginary part of +0.0): noise on the transform (accumulating work) flips them, so the
    phase fails; the unit phasor, the magnitude and the half-angle formula with its pole moved
    off the spectrum are continuous. A complex output and a real one of its shape
    are not comparable (an ablation of ``angle`` returns the spectrum itself)."""
    from kernelmill.validate.verdicts_realcode import judge_exact_outputs

    class Spectrum(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv1d(1, 1, 31, padding=15, bias=False)

        def forward(self, x):
            spec = torch.fft.rfft(self.conv(x.unsqueeze(1)).view(-1, 16, 512), dim=-1)
            if kind == "angle":
                return spec.angle()
            if kind == "atan2":
                return torch.atan2(spec.imag, spec.real)
            if kind in ("log", "sqrt"):  # the phase inside a complex log, or halved in a root
                return getattr(torch, kind)(spec).imag
            if kind.startswith("half_angle"):  # real ops only: atan of a ratio with a pole
                shift = 1.0 if kind.endswith("shifted") else 0.0
                return 2 * torch.atan(spec.imag / (spec.abs() + spec.real + shift))
            return spec / spec.abs().clamp_min(1e-6) if kind == "unit" else spec.abs()

    torch.manual_seed(0)
    model, x = Spectrum(), torch.randn(4, 8192)
    ref = R.forward(model, [x], 0)
    exact = R.exact_outputs(model, [x], ref, 0, 1e-4, 1, "cpu", tol=1e-4)
    assert (exact is not None and judge_exact_outputs(exact)["passed"] is False) is jumps, exact
    if kind == "half_angle":  # no op decides: the reason says so
        assert exact["undecided"] and "no op decides" in judge_exact_outputs(exact)["detail"]
    spec = torch.fft.rfft(x)
    assert not C.shapes_equal([spec], [spec.angle()]) and C.shapes_equal([spec], [spec * 2])


@pytest.mark.parametrize("kind", ["prefix_sum", "triangular_product"])
def test_a_wide_continuous_output_is_not_a_jump_where_nothing_decides(kind):
    """KernelBench's prefix sum of ``rand`` along 32768 and its product of triangular
    matrices: the noise follows each op's RMS, which on the small elements (a sum's first
    terms, entries near the diagonal) is over 100 tolerances, so they move by that much; but
    the move is linear in the noise (the same noise a tenth as large moves them a tenth as
    far), unlike the half-angle's jumps, so nothing is judged to jump."""
    from kernelmill.validate.realcode.moves import STEP_SCALE, _jumped
    from kernelmill.validate.realcode.noise import _HonestNoise

    class Prefix(nn.Module):
        def forward(self, x):
            return torch.cumsum(x, 1)

    class Triangular(nn.Module):
        def forward(self, a, b):
            return torch.tril(torch.matmul(a, b))

    torch.manual_seed(0)
    if kind == "prefix_sum":
        model, inputs = Prefix(), [torch.rand(4, 32768)]
    else:
        model, inputs = Triangular(), [torch.tril(torch.rand(512, 512)) for _ in range(2)]
    ref = R.forward(model, inputs, 0)
    assert R.exact_outputs(model, inputs, ref, 0, 1e-4, 1, "cpu", tol=1e-4) is None
    # their small elements do move by 100 tolerances under the noise, linearly
    with _HonestNoise(1e-4, 1):
        moved = R.forward(model, inputs, 0)
    with _HonestNoise(1e-4 * STEP_SCALE, 1):
        less = R.forward(model, inputs, 0)
    assert _jumped(moved, ref, 1e-4)["changed"] > 0
    assert torch.allclose(less[0] - ref[0], STEP_SCALE * (moved[0] - ref[0]), rtol=1e-2,
                          atol=1e-3)


@pytest.mark.parametrize("threshold, fails", [(-1.0, False), (1.5, True)])
def test_a_prefix_sums_linear_move_is_not_a_jump_where_a_comparison_decides(threshold, fails):
    """A masked value ``where(y > threshold, y, 0)`` and its prefix sum along 32768: the
    comparison decides, and the noise moves the sum's small first terms by 100 tolerances,
    linearly, on the check's draw and on each further draw of the density. Those moves are not
    jumps (the same noise a tenth as large moves them a tenth as far): at -1, a margin no noise
    crosses, it passes. At 1.5 the comparison flips near-ties, a step of 1.5 in the masked
    output: it fails."""
    from kernelmill.validate.realcode.moves import _jumped
    from kernelmill.validate.realcode.noise import _HonestNoise
    from kernelmill.validate.verdicts_realcode import judge_exact_outputs

    class Masked(nn.Module):
        def forward(self, x):
            # a sum (an honest kernel rounds it its own way): the noise reaches what the
            # comparison reads; 0 to 3, 1.5 at the middle
            y = torch.matmul(x, torch.full((8, 1), 0.375)).view(4, 32768)
            masked = torch.where(y > threshold, y, torch.zeros_like(y))
            return torch.cumsum(masked, 1), masked

    torch.manual_seed(0)
    model, x = Masked(), torch.rand(4 * 32768, 8)
    more = [[torch.rand(4 * 32768, 8)] for _ in range(3)]
    ref = R.forward(model, [x], 0)
    exact = R.exact_outputs(model, [x], ref, 0, 1e-4, 1, "cpu", tol=1e-4, more=iter(more))
    assert exact is not None and not exact["undecided"], exact  # the comparison decides
    assert judge_exact_outputs({**exact, "threads_changed": None})["passed"] is not fails, exact
    if not fails:
        assert exact["jumped"]["changed"] == 0 and exact["density"]["draws"] == 4, exact
        with _HonestNoise(1e-4, 1):  # the plain count, as before: its linear moves
            assert _jumped(R.forward(model, [x], 0), ref, 1e-4)["changed"] > 0

@pytest.mark.parametrize("phase", [False, True, "switches"])
def test_an_unpool_at_its_pools_picks_does_not_hide_a_cut_beside_it(phase):
    """An unpool places values at the positions its pool picked (positions, not a decision),
    and under noise a window's maximum can move to another position: the noisy forwards are
    given the clean forward's picks, so the pool and unpool alone pass, and a half-angle phase
    returned beside them (a cut no single op has) still fails. A decision read off the unpool's
    output (where each window's maximum sits, as a mask) is a decision: its noisy forwards are
    not given the picks, so the noise moves it."""
    from kernelmill.validate.verdicts_realcode import judge_exact_outputs

    class Stage(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(64, 64)

        def forward(self, x):
            y = self.lin(x).view(-1, 1, 8, 8)
            p, i = nn.functional.max_pool2d(y, 2, return_indices=True)
            up = nn.functional.max_unpool2d(p * 2, i, 2)
            if phase == "switches":
                return nn.functional.max_unpool2d(torch.ones_like(p), i, 2) != 0
            if not phase:
                return up
            spec = torch.fft.rfft(y.flatten(1), dim=-1)
            return up, 2 * torch.atan(spec.imag / (spec.abs() + spec.real))

    torch.manual_seed(0)
    model, x = Stage(), torch.randn(256, 64)
    ref = R.forward(model, [x], 0)
    exact = R.exact_outputs(model, [x], ref, 0, 1e-4, 1, "cpu", tol=1e-4)
    if phase == "switches":  # moved by the noise, as any decision (given the picks: never)
        assert exact is not None and exact["jittered_changed"]["changed"] > 0, exact
        return
    failed = exact is not None and judge_exact_outputs(exact)["passed"] is False
    assert failed is phase, exact
    if phase:
        assert exact["undecided"], exact
    # the picks are what keeps the unpool's output still: without them it jumps
    from kernelmill.validate.realcode.noise import _HonestNoise

    with _HonestNoise(1e-4, 1):
        loose = R.forward(model, [x], 0)
    assert (loose[0] - ref[0]).abs().max() > 100 * 1e-4 * (1 + ref[0].abs().max())


@pytest.mark.parametrize("ties, pooled, fails", [(1, False, False), (12, False, True),
                                                  (12, True, False)])
def test_near_ties_fail_by_their_density_over_draws_of_the_inputs(ties, pooled, fails):
    """A router whose best two scores tie within half the smaller noise's step in ``ties`` rows
    of 2048 (17 times an honest kernel's rounding: the tiny noise, 3 times that rounding, flips
    none): the full noise flips about half of them, and an honest kernel's rounding (0.3% of
    that noise at fp32) each in proportion. One such row estimates about 1% of 7-call grades
    failed (passes), twelve about 12% (fails); pooled with three draws of the inputs without
    such ties (``more``), the same twelve are a density of a quarter of that (passes)."""
    from kernelmill.validate.verdicts_realcode import judge_exact_outputs

    torch.manual_seed(0)
    x = torch.randn(2048, 8)
    x[:ties, 0], x[:ties, 1] = 4.0, 4.0 + 5e-6
    more = [[torch.randn(2048, 8)] for _ in range(3)] if pooled else None
    model = Router()
    ref = R.forward(model, [x], 0)
    verdicts = []
    for seed in range(1, 6):
        exact = R.exact_outputs(model, [x], ref, 0, 1e-4, seed, "cpu", more=more and iter(more))
        if pooled:  # every further draw counted: it passes only by their share
            assert exact["density"]["draws"] == 4, exact
        verdicts.append(judge_exact_outputs({**exact, "threads_changed": None}))
    assert [v["passed"] for v in verdicts] == [not fails] * 5, verdicts
    if ties > 1:
        assert "of 7-call grades" in verdicts[0]["detail"], verdicts[0]


class _Twins(nn.Module):
    """An argmax over classes two of which are twins (``gap`` apart, relative), in ``dtype``;
    returned as the index, the index and its one-hot, or the one-hot classes-first."""

    def __init__(self, gap, dtype=torch.float32, layout="index"):
        super().__init__()
        torch.manual_seed(0)
        w = torch.randn(8, 32, dtype=dtype)
        twin = 0.5 * torch.randn(1, 32, dtype=dtype)
        self.w = nn.Parameter(torch.cat([w, twin, twin * (1 + gap)]))
        self.layout = layout

    def forward(self, x):
        index = (x @ self.w.t()).argmax(-1)
        hot = nn.functional.one_hot(index, 10).bool()
        return {"index": index, "both": (index, hot), "classes_first": hot.t()}[self.layout]


def _twin_inputs(rows, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(rows, 32, generator=g, dtype=dtype)]


@pytest.mark.parametrize("layout", ["both", "classes_first"])
def test_a_near_tie_counts_once_whatever_the_layout_and_however_many_outputs_repeat_it(layout):
    """One flipped row moves one row of a one-hot, whichever way it is laid out, and an index
    with the one-hot made from it: the events are the index alone's."""
    x = _twin_inputs(1024)
    more = [_twin_inputs(1024, seed=k) for k in range(1, 4)]
    counts = []
    for kind in ("index", layout):
        model = _Twins(1e-6, layout=kind)
        ref = R.forward(model, x, 0)
        exact = R.exact_outputs(model, x, ref, 0, 1e-4, 1, "cpu", more=iter(more))
        counts.append(exact["density"]["kinds"]["jittered"]["full"])
    assert counts[0] > 0 and counts[0] == counts[1], counts


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_twins_closer_than_rounding_fail_in_every_float_dtype(dtype):
    """Twin classes closer than an honest kernel's rounding win some rows: any summation order
    picks either twin there, so the exact answer fails most grades. The tiny noise (3 times that
    rounding) flips them as often as the full noise does, and the problem fails, fp64 too (where
    scaling the full noise's flips to fp64's rounding alone would never fail it); a gap of a
    tenth (half the full noise's reach) passes: only the full noise crosses it."""
    from kernelmill.validate.verdicts_realcode import judge_exact_outputs

    eps = torch.finfo(dtype).eps
    for gap, fails in ((eps, True), (0.1, False)):
        model = _Twins(gap, dtype)
        x = _twin_inputs(512, dtype)
        ref = R.forward(model, x, 0)
        rel = 1e-4 if dtype == torch.float32 else 1e-7
        more = iter([_twin_inputs(512, dtype, seed=k) for k in range(1, 4)])
        exact = R.exact_outputs(model, x, ref, 0, rel, 1, "cpu", more=more,
                                dtype=str(dtype).replace("torch.", ""))
        verdict = judge_exact_outputs({**exact, "threads_changed": None})
        assert verdict["passed"] is not fails, (gap, exact["density"], verdict)
        if fails:
            assert exact["density"]["kinds"]["jittered"]["concentrated"] > 0.1, exact["density"]


def test_further_draws_pool_whatever_the_first_shows_and_one_that_raises_is_left_out():
    """The check's own draw of the inputs holds no twin-won row; the further draws do (the twins
    made to win): they are pooled, and the problem fails. A further draw whose inputs cannot be
    made is left out and named; the rest still decide."""
    from kernelmill.validate.verdicts_realcode import judge_exact_outputs

    model = _Twins(0.0)
    twin = model.w.detach()[8:9]
    x = [-10 * twin.expand(256, 32).clone()]  # the twins lose every row here
    assert not (R.forward(model, x, 0)[0] >= 8).any()

    class More:  # the first further draw's inputs cannot be made; the next hold the twins
        made = 0

        def __iter__(self):
            return self

        def __next__(self):
            self.made += 1
            if self.made == 1:
                raise RuntimeError("get_inputs failed on this draw")
            if self.made == 2:
                return [10 * twin.expand(256, 32) + 0.01 * torch.randn(256, 32)]
            raise StopIteration

    ref = R.forward(model, x, 0)
    exact = R.exact_outputs(model, x, ref, 0, 1e-4, 1, "cpu", more=More())
    density = exact["density"]
    assert density["draws"] == 2 and density["skipped"] == [
        "RuntimeError: get_inputs failed on this draw"], density
    assert density["kinds"]["jittered"]["full"] > 0
    assert judge_exact_outputs({**exact, "threads_changed": None})["passed"] is False


def test_low_precision_outputs_need_no_flip_under_the_smaller_noise():
    """In bf16 an honest kernel's rounding is about the full noise (the floor, 2e-2): the
    smaller noise, under half a unit in the last place, flips nothing, yet a classifier whose
    argmax the full noise flips in a few rows a draw fails (the tiny noise is not run)."""
    from kernelmill.validate.verdicts_realcode import judge_exact_outputs

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 16)).bfloat16()

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = model

        def forward(self, x):
            logits = self.body(x)
            return logits, logits.argmax(-1)

    head = Head()
    draws = [[torch.randn(64, 64).bfloat16()] for _ in range(4)]
    ref = R.forward(head, draws[0], 0)
    exact = R.exact_outputs(head, draws[0], ref, 0, 2e-2, 1, "cpu", tol=2e-2,
                            more=iter(draws[1:]), dtype="bfloat16")
    assert exact["density"]["tiny_jitter"] is None and exact["density"]["share"] > 0.9
    verdict = judge_exact_outputs({**exact, "threads_changed": None})
    assert verdict["passed"] is False, (exact["density"], verdict)


@pytest.mark.parametrize("quantized", [True, False])
def test_steps_too_small_to_jump_are_told_from_continuous_error_by_how_they_shrink(quantized):
    """A fixed-point quantizer (rounding to 1/64) read by a layer moves outputs by a few
    tolerances where honest noise flips it, and keeps that step under a tenth of the noise; a
    ReLU written as a test (``h * (h > 0)``) decides too, and its error shrinks tenfold."""
    class Quantized(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(64, 256), nn.Linear(256, 16)

        def forward(self, x):
            h = self.fc1(x)
            h = torch.round(h * 64) / 64 if quantized else h * (h > 0)
            return self.fc2(h)

    torch.manual_seed(0)
    model, inputs = Quantized(), [torch.randn(512, 64)]
    ref = R.forward(model, inputs, 0)
    exact = R.exact_outputs(model, inputs, ref, 0, 1e-4, 1, "cpu", True, 1e-4)
    assert not exact["jumped"]["changed"]  # under the 100 tolerances a jump is
    assert bool(exact["steps"]["changed"]) is quantized, exact["steps"]
    # a tolerance calibrated from the steps themselves (ten of them) does not hide them: steps
    # are read at the noise's own scale
    inflated = R.exact_outputs(model, inputs, ref, 0, 1e-4, 1, "cpu", True, 10 / 64)
    assert bool(inflated["steps"]["changed"]) is quantized, inflated["steps"]


@pytest.mark.parametrize("via_alpha", [False, True])
@pytest.mark.parametrize("constant, rounds", [(12582912.0, True), (1000.0, False)])
def test_rounding_written_as_adding_and_subtracting_a_large_constant_is_a_decision(
        constant, rounds, via_alpha):
    """``(h + 1.5 * 2**23) - 1.5 * 2**23`` rounds fp32 to whole numbers with no rounding op:
    the forward decides (the jump test runs, and finds the steps); adding 1000 to values of
    about 100 keeps them to 6e-5 and decides nothing."""

    class MagicRound(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(64, 64), nn.Linear(64, 64)

        def forward(self, x):
            h = self.fc1(x) * 32
            if via_alpha:  # the constant passed as ``alpha``
                return self.fc2(torch.add(h, 1.0, alpha=constant) - constant)
            return self.fc2((h + constant) - constant)

    torch.manual_seed(0)
    model, inputs = MagicRound(), [torch.randn(512, 64)]
    exact = R.exact_outputs(model, inputs, R.forward(model, inputs, 0), 0, 1e-4, 1, "cpu", True,
                            1e-4)
    if not rounds:
        assert exact is None
        return
    assert exact["jumped"]["changed"] or exact["steps"]["changed"], exact


@pytest.mark.parametrize("scale, dead", [(1e-6, True), (0.1, False)])
def test_a_cheap_branch_past_the_costliest_modules_is_tried_where_it_barely_moves_its_input(
        scale, dead):
    """Forty wide layers fill the costliest bypasses; a narrow adapter behind a layer-scale
    of 1e-6 among them is tried because it barely moves its input (at 0.1 it is live)."""
    from kernelmill.validate.realcode.bypass import MOST_BYPASSES

    class Scaled(nn.Module):
        def __init__(self, fn, gamma):
            super().__init__()
            self.fn, self.gamma = fn, gamma

        def forward(self, x):
            return x + self.gamma * self.fn(x)

    layers = [Scaled(nn.Sequential(nn.Linear(32, 128), nn.Tanh(), nn.Linear(128, 32)), 0.3)
              for _ in range(MOST_BYPASSES)]
    layers.insert(5, Scaled(nn.Linear(32, 32), scale))
    torch.manual_seed(0)
    model, x = nn.Sequential(*layers), [torch.randn(16, 32)]
    found = R.submodule_bypass(model, x, R.forward(model, x, 0), 0, 1e-4, 1)
    assert ("5 (skipped" in " ".join(found["dead"])) is dead, found["dead"]


def test_passthroughs_of_integer_and_broadcast_inputs_are_taken_out():
    """An integer input cast into the output, and a smaller input broadcast over it, are
    passthroughs too (``nonaffine.same_shaped``); an input that broadcasts nowhere near is not."""
    from kernelmill.validate.realcode.nonaffine import same_shaped

    y = torch.zeros(2, 16, 8, 8)
    cells = torch.randint(0, 9, (2, 16, 8, 8))
    depth, other = torch.rand(2, 1, 8, 8), torch.rand(3, 8)
    pairs = same_shaped(y, [cells, depth, other], [cells + 1, depth * 2, other])
    assert [a.shape for a, _ in pairs] == [y.shape, y.shape]
    assert torch.equal(pairs[1][0][:, 7], depth[:, 0]) and pairs[0][0] is cells


class _Annealed(nn.Module):
    """A temperature annealed per call, its step kept as ``kind`` says; the softmax sharpens
    from the 1,000th call on (``every``: tested after the increment)."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        self.fc = nn.Linear(16, 16)
        if kind == "float buffer":
            self.register_buffer("n", torch.zeros(()))
        elif kind == "state slot":  # the step in one slot of a small state buffer
            self.register_buffer("state", torch.tensor([0, 7, 3], dtype=torch.int64))
        elif kind == "strided slot":  # ... of one laid out transposed
            self.register_buffer("state", torch.zeros(4, 4, dtype=torch.int64).t())
        elif kind == "lazy scale":
            self.scale = 0.0  # set once, from the input's width: no counter
        else:
            self.n = 0
            # a decoy whose write raises (a leaf that requires grad) beside a real counter
            self.decoy = torch.zeros((), requires_grad=True)

    def forward(self, x):
        if self.kind == "lazy scale":
            if self.scale == 0.0:
                self.scale = 1.0 / math.sqrt(x.shape[-1])
            return torch.softmax(self.fc(x) * self.scale, -1)
        with torch.no_grad():
            if self.kind == "float buffer":
                self.n += 1
            elif self.kind == "state slot":
                self.state[0] += 1
            elif self.kind == "strided slot":
                self.state[0, 1] += 1
            else:
                self.n += 1
                self.decoy += 1
        step = {"state slot": lambda: self.state[0], "strided slot": lambda: self.state[0, 1]}.get(
            self.kind, lambda: self.n)()
        hot = 4.0 if float(step) % 1000 == 0 else 1.0
        return torch.softmax(self.fc(x) * hot, -1)


@pytest.mark.parametrize("kind, counted", [("float buffer", True), ("int with decoy", True),
                                           ("state slot", True), ("strided slot", True),
                                           ("lazy scale", False)])
def test_counters_are_any_number_a_call_moves_again_by_its_step(kind, counted):
    torch.manual_seed(0)
    model = _Annealed(kind).eval()
    found = R.advanced_counters(model, [torch.randn(8, 16)], 0, True)
    assert (found["error"] > 1e-3) is counted, found
    assert ("scale" in found["counters"]) is False
