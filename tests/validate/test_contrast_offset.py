"""``contrast`` blames an offset only for the slack it adds (validate/realcode/precision.py).

Two problems shaped like KernelBench level 2's: a global average of a convolution plus a bias
(an output of 2.6 +- 0.006: the offset is what lets a bf16-operand convolution pass) and a
sigmoid of a bias plus a softmax (0.45 +- 1e-4: the absolute term grades it as if it had no
offset; a bf16-operand convolution passes with or without one). The cheap wrong answer is run in
both, and its error measured with the offset and without it.
"""
import pytest
import torch
from kernelmill.validate import checks as C
from kernelmill.validate import realcode as R
from kernelmill.validate.forwards import build_model, draw_inputs, load_namespace, seeds

TOL = 1e-4  # the float32 floor, the calibrated tolerance of both

AVERAGED_CONV = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(8, 16, 3)
        self.pool = nn.MaxPool3d(2)
        self.bias = nn.Parameter(torch.randn(16, 1, 1, 1))

    def forward(self, x):
        x = self.pool(self.conv(x) / 2.0)
        x = x.mean(dim=(2, 3, 4), keepdim=True) + self.bias
        return x.sum(dim=1)

def get_inputs():
    return [torch.rand(16, 8, 16, 32, 32)]

def get_init_inputs():
    return []
'''

SIGMOID_OF_BIAS = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose2d(16, 128, 4, stride=2, padding=1)
        self.bias = nn.Parameter(torch.randn(128, 1, 1))

    def forward(self, x):
        x = torch.softmax(self.conv(x), dim=1)
        return torch.sigmoid((x + self.bias) * 2.0)

def get_inputs():
    return [torch.rand(2, 16, 16, 16)]

def get_init_inputs():
    return []
'''


def _measured(source: str) -> dict:
    ns = load_namespace(source)
    sd = seeds(0)
    model = build_model(ns, sd, "cpu")
    draws = [draw_inputs(ns, sd["inputs"] + k, "cpu") for k in range(4)]
    outs = [R.forward(model, x, sd["forward"]) for x in draws]
    ref = outs[0]
    offset = [torch.stack([o[i] for o in outs]).mean(0) for i in range(len(ref))]
    cheap = R.reduced_precision(model, draws[0], sd["forward"], "bfloat16")
    rounded = R.rounded_errors(cheap, ref, "bfloat16")  # as the probe measures it
    # the allclose measure with the offset taken out of the magnitude rtol is applied to
    no_offset = max(float(((a - b).abs() / (1 + (b - m).abs())).max())
                    for a, b, m in zip(cheap, ref, offset))
    entries = R.contrast(ref, outs[1], TOL)
    return {"entries": entries, "cheap": rounded["error"], "cheap_no_offset": no_offset,
            "verdict": C.judge_contrast(entries, "float32", C.DEFAULT_THRESHOLDS, TOL, rounded)}


def test_an_offset_that_lets_a_bf16_convolution_pass_fails_contrast():
    m = _measured(AVERAGED_CONV)
    (entry,) = [e for e in m["entries"] if "slice" not in e]  # the whole output
    assert entry["magnitude"] > 2 and entry["informative"] < 0.01
    # the cheap wrong answer passes the tolerance, and only because of the offset ...
    assert m["cheap"] <= TOL < m["cheap_no_offset"]
    # ... though the offset's slack is under the 5% line: the answer itself is the evidence
    assert 0 < entry["ratio"] < C.DEFAULT_THRESHOLDS["max_offset_slack"]
    assert m["verdict"]["passed"] is False
    assert "pass only through the slack rtol gives" in m["verdict"]["detail"]


def test_a_magnitude_under_one_adds_nothing_to_the_absolute_slack():
    m = _measured(SIGMOID_OF_BIAS)
    (entry,) = [e for e in m["entries"] if "slice" not in e]  # the whole output
    assert entry["magnitude"] < 1 and entry["informative"] < 1e-3
    # before: rtol x 0.45 over a variation of ~1.5e-4 read as a large offset (about 30%)
    assert TOL * entry["magnitude"] / entry["informative"] > C.DEFAULT_THRESHOLDS["max_offset_slack"]
    assert entry["excess"] == 0.0 and entry["ratio"] == 0.0
    # the bf16 answer passes with the offset or without it: the offset is not what admits it
    assert m["cheap"] <= TOL and m["cheap_no_offset"] <= TOL
    assert m["verdict"]["passed"] is True and "bfloat16 pass it" in m["verdict"]["detail"]


@pytest.mark.parametrize("magnitude", [0.5, 1.0])
def test_the_excess_grows_with_the_offset(magnitude):
    y, z = torch.randn(4000), torch.randn(4000)
    near = R.contrast([magnitude + 1e-3 * y], [magnitude + 1e-3 * z], TOL)[0]
    far = R.contrast([100 * magnitude + 1e-3 * y], [100 * magnitude + 1e-3 * z], TOL)[0]
    assert near["ratio"] == 0.0
    assert far["ratio"] == pytest.approx(TOL * (100 * magnitude - 1 - far["informative"])
                                         / far["informative"])


def test_an_offset_on_a_few_channels_is_read_in_their_slice():
    from kernelmill.validate.realcode import contrast

    torch.manual_seed(0)
    offset = torch.zeros(1, 8, 1, 1)
    offset[:, :2] = 273.15  # two channels in Kelvin beside six about zero
    y, z = torch.randn(2, 8, 16, 16) * 0.3 + offset, torch.randn(2, 8, 16, 16) * 0.3 + offset
    entries = contrast([y], [z], 1e-4)
    whole = next(e for e in entries if "slice" not in e)
    assert whole["magnitude"] < 1  # the median sees the six channels about zero
    sliced = max((e for e in entries if "slice" in e), key=lambda e: e["ratio"])
    assert sliced["slice"] in ("dim 1 = 0", "dim 1 = 1") and sliced["magnitude"] > 250
    assert sliced["ratio"] > C.DEFAULT_THRESHOLDS["max_offset_slack"] > whole["ratio"]


def _residual(scale: float, x_std: float = 10.0) -> tuple[dict, dict]:
    """``x + scale * mlp(x / x_std)`` over two input draws: the whole output's contrast entry and
    its non-affine view."""
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    x, x_alt = x_std * torch.randn(64, 64), x_std * torch.randn(64, 64)
    with torch.no_grad():
        y, z = x + scale * mlp(x / x_std), x_alt + scale * mlp(x_alt / x_std)
    entries = R.contrast([y], [z], TOL, [x], [x_alt])
    whole = next(e for e in entries if "slice" not in e)
    return whole, entries


def test_an_identity_passthrough_is_taken_out_before_the_slack_is_judged():
    whole, entries = _residual(0.01)
    # the passthrough carries the variation: the whole output's view sees no offset at all
    assert whole["informative"] > 9 and whole["ratio"] == 0.0
    # what the program computes varies by ~2e-3 and gets rtol on a magnitude of ~6.6
    part = whole["nonaffine"]
    assert part["informative"] < 5e-3 and part["ratio"] > C.DEFAULT_THRESHOLDS["max_offset_slack"]
    verdict = C.judge_contrast(entries, "float32", C.DEFAULT_THRESHOLDS, TOL)
    assert verdict["passed"] is False and "not an affine function of its inputs" in verdict["detail"]


def test_a_residual_branch_of_comparable_scale_passes():
    whole, entries = _residual(10.0)  # x + mlp(x) at the passthrough's own scale
    assert whole["nonaffine"]["ratio"] < 0.01 * C.DEFAULT_THRESHOLDS["max_offset_slack"]
    assert C.judge_contrast(entries, "float32", C.DEFAULT_THRESHOLDS, TOL)["passed"] is True


@pytest.mark.parametrize(("dtype", "tol"), [("float32", TOL), ("bfloat16", 2e-2)])
def test_an_output_affine_in_its_inputs_has_no_non_affine_view(dtype, tol):
    torch.manual_seed(0)
    low = getattr(torch, dtype)
    x, x_alt = (10 * torch.randn(64, 64)).to(low), (10 * torch.randn(64, 64)).to(low)
    pos = torch.arange(64 * 64, dtype=torch.float32).reshape(64, 64).to(low) / 64  # per element
    entries = R.contrast([3 * x + pos], [3 * x_alt + pos], tol, [x], [x_alt])
    # the remainder is rounding (in bf16, about half an ulp of the output): no ratio over it
    # (not_affine judges such outputs)
    assert entries and all("nonaffine" not in e for e in entries)
    assert C.judge_contrast(entries, dtype, C.DEFAULT_THRESHOLDS, tol)["passed"] is True


def test_a_float_mask_that_picks_a_large_fill_lends_no_magnitude():
    """Attention scores with masked positions filled with -1e4 by a float 0/1 mask of the
    output's shape: the fit gives the mask a slope of 1e4, but where the mask is one the output
    is the scores (near zero), so rtol adds no slack there and the view passes; the same scores
    added to 1e4 times a float input of the output's shape still fail."""
    torch.manual_seed(0)
    scores, scores_alt = torch.randn(8, 64, 64) * 0.3, torch.randn(8, 64, 64) * 0.3
    mask, mask_alt = (torch.rand(8, 64, 64) > 0.1).float(), (torch.rand(8, 64, 64) > 0.1).float()
    filled = [scores.masked_fill(mask == 0, -1e4)], [scores_alt.masked_fill(mask_alt == 0, -1e4)]
    entries = R.contrast(*filled, TOL, [mask], [mask_alt])
    assert entries[0]["nonaffine"]["magnitude"] < 1.0, entries
    assert C.judge_contrast(entries, "float32", C.DEFAULT_THRESHOLDS, TOL)["passed"] is True
    offset = [1e4 * mask + scores], [1e4 * mask_alt + scores_alt]
    entries = R.contrast(*offset, TOL, [mask], [mask_alt])
    assert entries[0]["nonaffine"]["magnitude"] > 1e3, entries
    assert C.judge_contrast(entries, "float32", C.DEFAULT_THRESHOLDS, TOL)["passed"] is False


def test_an_additive_mask_is_judged_alike_whichever_way_it_is_written():
    """``scores + (1 - keep) * -1e4`` and ``scores + pad * -1e4`` are one output: the masked
    positions still carry the scores, under an offset of -1e4 that lends them rtol's slack (a
    kernel may skip them), and the view reads the same magnitude for either mask."""
    torch.manual_seed(0)
    scores, scores_alt = torch.randn(8, 64, 64) * 0.3, torch.randn(8, 64, 64) * 0.3
    keep, keep_alt = (torch.rand(8, 64, 64) > 0.1).float(), (torch.rand(8, 64, 64) > 0.1).float()
    out, out_alt = [scores + (1 - keep) * -1e4], [scores_alt + (1 - keep_alt) * -1e4]
    by_keep = R.contrast(out, out_alt, TOL, [keep], [keep_alt])[0]["nonaffine"]
    by_pad = R.contrast(out, out_alt, TOL, [1 - keep], [1 - keep_alt])[0]["nonaffine"]
    assert by_keep["magnitude"] == pytest.approx(by_pad["magnitude"], rel=1e-6)
    assert by_keep["magnitude"] > 500  # where 1% of the elements are masked in both draws
    entries = R.contrast(out, out_alt, TOL, [1 - keep], [1 - keep_alt])
    assert C.judge_contrast(entries, "float32", C.DEFAULT_THRESHOLDS, TOL)["passed"] is False


def _extrapolation(origin: float, past_steps: int = 10, flat: bool = False,
                   extra: str | None = None) -> tuple[list, list, list]:
    """Future positions as a linear map of ``past_steps`` past ones (-> 30 steps, another
    shape) plus a small learned residual, around ``origin`` metres (``flat``: the trajectory
    returned as one flat vector; ``extra``: a wide ``context`` embedding the residual reads,
    or a broadcast map ``origin`` the positions are given against): both draws' outputs and
    inputs."""
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(2 * past_steps, 64), torch.nn.ReLU(),
                              torch.nn.Linear(64, 60))
    mix = torch.nn.Linear(300, 60)
    steps = torch.arange(1, 31, dtype=torch.float32)

    def model(past, *more):
        vel = past[:, -1] - past[:, -2]
        cv = past[:, -1, None] + vel[:, None] * steps[None, :, None]
        with torch.no_grad():
            h = mlp((past - past[:, -1:]).flatten(1))
            if extra == "context":
                h = h + torch.tanh(mix(more[0]))
            y = cv + 0.5 * h.view(-1, 30, 2)
        if extra == "origin":
            y = y + more[0]
        return y.reshape(-1) if flat else y

    draws = []
    for _ in range(2):
        inputs = [origin + torch.rand(512, 1, 2) * 100 +
                  torch.randn(512, past_steps, 2).cumsum(1)]
        if extra == "context":
            inputs.append(torch.randn(512, 300))
        elif extra == "origin":
            inputs.append(torch.randn(1, 1, 2) * 10)
        draws.append(inputs)
    return [model(*d) for d in draws], draws[0], draws[1]


@pytest.mark.parametrize("form", [{}, {"flat": True}, {"past_steps": 20}, {"extra": "context"},
                                  {"extra": "origin"}])
def test_a_linear_map_of_the_inputs_rows_is_taken_out_before_the_slack_is_judged(form):
    """An input of another shape reaches the output through a linear map of its rows (a
    constant-velocity extrapolation): the view fits that map row by row, and the residual the
    network computes is held against the slack of the positions' magnitude; whatever the
    output's layout (a flat vector), the history's length (40 features over 512 rows), a wide
    input beside it (a context embedding) or a small one broadcast into the output."""
    (y, z), x, x_alt = _extrapolation(1000.0, **form)
    entries = R.contrast([y], [z], TOL, x, x_alt)
    whole = next(e for e in entries if "slice" not in e)
    assert whole["ratio"] < C.DEFAULT_THRESHOLDS["max_offset_slack"]  # the positions vary
    part = whole["nonaffine"]
    assert part["fit"] == "rows" and part["magnitude"] > 500 and part["informative"] < 1
    verdict = C.judge_contrast(entries, "float32", C.DEFAULT_THRESHOLDS, TOL)
    assert verdict["passed"] is False and "linear map of its inputs' rows" in verdict["detail"]
    # about the map's origin the same residual gets no offset's slack
    (y, z), x, x_alt = _extrapolation(0.0, **form)
    entries = R.contrast([y], [z], TOL, x, x_alt)
    assert C.judge_contrast(entries, "float32", C.DEFAULT_THRESHOLDS, TOL)["passed"] is True


def test_rows_too_wide_to_fit_give_no_row_view():
    from kernelmill.validate.realcode.nonaffine import ROW_FEATURES, row_map_spread

    x, x_alt = torch.randn(64, ROW_FEATURES + 1), torch.randn(64, ROW_FEATURES + 1)
    assert row_map_spread(x[:, :8], x_alt[:, :8], [x], [x_alt]) is None
    few = torch.randn(20, 4)  # 20 rows cannot fit 4 slopes and a shared change, 4 rows each
    assert row_map_spread(few, few + 1, [few], [few * 2]) is None
    x, x_alt, w = torch.randn(21, 4), torch.randn(21, 4), torch.randn(4, 3)
    assert row_map_spread(x @ w, x_alt @ w, [x], [x_alt]) is not None



def test_inputs_that_cannot_be_fitted_row_by_row_are_not_read():
    """An input whose rows are too wide is refused from its shape: nothing is computed from it
    (a KernelBench matrix-vector product's 2e9-element matrix shares the output's rows)."""
    from kernelmill.validate.realcode.nonaffine import ROW_FEATURES, row_map_spread

    class Unreadable(torch.Tensor):
        def __sub__(self, other):
            raise AssertionError("an input too wide to fit was read")

    wide = torch.randn(64, ROW_FEATURES + 1).as_subclass(Unreadable)
    y = torch.randn(64, 8)
    assert row_map_spread(y, y + 1, [wide], [wide]) is None


@pytest.mark.parametrize("spread, admitted", [(1.3e-3, True), (1e-2, False)])
def test_a_rounded_answer_passing_beside_a_passthrough_is_admitted_by_it(spread, admitted):
    """A bf16 answer within the tolerance, off by 3% of the variation of what the output
    computes beyond its input's passthrough, is admitted by the passthrough (a denoiser at low
    noise); off by 0.4% of it, it is the honest rounding of that part."""
    entry = {"output": 0, "informative": 0.7, "magnitude": 0.8, "excess": 0.0, "ratio": 0.0,
             "nonaffine": {"informative": spread, "magnitude": 0.8, "excess": 0.0,
                           "ratio": 0.0}}
    rounded = {"dtype": "bfloat16", "error": 4e-5, "abs_errors": [4e-5]}
    verdict = C.judge_contrast([entry], "float32", C.DEFAULT_THRESHOLDS, TOL, rounded)
    assert (verdict["passed"] is False) is admitted, verdict
    if admitted:
        assert "passthroughs of its inputs" in verdict["detail"]
    failing = {**rounded, "error": 2e-4, "abs_errors": [2e-4]}
    assert C.judge_contrast([entry], "float32", C.DEFAULT_THRESHOLDS, TOL, failing)["passed"]
