"""The local backend over several processes (``validate.process_backend``): every item done
once, by more than one interpreter; a task's error and a child's death end the run with one
line; the children's GPU budgets share one ledger per GPU."""
import multiprocessing
import os
import subprocess
import sys
import textwrap
import time

import pytest
from kernelmill.core.errors import KernelmillError
from kernelmill.validate import admission
from kernelmill.validate.backends import LocalBackend, get_backend
from kernelmill.validate.host_admission import HostLedger
from kernelmill.validate.process_backend import ProcessBackend

SLOTS = [{"device": "cpu", "gpu": None, "env": {}} for _ in range(4)]


def _pid_and_switch(item, slot):
    time.sleep(0.05)  # long enough that every child takes some
    import sys

    return {"item": item, "pid": os.getpid(), "switch": sys.getswitchinterval(),
            "ledger": os.environ.get(admission.GPU_LEDGER_VAR)}


def _short_switch():
    import sys

    sys.setswitchinterval(0.0007)


def _fails_on_three(item, slot):
    if item == 3:
        raise ValueError("three is not allowed")
    return item


def _dies_on_five(item, slot):
    if item == 5:
        os._exit(7)
    time.sleep(0.01)
    return item


def test_every_item_is_done_once_by_several_interpreters():
    backend = get_backend("local", device="cpu", workers=4, processes=2,
                          initializer=_short_switch)
    assert isinstance(backend, ProcessBackend) and len(backend.slots) == 4
    got = list(backend.map_unordered(_pid_and_switch, range(24)))
    assert sorted(item for item, _ in got) == list(range(24))
    assert all(result["item"] == item for item, result in got)
    pids = {result["pid"] for _, result in got}
    assert len(pids) == 2 and os.getpid() not in pids, pids
    # each child ran the initializer, and was told where the GPU budgets' ledgers are
    assert {result["switch"] for _, result in got} == {0.0007}
    ledgers = {result["ledger"] for _, result in got}
    assert len(ledgers) == 1 and None not in ledgers
    assert not os.path.exists(ledgers.pop())  # removed with the run
    # one process asked for: the threads of this one, as before
    assert isinstance(get_backend("local", device="cpu", workers=2, processes=1), LocalBackend)


def test_a_failing_task_ends_the_run_with_one_line():
    backend = ProcessBackend(SLOTS, 2)
    with pytest.raises(KernelmillError) as caught:
        list(backend.map_unordered(_fails_on_three, range(8)))
    message = str(caught.value)
    assert "item 3" in message and "ValueError: three is not allowed" in message
    assert "\n" not in message


def test_a_child_that_dies_ends_the_run_and_what_came_before_is_kept():
    backend = ProcessBackend(SLOTS[:2], 2)
    seen = []
    with pytest.raises(KernelmillError) as caught:
        for item, result in backend.map_unordered(_dies_on_five, range(12)):
            seen.append(result)
    message = str(caught.value)
    assert "exit code 7" in message and "\n" not in message
    # (the items it was heard taking are named; what it sent last may not have left it)
    assert "items not done (a rerun resumes)" in message, message
    assert 5 not in seen and len(seen) >= 1


def _hold(folder, held, ready, stop):
    ledger = HostLedger(folder)
    ledger.set(held)
    ready.set()
    stop.wait(30)


def test_budgets_of_sibling_processes_share_one_ledger_per_gpu(tmp_path, monkeypatch):
    """A grading process's GPU budget counts what its siblings hold as theirs, not free."""
    context = multiprocessing.get_context("spawn")
    ready, stop = context.Event(), context.Event()
    sibling = context.Process(target=_hold, args=(str(tmp_path / "gpu7"), 30 << 30, ready, stop))
    sibling.start()
    try:
        assert ready.wait(60)
        monkeypatch.setenv(admission.GPU_LEDGER_VAR, str(tmp_path))
        monkeypatch.setitem(admission._BUDGETS, 7, None)
        monkeypatch.delitem(admission._BUDGETS, 7)
        # the GPU reads 50 GiB free of 80: the sibling's 30 are in use, but shared with it
        budget = admission.budget_for({"gpu": 7}, read=lambda slot: (50 << 30, 80 << 30))
        assert budget.shared is not None and budget.shared.others() == 30 << 30
        assert budget.capacity == int((80 << 30) * (1 - admission.MARGIN))
    finally:
        stop.set()
        sibling.join(30)
        admission._BUDGETS.pop(7, None)


def _slow_after_first(item, slot):
    if item:
        time.sleep(60)
    return item


def test_a_caller_that_stops_early_stops_the_children_at_once():
    """What they would grade next would be written by no one: they are stopped, not waited
    for (a benchmark's time limit, a ctrl-C)."""
    backend = ProcessBackend(SLOTS[:2], 2)
    results = backend.map_unordered(_slow_after_first, range(6))
    assert next(results) == (0, 0)
    began = time.monotonic()
    results.close()
    assert time.monotonic() - began < 20


BIG = textwrap.dedent("""
    import sys, time
    from kernelmill.validate.process_backend import ProcessBackend

    SLOTS = [{"device": "cpu", "gpu": None, "env": {}} for _ in range(4)]

    def big(item, slot):
        time.sleep(0.01)
        return item[:1] * 200_000  # results larger than a pipe's buffer

    def dies(item, slot):
        if item[0] == 7:
            import os
            os._exit(9)
        return big(item, slot)

    if __name__ == "__main__":
        items = [bytes([i % 256]) * 20_000 for i in range(200)]
        backend = ProcessBackend(SLOTS, 2)
        got = 0
        try:  # the caller fails while the children have results on the way
            for item, result in backend.map_unordered(big, items):
                got += 1
                if got == 5:
                    raise RuntimeError("the caller fails")
        except RuntimeError:
            pass
        results = backend.map_unordered(big, items[:40])  # results pile up, then it stops
        next(results)
        time.sleep(2)
        results.close()
        try:
            list(backend.map_unordered(dies, items[:60]))
        except Exception as exc:
            print("died:", exc)
        assert sorted(r[0] for _i, r in backend.map_unordered(big, items[:60])) == \\
            sorted(i[0] for i in items[:60])
        print("ok", got)
""")


def test_large_items_and_results_never_leave_the_parent_waiting(tmp_path):
    """Items and results larger than a pipe's buffer: a caller that fails, one that stops with
    results waiting, a child that dies mid-run; every case ends, and a later run works."""
    script = tmp_path / "big.py"
    script.write_text(BIG)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[-1] == "ok 5", done.stdout
    assert any(line.startswith("died: a grading process") and "exit code 9" in line
               for line in lines), done.stdout
