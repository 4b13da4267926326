"""A deferred job (``run_in_worker(deferred=...)``): the worker starts before its job is known,
its job is written once made, and its time limit counts from then."""
import threading
import time

import torch
from kernelmill.validate.harness import Control, run_in_worker

SOURCE = '''
from kernelmill.validate.harness_worker import late_payload


def main(payload):
    part = late_payload(0)
    return {"shown": float(payload["x"].sum()), "late": float(part["y"].sum()),
            "n": len(payload["x"])}
'''


def _answer_late_parts(control: Control) -> None:
    """The parent's side of ``late_payload`` (a timing window's, ``window._answer``)."""
    while not control.ended:
        got = control.next_report(0.5)
        if got is not None and isinstance(got[1].get("late"), int):
            control.release_late(got[1]["late"])
            control.send(f"late {got[1]['late']}")


def test_a_deferred_job_is_written_once_made_and_its_time_limit_starts_then():
    control = Control()

    def made():
        time.sleep(4)  # longer than the worker's own limit
        return {"payload": {"source": SOURCE, "x": torch.ones(1 << 15)},  # the tensor file's
                "late": [{"y": torch.full((1 << 15,), 2.0)}]}

    answering = threading.Thread(target=_answer_late_parts, args=(control,), daemon=True)
    answering.start()
    result = run_in_worker("kernelmill.validate.harness:run_source", {}, timeout_s=3,
                           device="cpu", control=control, deferred=made)
    answering.join(timeout=5)
    assert result.ok, (result.error, result.stderr_tail)
    assert result.value == {"shown": 32768.0, "late": 65536.0, "n": 32768}
    assert 4.0 <= result.job_wait_s < result.wall_s
    assert control.late_released == [0]


def test_a_job_that_cannot_be_made_ends_its_worker_at_once_with_that_error():
    control = Control()

    def made():
        time.sleep(1)
        raise RuntimeError("reference failed in forward")

    began = time.monotonic()
    result = run_in_worker("kernelmill.validate.harness:echo", {}, timeout_s=60, device="cpu",
                           control=control, deferred=made)
    assert not result.ok and time.monotonic() - began < 30
    assert result.error["stage"] == "job"
    assert "reference failed in forward" in result.error["message"]
    assert result.leaked_processes == 0


def test_a_deferred_job_needs_a_control_pipe():
    import pytest

    with pytest.raises(ValueError, match="control pipe"):
        run_in_worker("kernelmill.validate.harness:echo", {}, timeout_s=5, device="cpu",
                      deferred=lambda: {"payload": {}})
