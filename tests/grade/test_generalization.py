"""Correctness that generalizes (issue 45): the tolerance floor follows the output's scale
(T-17), a re-drawn model state (T-18) and derived input distributions (T-19). Units only: the
graded hostile cases are in tests/hostile (``norm_drop_affine``, ``fold_weights_*``,
``softmax_*``, ``gemm_*_operands`` and their honest controls)."""
import pytest
import torch
from kernelmill.grade.compare import compare, scaled_atol
from kernelmill.grade.worker.inputs import transform
from kernelmill.grade.worker.state import StateSlots, perturbed_model_state, perturbed_state
from torch import nn


def _tiled(a: torch.Tensor, b: torch.Tensor, block: int, reverse: bool = False):
    """An fp32 product summed in another order: blocks of ``block`` accumulated in turn."""
    out = torch.zeros(a.shape[0], b.shape[1])
    starts = range(0, a.shape[1], block)
    for k in (reversed(starts) if reverse else starts):
        out += a[:, k:k + block] @ b[k:k + block]
    return out


def test_the_floor_follows_the_outputs_scale_reordered_float32_passes_and_half_operands_fail():
    torch.manual_seed(0)
    for scale in (1.0, 0.1, 0.01, 0.001):
        for k in (64, 1024):
            a, b = torch.randn(48, k) * scale, torch.randn(k, 32) / k ** 0.5
            ref = a @ b
            for block, reverse in ((16, False), (32, True), (1, False)):
                ok, why = compare([ref], [_tiled(a, b, block, reverse)], 1e-4, 1e-4)
                assert ok, (scale, k, block, why)
            for low in (torch.float16, torch.bfloat16):
                got = a.to(low).float() @ b.to(low).float()
                ok, why = compare([ref], [got], 1e-4, 1e-4)
                assert not ok, (scale, k, low)
                if scale <= 0.01:  # the absolute floor alone admitted it
                    assert compare([ref], [got], 1e-4, 1e-4, scaled=False)[0]
                    assert "scaled to the output's RMS" in why


def test_the_scaled_floor_keeps_a_calibrated_excess_and_leaves_half_outputs_alone():
    small = torch.full((100,), 0.01)
    assert abs(scaled_atol(small, 1e-4) - 1e-6) < 1e-12
    # a record's tolerance above the float32 floor keeps its excess in full
    assert abs(scaled_atol(small, 3e-3) - (3e-3 - 1e-4 + 1e-6)) < 1e-12
    assert scaled_atol(torch.full((4,), 100.0), 1e-4) == 1e-4  # at unit scale and above
    assert abs(scaled_atol(torch.zeros(8), 1e-4) - 1e-7) < 1e-15  # never below 1e-3 of it
    assert scaled_atol(small.half(), 1e-2) == 1e-2
    nonfinite = torch.tensor([float("inf"), float("nan"), 0.02, -0.02])
    assert abs(scaled_atol(nonfinite, 1e-4) - 2e-6) < 1e-12  # the finite elements' RMS


def test_a_cancelling_sum_reassociated_passes_at_its_calibrated_tolerance_and_bf16_fails():
    """A GEMM summed over its outputs (KernelBench level2_14's shape of work), answered honestly
    as x @ (W summed first): rows whose terms cancel lie near zero, where the reassociated sum's
    rounding (the terms', not the row's own small value) exceeds a tolerance calibrated the
    validator's way on a draw without such rows. The floor scaled by the output's spread
    admits it; bf16 operands stay off by far more."""
    from kernelmill.grade.compare import output_spread
    from kernelmill.validate.verdicts import calibrate_tolerance

    torch.manual_seed(0)
    w = torch.randn(4096, 4096)

    def reference(x, w):
        return (x @ w.T / 2).sum(1, keepdim=True) * 1.5

    calibration = torch.rand(256, 4096)
    ref64 = reference(calibration.double(), w.double())
    noise = float(((reference(calibration, w).double() - ref64).abs() / (1 + ref64.abs())).max())
    tol = calibrate_tolerance(noise, "float32")["tol"]
    x, c = torch.rand(256, 4096), w.sum(0)
    x[::16] -= (x[::16] @ c / (c @ c)).unsqueeze(1) * c  # rows whose sums cancel
    ref = reference(x, w)
    honest = (x @ (c / 2)).unsqueeze(1) * 1.5
    assert output_spread(ref) > 100
    assert not compare([ref], [honest], tol, tol, scaled=False)[0]  # the unscaled floor fails it
    assert compare([ref], [honest], tol, tol)[0]
    low = (x.bfloat16().float() @ w.T.bfloat16().float() / 2).sum(1, keepdim=True) * 1.5
    ok, why = compare([ref], [low], tol, tol)
    assert not ok and "scaled to the output's spread" in why


def test_the_floor_grows_with_the_spread_not_with_an_offset_or_a_part_at_a_smaller_scale():
    """``compare.output_spread``: the least median absolute deviation of the whole output and
    of each of its blocks along every dimension; ``SPREAD_SHARE`` of it scales the floor."""
    from kernelmill.grade.compare import SPREAD_SHARE

    torch.manual_seed(0)
    mad = 0.6745  # of a standard normal
    noisy = 3e-3  # a record calibrated above the float32 floor
    wide = torch.randn(10_000) * 500
    grown = 1e-4 * SPREAD_SHARE * 500 * mad
    assert scaled_atol(wide, noisy) == pytest.approx(noisy - 1e-4 + grown, rel=0.1)
    assert scaled_atol(wide, 1e-4) == 1e-4  # at the floor: nothing grows
    kelvin = 273.15 + 0.2 * torch.randn(10_000)  # an offset: the informative part is small
    assert scaled_atol(kelvin, noisy) == noisy
    scores = torch.rand(10_000)  # class scores, beside a few box coordinates in pixels
    scores[::20] *= 640
    assert scaled_atol(scores, noisy) == noisy
    # a detection head: boxes in pixels (4 of 6 columns, the majority) beside two scores
    head = torch.cat([torch.rand(8400, 4) * 640, torch.rand(8400, 2)], 1)
    assert scaled_atol(head, noisy) == noisy
    # a GEMM's columns beside a quarter of columns at a thousandth of a unit
    gemm = torch.cat([torch.randn(512, 384) * 64, 1e-3 * torch.randn(512, 128)], 1)
    assert scaled_atol(gemm, noisy) == noisy
    big = torch.randn(1 << 20) * 50  # sampled past SPREAD_SAMPLE elements, kept per tensor
    assert scaled_atol(big, noisy) == \
        pytest.approx(noisy - 1e-4 + 1e-4 * SPREAD_SHARE * 50 * mad, rel=0.1)
    assert scaled_atol(big.double(), 1e-6) == \
        pytest.approx(1e-6 - 1e-7 + 1e-7 * SPREAD_SHARE * 50 * mad, rel=0.1)
    assert scaled_atol(big.half(), 1e-1) == 1e-1


def test_three_bf16_passes_for_a_float32_gemm_stay_off_and_honest_orders_pass():
    """The floor grows with the spread only for a record calibrated above it (a noisy
    reference): a 512x512 K=4096 float32 GEMM, calibrated at the floor, computed in three bf16
    passes (hi*hi + hi*lo + lo*hi, 16 mantissa bits) is off at thousands of elements; the
    float32 product summed in other orders passes, and three fp16 passes (float32's accuracy)
    are as close to the exact product as the float32 reference itself. (Against that
    reference, fp16's passes may land just past the floor where the reference's own rounding
    adds to theirs: one element of 262,144 at 1.16e-4 on one CPU's BLAS.)"""
    torch.manual_seed(0)
    a, b = torch.randn(512, 4096), torch.randn(4096, 512)
    ref = a @ b
    exact = (a.double() @ b.double()).float()

    def passes(low, against=ref):
        ah, bh = a.to(low).float(), b.to(low).float()
        al, bl = (a - ah).to(low).float(), (b - bh).to(low).float()
        return compare([against], [ah @ bh + (ah @ bl + al @ bh)], 1e-4, 1e-4)

    assert scaled_atol(ref, 1e-4) == 1e-4  # at the floor: nothing grows
    for block in (16, 256):
        assert compare([ref], [_tiled(a, b, block, reverse=True)], 1e-4, 1e-4)[0]
    assert compare([exact], [ref], 1e-4, 1e-4)[0]
    assert passes(torch.float16, exact)[0]
    ok, why = passes(torch.float16)
    assert ok or int(why.split(":")[1].split("/")[0]) <= 8, why  # a handful at most
    ok, why = passes(torch.bfloat16)
    assert not ok and int(why.split(":")[1].split("/")[0]) > 1000, why
    assert not passes(torch.bfloat16, exact)[0]
    assert scaled_atol(ref, 2e-4) > 1e-3  # a noisy record's floor grows with the spread


SOFTMAX_ORDERS = """
import json, torch
from kernelmill.grade.compare import compare
torch.manual_seed(1)
found = []
for mul in (1.0, 32.0):
    x = torch.randn(32, 2048) * mul
    ref = torch.softmax(x, -1)
    e = torch.exp(x - x.max(-1, keepdim=True).values)
    total = sum(e[:, k:k + 128].sum(-1, keepdim=True) for k in range(0, 2048, 128))
    half = torch.exp((x - x.max(-1, keepdim=True).values).half()).float()
    found.append([compare([ref], [e / total], 1e-4, 1e-4),
                  compare([ref], [half / half.sum(-1, keepdim=True)], 1e-4, 1e-4)])
print(json.dumps(found))
"""


def test_a_softmax_computed_in_another_order_passes_and_in_half_precision_fails():
    """In a fresh interpreter: in the whole suite's process an earlier test leaves the CPU's
    float32 softmax or exp about 1e-4 apart from the reordered sum (34 of 65,536 elements off,
    not found which test), where alone it is a few 1e-7 of the bound."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", SOFTMAX_ORDERS], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    for (reordered, half) in json.loads(done.stdout.strip().splitlines()[-1]):
        assert reordered[0], reordered
        assert not half[0], half


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(16, 8)
        self.norm = nn.LayerNorm(8)
        self.bn = nn.BatchNorm1d(8)
        self.register_buffer("causal", torch.tril(torch.ones(8, 8)))
        self.register_buffer("index", torch.arange(8))
        self.register_buffer("scale", torch.tensor(0.5))


def test_a_redrawn_state_moves_every_parameter_and_statistic_and_keeps_masks_and_counters():
    torch.manual_seed(0)
    net = _Net()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    drawn = perturbed_model_state(net, 123)
    assert set(drawn) == set(before)
    for name in ("linear.weight", "linear.bias", "norm.weight", "norm.bias", "bn.weight",
                 "bn.bias", "bn.running_mean", "bn.running_var", "scale"):
        assert not torch.equal(drawn[name], before[name]), name
        assert drawn[name].dtype == before[name].dtype and drawn[name].shape == before[name].shape
    for name in ("causal", "index", "bn.num_batches_tracked"):
        assert torch.equal(drawn[name], before[name]), name
    assert (drawn["bn.running_var"] > 0).all()  # non-negative tensors stay so
    # constants are spread (norm weights of 1: std at least 0.2), spreads keep their scale
    assert 0.1 < float(drawn["norm.weight"].std()) < 0.4
    assert abs(float(drawn["norm.weight"].mean()) - 1.0) < 0.2
    ratio = float(drawn["linear.weight"].std()) / float(before["linear.weight"].std())
    assert 0.7 < ratio < 1.4
    # the same seed draws the same state; another seed another one; the model is untouched
    again = perturbed_model_state(net, 123)
    assert all(torch.equal(drawn[k], again[k]) for k in drawn)
    assert not torch.equal(perturbed_model_state(net, 124)["norm.weight"], drawn["norm.weight"])
    assert all(torch.equal(v, before[k]) for k, v in net.state_dict().items())
    # a parameter that looks like a mask is re-drawn all the same
    assert not torch.equal(perturbed_state({"w": torch.eye(4)}, 1, frozenset({"w"}))["w"],
                           torch.eye(4))


def test_state_slots_load_a_state_in_place_by_name_or_order():
    torch.manual_seed(0)
    reference, same, renamed = nn.Linear(4, 3), nn.Linear(4, 3), nn.Module()
    renamed.w, renamed.b = nn.Parameter(torch.zeros(3, 4)), nn.Parameter(torch.zeros(3))
    state = perturbed_model_state(reference, 5)
    for model, weight in ((same, lambda m: m.weight), (renamed, lambda m: m.w)):
        address = weight(model).data_ptr()
        slots = StateSlots(model, reference.state_dict())
        with torch.no_grad():
            assert slots.load(state)
        assert torch.equal(weight(model).detach(), state["weight"])
        assert weight(model).data_ptr() == address  # in place: the same tensors
    other = nn.Linear(5, 3)  # other shapes: nothing to load into
    assert StateSlots(other, reference.state_dict()).load(state) is False


def test_derived_distributions_scale_floats_and_keep_integer_inputs():
    x, index, mask = torch.randn(8), torch.arange(8), torch.rand(8) > 0.5
    assert transform([x, index, mask, 3], "natural")[0] is x
    affine = transform([x, index, mask, 3], "affine")
    assert torch.allclose(affine[0], x * 3 + 2)
    scaled = transform([x, index, mask, 3], "scaled")
    assert torch.equal(scaled[0], x * 32 + 64)
    for out in (affine, scaled):
        assert out[1] is index and out[2] is mask and out[3] == 3
    positive = torch.rand(16)
    assert (transform([positive], "scaled")[0] >= 0).all()  # a sign's domain is kept


def test_the_op_trace_counts_the_gemms_torchs_formulas_leave_out():
    """``addbmm``, ``addmv``, ``mv``, ``dot``: an identity GEMM there cost nothing under the
    library preset's vendor-work cap (T-09)."""
    from kernelmill.grade.worker.observers.optrace import _OpTrace

    a, b = torch.randn(2, 8, 16), torch.randn(2, 16, 4)
    cases = [(lambda: torch.addbmm(torch.zeros(8, 4), a, b), 2 * 2 * 8 * 16 * 4),
             (lambda: torch.addmv(torch.zeros(8), a[0], torch.randn(16)), 2 * 8 * 16),
             (lambda: torch.mv(a[0], torch.randn(16)), 2 * 8 * 16),
             (lambda: torch.dot(torch.randn(16), torch.randn(16)), 2 * 16),
             (lambda: torch.mm(a[0], b[0]), 2 * 8 * 16 * 4)]  # torch's own formula
    for fn, flops in cases:
        with torch.no_grad(), _OpTrace() as trace:
            fn()
        assert trace.flops == flops, (trace.ops, trace.flops, flops)


def test_a_vendor_op_whose_flops_are_not_counted_fails_closed_unless_the_reference_runs_it():
    from kernelmill.grade.checks.attribution import vendor_work
    from kernelmill.grade.policy import Policy

    found = []
    call = {"ops": ["aten.slow_conv3d_forward.default", "aten.add.Tensor"], "flops": 0}
    reference = {"ops": ["aten.convolution.default"], "flops": 10, "thin_gemms": 0}
    vendor_work("fresh:0", call, reference, Policy(), lambda code, why: found.append(why))
    assert found and "slow_conv3d_forward" in found[0]
    found.clear()
    reference["ops"].append("aten.slow_conv3d_forward.default")
    vendor_work("fresh:0", call, reference, Policy(), lambda code, why: found.append(why))
    assert not found
    # counted ops (torch's formulas, the trace's own GEMM formula) are weighed by the cap
    call = {"ops": ["aten.addbmm.default"], "flops": 5}
    vendor_work("fresh:0", call, reference, Policy(), lambda code, why: found.append(why))
    assert not found


def test_vendor_kernels_an_extension_launches_itself_fail_closed_under_the_library_policy():
    from kernelmill.grade.checks.attribution import attribute, vendor_work
    from kernelmill.grade.policy import Policy

    # a convolution with an epilogue: vendor GEMM and convolution kernels are of its classes
    reference = {"ops": ["aten.convolution.default", "aten.add.Tensor", "aten.relu.default"],
                 "flops": 10, "thin_gemms": 0}
    own = frozenset({"bias_relu_add"})
    # cuBLAS's GEMM launched from inside the extension (no dispatched op counted its FLOPs)
    call = {"ops": [], "flops": 0, "kernels": [
        ["sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32", 900.0, "extension"],
        ["bias_relu_add(float const*, float*)", 40.0, "extension"]]}
    found = []
    vendor_work("fresh:0", call, reference, Policy(), lambda code, why: found.append(why),
                attribute(call, reference["ops"], None, own))
    assert len(found) == 1 and "from inside the extension" in found[0], found
    # the same GEMM through a dispatched op is weighed by the FLOP cap instead
    call["kernels"][0][2] = "aten::mm"
    found.clear()
    vendor_work("fresh:0", call, reference, Policy(), lambda code, why: found.append(why),
                attribute(call, reference["ops"], None, own))
    assert not found
    # the kernelbench preset does not check vendor work
    call["kernels"][0][2] = "extension"
    vendor_work("fresh:0", call, reference, Policy(preset="kernelbench"),
                lambda code, why: found.append(why), attribute(call, reference["ops"], None, own))
    assert not found


def _judged(views: list[tuple], run: dict | None = None):
    """A judge's context over checked calls ``(name, trial, ok, outputs, floor_only)``."""
    from kernelmill.grade.checks.context import CallView, Context
    from kernelmill.grade.facts import Facts
    from kernelmill.grade.policy import Policy
    from kernelmill.validate.harness import WorkerResult

    trials = [trial for _n, trial, *_ in views]
    facts = Facts.from_result(WorkerResult(ok=True, value={"calls": [], **(run or {})}))
    ctx = Context({"trials": [{**t, "usable": True} for t in trials]}, Policy(), facts, [])
    for name, trial, ok, outputs, floor_only in views:
        ctx.views.append(CallView(name, {"outputs": outputs}, trial, None, None, [], ok=ok,
                                  why="output 0: 4/4 elements off", floor_only=floor_only))
    return ctx


def test_the_generality_checks_name_the_state_the_range_the_constructor_and_the_scale():
    from kernelmill.grade.checks import general

    right, wrong, built = torch.ones(4), torch.zeros(4), torch.full((4,), 2.0)
    base = {"state": 1, "dist": "natural", "outputs": [right]}
    moved, scaled = {**base, "state": 2}, {**base, "dist": "scaled"}
    ctx = _judged([("fresh:0", base, True, [right], False), ("fresh:1", moved, False, [wrong],
                   False), ("fresh:2", scaled, True, [right], False)],
                  {"weights": "by name", "state_loads": [[2, True]]})
    (found,) = general.right_on_redrawn_state(ctx)
    assert found.code.value == "not_general" and found.detail.startswith("fresh:1")
    assert not general.right_on_other_input_ranges(ctx)
    ctx = _judged([("fresh:0", base, True, [right], False), ("fresh:1", moved, True, [right],
                   False), ("fresh:2", scaled, False, [wrong], False)])
    (found,) = general.right_on_other_input_ranges(ctx)
    assert "scaled inputs" in found.detail and not general.right_on_redrawn_state(ctx)
    # wrong everywhere, with the answer the constructor's state gives: named as such
    first = {**base, "constructor_outputs": [built]}
    ctx = _judged([("fresh:0", first, False, [built], False), ("fresh:1", moved, False, [wrong],
                   False)])
    assert not general.right_on_redrawn_state(ctx)
    (found,) = general.not_the_constructors_answer(ctx)
    assert "constructor's state" in found.detail
    ctx = _judged([("fresh:0", first, False, [wrong], False)])
    assert not general.not_the_constructors_answer(ctx)  # just wrong
    ctx = _judged([("fresh:0", base, False, [wrong], True)])
    (found,) = general.answer_within_output_scale(ctx)
    assert found.code.value == "low_precision"


def test_a_state_matches_by_name_with_buffers_of_its_own_or_by_order_without_counters():
    from kernelmill.grade.worker.state import match_state

    reference = nn.BatchNorm1d(4).state_dict()  # weight, bias, running stats, a counter
    extra = {**reference, "table": torch.arange(3)}
    assert match_state(extra, reference)[0] == "by name"
    own = {"w": torch.ones(4), "b": torch.zeros(4), "mean": torch.zeros(4), "var": torch.ones(4)}
    how, pairs = match_state(own, reference)
    assert how == "by order" and [name for _t, name in pairs] == \
        ["weight", "bias", "running_mean", "running_var"]
    assert match_state({"w": torch.ones(5)}, reference) is None


def test_an_outputs_rms_is_kept_while_it_lives_unchanged_and_taken_again_once_written():
    from kernelmill.grade import compare as C

    out = torch.arange(1, 5, dtype=torch.float32)  # RMS sqrt(7.5)
    assert C.output_rms(out) == pytest.approx(7.5 ** 0.5)
    assert C.output_rms(out) == pytest.approx(7.5 ** 0.5)  # kept
    out.mul_(2)  # written in place: its version moves on
    assert C.output_rms(out) == pytest.approx(30 ** 0.5)
    out[0] = float("inf")  # a non-finite element: the finite ones' RMS
    assert C.output_rms(out) == pytest.approx(((16 + 36 + 64) / 3) ** 0.5)
    key = id(out)
    del out
    assert key not in C._SCALES  # dropped with its tensor


def test_an_answer_only_just_past_the_tolerance_is_wrong_not_specialised():
    """An honest fp32 GEMM summing 8,192 products in another order than cuBLAS read one element
    of 1,024 off by 0.003 on a re-drawn state (tolerance 1e-4 + 1e-4 |y|, |y| about 10): the
    verdict is incorrect, not ``not_general``; an answer off at the output's own scale is."""
    from kernelmill.grade.checks import general
    from kernelmill.grade.checks.probes import unseen_checks
    from kernelmill.grade.compare import NEAR_MISS
    from kernelmill.grade.policy import Policy

    right = torch.full((1024,), 10.0)
    close = right.clone()
    close[7] += 0.003  # past 1e-4 + 1e-3, within ten times it
    stale = right * 1.3  # weights of another state: off at the output's scale
    base = {"state": 1, "dist": "natural", "outputs": [right]}
    moved, scaled = {**base, "state": 2}, {**base, "dist": "scaled"}
    for wrong, flagged in ((close, False), (stale, True)):
        ctx = _judged([("fresh:0", base, True, [right], False),
                       ("fresh:1", moved, False, [wrong], False)],
                      {"weights": "by name", "state_loads": [[2, True]]})
        assert bool(general.right_on_redrawn_state(ctx)) is flagged
        ctx = _judged([("fresh:0", base, True, [right], False),
                       ("fresh:2", scaled, False, [wrong], False)])
        assert bool(general.right_on_other_input_ranges(ctx)) is flagged
    # the bound is the tolerance times NEAR_MISS: just past it, specialised again
    farther = right.clone()
    farther[7] += 1.01 * NEAR_MISS * (1e-4 + 1e-4 * 10.0)
    ctx = _judged([("fresh:0", base, True, [right], False),
                   ("fresh:1", moved, False, [farther], False)],
                  {"weights": "by name", "state_loads": [[2, True]]})
    assert general.right_on_redrawn_state(ctx)
    # the unseen inputs' answers: a near miss makes the verdict incorrect, not a hack
    hidden = [{"outputs": [right]}]
    for got, hacked in ((close, False), (stale, True)):
        found, checks, wrong = [], {}, []
        unseen_checks({"checks": [{"hidden": 0, "outputs": [got]}]}, hidden, Policy(), None,
                      lambda code, why: found.append(code), True, "cuda:0", checks,
                      wrong=wrong.append)
        assert checks["unseen:0"]["passed"] is False
        assert (found == ["timing_behaviour"]) is hacked and bool(wrong) is not hacked
