"""The grader uses only the input distributions a record's validation supports (T-19,
``validation.distributions``): a reference that overflows under ``scaled`` inputs is graded on
the others; a record without the field is graded on all of the policy's."""
from kernelmill.grade import reference_run as R
from kernelmill.grade.grader import Grader
from kernelmill.grade.policy import Policy
from kernelmill.validate.probe import probe_problem

EXP = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.exp(x)


def get_inputs():
    return [torch.randn(4096)]


def get_init_inputs():
    return []
'''

EXP_TRITON = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def exp_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.exp(tl.load(x_ptr + offsets, mask=mask)), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        exp_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
'''


def record(distributions=None) -> dict:
    validation = {"atol": 1e-4, "rtol": 1e-4}
    if distributions is not None:
        validation["distributions"] = distributions
    return {"id": "exp", "source": EXP, "validation": validation}


def test_the_policy_keeps_only_the_distributions_a_record_supports():
    policy = Policy()
    assert policy.distributions_for(None) == ("natural", "scaled", "affine")
    assert policy.distributions_for(record()) == ("natural", "scaled", "affine")
    unsupported = {"supported": False, "finite": False}
    assert policy.distributions_for(record({"natural": {"supported": True},
                                            "scaled": unsupported,
                                            "affine": {"supported": True}})) == \
        ("natural", "affine")
    # a distribution the record did not measure stays; the problem's own draws always do
    assert policy.distributions_for(record({"scaled": unsupported})) == ("natural", "affine")
    assert Policy(distributions=("scaled",)).distributions_for(
        record({"scaled": unsupported})) == ("natural",)


def test_a_reference_that_overflows_under_scaled_inputs_is_never_graded_on_them(monkeypatch):
    measured = probe_problem({"source": EXP, "device": "cpu", "seed": 0, "ablations": None})
    assert measured["distributions"]["scaled"]["supported"] is False
    dists: list[str] = []
    real = R.run_in_worker

    def seen(target, payload, **kwargs):
        if str(target).endswith("reference_task"):
            for run in payload.get("runs") or [payload]:
                dists.extend(t["dist"] for t in run["trials"])
        return real(target, payload, **kwargs)

    monkeypatch.setattr(R, "run_in_worker", seen)  # the reference workers start there
    grader = Grader("cpu", policy=Policy(timeout_s=60, static_first=False, time=False))
    # without the field every trial cycles over the policy's distributions, scaled among them
    assert "scaled" in {t["dist"] for t in grader._fresh_seeds()["trials"]}
    verdict = grader.grade(EXP, EXP_TRITON,
                           record=record(measured["distributions"]))
    assert verdict["correct"], (verdict.get("error"),
                                {k: c for k, c in verdict["checks"].items() if not c["passed"]})
    assert dists and "scaled" not in dists and "affine" in dists, dists


def test_the_supported_distributions_travel_through_trl_columns_and_the_verl_export():
    from kernelmill.grade.service.verl import submission
    from kernelmill.grade.trl import _records_from_columns
    from kernelmill.splits.verl import verl_rows

    measured = {"natural": {"supported": True, "noise": 1e-8},
                "affine": {"supported": True, "noise": 2e-8},
                "scaled": {"supported": False, "finite": False}}
    column = [{"name": "natural", "supported": True}, {"name": "affine", "supported": True},
              {"name": "scaled", "supported": False}]
    records = _records_from_columns({"atol": [1e-4, 1e-4], "distributions": [column, None]}, 2)
    assert Policy().distributions_for(records[0]) == ("natural", "affine")
    assert records[1] == {"validation": {"atol": 1e-4}}  # no column value: every distribution
    assert Policy().distributions_for(records[1]) == ("natural", "scaled", "affine")
    row = verl_rows({"exp": {**record(measured), "name": "exp"}})[0]
    assert row["extra_info"]["calibration"]["distributions"] == column
    sent = submission("```python\nx = 1\n```", "exp", row["extra_info"])
    assert Policy().distributions_for(sent["record"]) == ("natural", "affine")
