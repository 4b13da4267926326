"""The validator's side of the grading distributions (T-19) and of buffer sensitivity: the probe,
in-process, on small problems written here. Which distributions keep a reference stable
(``validation.distributions``) and whether the output depends on each floating-point buffer
(``buffer_sensitive``)."""
import pytest
from kernelmill.validate import checks as C
from kernelmill.validate.distributions import DISTRIBUTIONS, NOISE_SHARE
from kernelmill.validate.probe import probe_problem

TAIL = '''

def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
'''


def problem(forward: str, init: str = "") -> str:
    body = "    def __init__(self):\n        super().__init__()\n" + init if init else ""
    return ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n" + body +
            f"    def forward(self, x):\n        return {forward}\n" + TAIL)


def probe(source: str) -> tuple[dict, dict]:
    m = probe_problem({"source": source, "device": "cpu", "seed": 0, "ablations": None})
    return m, C.judge(m)


def test_a_reference_that_overflows_under_scaled_inputs_records_scaled_unsupported():
    m, checks = probe(problem("torch.exp(x)"))
    dists = m["distributions"]
    assert set(dists) == set(DISTRIBUTIONS)
    # 32x + 64 reaches exp's float32 overflow; 3x + 2 does not
    assert dists["scaled"]["supported"] is False and dists["scaled"]["finite"] is False
    assert dists["affine"]["supported"] is True and dists["affine"]["finite"] is True
    assert dists["natural"]["supported"] is True
    # the problem itself is fine: a distribution it cannot take is not a failed check
    assert C.summarize(checks)[0], C.summarize(checks)[1]


def test_softmax_keeps_every_distribution_with_its_noise_under_the_share_of_the_tolerance():
    m, _checks = probe(problem("torch.softmax(x, dim=-1)"))
    tol = m["tolerance"]["tol"]
    for name, entry in m["distributions"].items():
        assert entry["supported"] is True and entry["finite"] is True, (name, entry)
        assert entry["noise"] is not None and entry["noise"] <= NOISE_SHARE * tol, (name, entry)
        if name != "natural":
            assert entry["limit"] == pytest.approx(NOISE_SHARE * tol)


def test_a_reference_whose_rounding_fills_the_tolerance_under_a_distribution_drops_it():
    # a difference of two nearly equal large sums: under ``scaled`` (a shift of 64) each sum is
    # ~16,000 and their difference ~100, so float32's rounding of the sums is a large share of
    # the answer; on the problem's own draws the sums are small and it is exact enough
    m, _checks = probe(problem("x.sum(-1, keepdim=True) - (x * 1.0001).sum(-1, keepdim=True)"
                               " + x"))
    scaled = m["distributions"]["scaled"]
    assert scaled["finite"] is True
    assert scaled["noise"] > scaled["limit"] and scaled["supported"] is False, scaled
    assert m["distributions"]["natural"]["supported"] is True


UNUSED_BUFFER = '''        self.linear = nn.Linear(256, 256)
        self.register_buffer("scale", torch.rand(256) + 0.5)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
'''


def test_a_floating_buffer_forward_ignores_fails_buffer_sensitive_by_name():
    _m, checks = probe(problem("torch.tanh(self.linear(x))", UNUSED_BUFFER))
    verdict = checks["buffer_sensitive"]
    assert verdict["passed"] is False and "buffer scale" in verdict["detail"], verdict
    assert "steps" not in verdict["detail"]  # an integer buffer is never perturbed
    assert "buffer_sensitive" in C.summarize(checks)[1]
    _m, checks = probe(problem("torch.tanh(self.linear(x)) * self.scale", UNUSED_BUFFER))
    assert checks["buffer_sensitive"]["passed"] is True, checks["buffer_sensitive"]


BATCHNORM = '''        self.linear = nn.Linear(256, 128)
        self.bn = nn.BatchNorm1d(128)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
'''


def test_batchnorm_in_eval_mode_depends_on_its_running_statistics_and_passes():
    m, checks = probe(problem("torch.relu(self.bn(self.linear(x)))",
                              BATCHNORM + "        self.eval()\n"))
    verdict = checks["buffer_sensitive"]
    assert verdict["passed"] is True, verdict
    assert "bn.running_mean" in verdict["detail"] and "bn.running_var" in verdict["detail"]
    assert not m["buffer_sensitivity"]["written"]
    assert C.summarize(checks)[0], {f: checks[f]["detail"] for f in C.summarize(checks)[1]}


def test_batchnorm_in_training_mode_writes_its_running_statistics_and_they_are_not_judged():
    m, checks = probe(problem("torch.relu(self.bn(self.linear(x)))", BATCHNORM))
    assert sorted(m["buffer_sensitivity"]["written"]) == ["bn.running_mean", "bn.running_var"]
    assert checks["buffer_sensitive"]["passed"] is None
    assert C.summarize(checks)[0], {f: checks[f]["detail"] for f in C.summarize(checks)[1]}


def test_an_ignored_buffer_beside_written_running_statistics_still_fails():
    init = BATCHNORM + '        self.register_buffer("shift", torch.randn(128))\n'
    _m, checks = probe(problem("torch.relu(self.bn(self.linear(x)))", init))
    verdict = checks["buffer_sensitive"]
    assert verdict["passed"] is False and "buffer shift" in verdict["detail"], verdict
    assert "written by forward, not judged: bn.running_mean, bn.running_var" in verdict["detail"]


def test_a_get_inputs_that_hands_out_a_kept_tensor_is_not_changed_by_the_distributions():
    """The distributions stage scales a draw out of place: a module-level input handed out by
    every ``get_inputs`` call keeps its values, so later stages see the problem's own draws."""
    source = ("import torch\nimport torch.nn as nn\n\nX = torch.randn(64, 256)\n\n\n"
              "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
              "        self.fc = nn.Linear(256, 256)\n\n    def forward(self, x):\n"
              "        return torch.tanh(self.fc(x))\n\n\ndef get_inputs():\n    return [X]\n\n\n"
              "def get_init_inputs():\n    return []\n")
    m, checks = probe(source)
    assert all(entry["supported"] for entry in m["distributions"].values()), m["distributions"]
    assert C.summarize(checks)[0] or "no_dead_work" not in C.summarize(checks)[1], \
        C.summarize(checks)[1]
    assert checks["no_dead_work"]["passed"] is not False, checks["no_dead_work"]
