"""Validation on CUDA (``pytest -m gpu``): every seed passes; defects are caught there too."""
import json
import os
import re
from pathlib import Path

from conftest import FIXTURES

import pytest
from kernelmill.core.interop import import_folder
from kernelmill.core.record import Record
from kernelmill.data import SEEDS_DIR
from kernelmill.validate.runner import validate_file
from kernelmill.validate.settings import NON_GATING

pytestmark = pytest.mark.gpu
DEFECTIVE = FIXTURES / "problems_defective"
HEALTHY = FIXTURES / "problems_healthy"


@pytest.fixture(scope="module")
def cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.fail("the gpu tests need a CUDA device")
    return torch


@pytest.fixture(scope="module")
def validated_seeds(cuda, tmp_path_factory):
    # KERNELMILL_TEST_OUT keeps the records (``scripts/gpu_check.sh`` sets it to its output)
    kept = os.environ.get("KERNELMILL_TEST_OUT")
    folder = Path(kept) if kept else tmp_path_factory.mktemp("validate_gpu")
    folder.mkdir(parents=True, exist_ok=True)
    src, out = folder / "seeds.jsonl", folder / "validated.jsonl"
    src.unlink(missing_ok=True)
    out.unlink(missing_ok=True)
    import_folder(SEEDS_DIR, src, generator="seed")
    validate_file(src, out, device="cuda", progress=False)
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_all_seeds_pass_on_cuda(validated_seeds):
    failing = {r["name"]: {f: r["validation"]["checks"][f]["detail"]
                           for f in r["validation"]["flags"]}
               for r in validated_seeds if not r["validation"]["passed"]}
    assert not failing, json.dumps(failing, indent=1)


def test_gpu_measurements_are_recorded(validated_seeds):
    for record in validated_seeds:
        v = record["validation"]
        if not v["passed"]:
            continue
        assert v["device"] == "cuda" and v["resized"] is None
        for name in ("runtime", "inductor", "roofline"):
            assert v["checks"][name]["passed"] is not None, (record["name"], name)
        launch = v["checks"]["launch_overhead"]
        assert launch["passed"] is not None or "waits for the GPU" in launch["detail"]
        assert "across 2 workers" in v["checks"]["deterministic"]["detail"]
        assert v["eager_ms"] > 0 and v["inductor_ms"] > 0 and v["inductor_speedup"] > 0
        assert v["roofline_ms"] > 0 and v["headroom"] > 0


def test_defective_problems_fail_on_cuda(cuda, tmp_path):
    src, out = tmp_path / "defective.jsonl", tmp_path / "out.jsonl"
    expected = {}
    with src.open("w") as handle:
        for path in sorted(DEFECTIVE.glob("*.py")):
            text = path.read_text()
            # every reason in ``expect:``; or, where the fixture names them (``expect-cuda:``),
            # one of the reasons its CUDA calibration may leave to bite
            line = "expect-cuda:" if "expect-cuda:" in text else "expect:"
            reasons = {f.strip() for f in text.split(line, 1)[1].splitlines()[0].split(",")}
            expected[path.stem] = (line, reasons)
            handle.write(json.dumps(Record.from_source(text, name=path.stem).to_dict()) + "\n")
    kept = os.environ.get("KERNELMILL_TEST_OUT")
    if kept:
        Path(kept).mkdir(parents=True, exist_ok=True)
        out = Path(kept) / "defective_validated.jsonl"
        out.unlink(missing_ok=True)
    validate_file(src, out, device="cuda", config={"timeout_s": 60, "inductor": False},
                  progress=False)
    wrong = {}  # every fixture judged, then all that went otherwise told at once
    rows = out.read_text().splitlines()
    assert sorted(json.loads(row)["name"] for row in rows) == sorted(expected)
    for row in rows:
        record = json.loads(row)
        v = record["validation"]
        line, reasons = expected[record["name"]]
        # a reason bites where its check failed: a check that describes without gating
        # (``NON_GATING``: constant_params_used) fails without rejecting the problem
        failed = {name for name, check in v["checks"].items() if check["passed"] is False}
        missed = not reasons & failed if line == "expect-cuda:" else reasons - failed
        if missed or (v["passed"] and reasons - NON_GATING):
            wrong[record["name"]] = {"flags": v["flags"], "failed": sorted(failed),
                                     line: sorted(reasons)}
    assert not wrong, json.dumps(wrong, indent=1)


def test_healthy_fixtures_pass_on_cuda(cuda, tmp_path):
    """The healthy real-code fixtures pass every check on CUDA but those of their time: they are
    sized for the CPU, so a GPU may run them under the runtime band or launch-bound."""
    src, out = tmp_path / "healthy.jsonl", tmp_path / "out.jsonl"
    paths = sorted(HEALTHY.glob("*.py"))
    with src.open("w") as handle:
        for path in paths:
            record = Record.from_source(path.read_text(), name=path.stem)
            handle.write(json.dumps(record.to_dict()) + "\n")
    kept = os.environ.get("KERNELMILL_TEST_OUT")
    if kept:
        Path(kept).mkdir(parents=True, exist_ok=True)
        out = Path(kept) / "healthy_validated.jsonl"
        out.unlink(missing_ok=True)
    validate_file(src, out, device="cuda", config={"timeout_s": 60, "inductor": False},
                  progress=False)
    rows = [json.loads(row) for row in out.read_text().splitlines()]
    assert sorted(r["name"] for r in rows) == sorted(p.stem for p in paths)
    timed = {"runtime", "launch_overhead", "inductor"}
    failing = {r["name"]: {f: r["validation"]["checks"][f]["detail"]
                           for f in r["validation"]["flags"] if f not in timed}
               for r in rows}
    failing = {name: flags for name, flags in failing.items() if flags}
    assert not failing, json.dumps(failing, indent=1)


def test_launch_bound_loop_with_host_syncs_fails_on_cuda(cuda):
    """A loop of tiny steps, each read back to the host, fails ``launch_overhead`` like a loop
    without syncs; real work with a sync between passes it (its kernels keep the GPU busy)."""
    from kernelmill.core.devices import device_slots
    from kernelmill.validate.runner import validate_source
    from test_launch_syncs import LOOP_WITH_SYNCS, MATMUL_WITH_SYNC

    slot, config = device_slots("cuda")[0], {"timeout_s": 120, "inductor": False}
    loop = validate_source(LOOP_WITH_SYNCS, slot, config)
    launch = loop["checks"]["launch_overhead"]
    assert launch["passed"] is False, launch
    syncs = re.search(r"waits for the GPU (\d+) time", launch["detail"])
    assert syncs and int(syncs.group(1)) >= 150, launch
    assert "line 14: .item()" in launch["detail"]
    big = MATMUL_WITH_SYNC.replace("384", "4096")
    matmul = validate_source(big, slot, config)
    launch = matmul["checks"]["launch_overhead"]
    assert launch["passed"] is True and "waits for the GPU" in launch["detail"], launch


def test_a_launch_queue_full_of_real_work_is_not_launch_overhead_on_cuda(cuda):
    """Thousands of launches of real work on a GPU slower than its host (the driver's queue
    fills, and the host's time tracks the GPU's) pass ``launch_overhead``, with the device's
    record of them kept; a loop of as many tiny launches, its GPU idle between them, fails.
    (cuDNN's tiled FFT transposed convolutions read host-bound in the validator's workers: 8.6
    us a launch for 8.6 us of GPU, on an H200.)"""
    from kernelmill.core.devices import device_slots
    from kernelmill.validate.runner import validate_source
    from test_launch_syncs import LOOP_OF_LAUNCHES, QUEUED_MATMULS

    slot, config = device_slots("cuda")[0], {"timeout_s": 240, "inductor": False}
    chain = validate_source(QUEUED_MATMULS, slot, config)
    launch = chain["checks"]["launch_overhead"]
    assert launch["passed"] is True, launch
    loop = validate_source(LOOP_OF_LAUNCHES, slot, config)
    launch = loop["checks"]["launch_overhead"]
    assert launch["passed"] is False, launch
    work = (loop["timing"] or {}).get("device_work") or {}
    assert work.get("kernels", 0) >= 1200, loop["timing"]
