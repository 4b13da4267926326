"""Memory admission on fake GPU sizes: threads asking for budget, OOM reruns, too_large."""
import os
import threading
import time

import pytest

from kernelmill.validate.admission import (CAP_FACTOR, RETRY_GROWTH, GpuBudget, Tenancy,
                                           budget_for, reset_budgets, run_admitted)

GIB = 1 << 30


class Gpu:
    """A fake GPU: tasks allocate on it while they run; going past ``total`` is out of memory."""

    def __init__(self, total: int):
        self.total, self.used, self.peak = total, 0, 0
        self.lock = threading.Lock()
        self.concurrent = self.max_concurrent = 0

    def run(self, need: int, seconds: float = 0.05) -> str:
        with self.lock:
            self.concurrent += 1
            self.max_concurrent = max(self.max_concurrent, self.concurrent)
            fits = self.used + need <= self.total
            if fits:
                self.used += need
                self.peak = max(self.peak, self.used)
        time.sleep(seconds)
        with self.lock:
            self.concurrent -= 1
            if fits:
                self.used -= need
        return "ok" if fits else "CUDA out of memory"


def oom(result) -> bool:
    return "out of memory" in result


def run_threads(budget: GpuBudget, gpu: Gpu, needs: list[int | None], real=None) -> list:
    results = [None] * len(needs)

    def task(i):
        actual = real[i] if real else needs[i]
        results[i] = run_admitted(budget, needs[i], lambda: gpu.run(actual), oom)

    threads = [threading.Thread(target=task, args=(i,)) for i in range(len(needs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "admission deadlocked"
    return results


def test_tasks_share_a_gpu_only_as_far_as_their_estimates_fit():
    gpu = Gpu(100 * GIB)
    budget = GpuBudget(100 * GIB, 100 * GIB, margin=0.1)
    results = run_threads(budget, gpu, [30 * GIB] * 9)
    assert all(r.result == "ok" and not r.retried_alone and not r.too_large for r in results)
    assert gpu.peak <= budget.capacity == 90 * GIB
    # each asks for 30 GiB x the allocator factor: as many as fit in 90 GiB ran together, no more
    assert gpu.max_concurrent == (90 * GIB) // budget.need_for(30 * GIB) >= 2
    assert budget.used == 0 and budget.holders == 0


def test_without_admission_the_same_tasks_run_out_of_memory():
    gpu = Gpu(100 * GIB)
    results = run_threads(None, gpu, [30 * GIB] * 9)
    assert sum(r.result != "ok" for r in results) > 0


def test_a_task_larger_than_the_budget_runs_alone_and_others_wait():
    gpu = Gpu(100 * GIB)
    budget = GpuBudget(100 * GIB, margin=0.1)
    results = run_threads(budget, gpu, [10 * GIB, 95 * GIB, 10 * GIB, 10 * GIB])
    assert all(r.result == "ok" for r in results)
    # 95 GiB > 90 GiB budget: it ran with nobody else (its real use fit the real GPU)
    assert gpu.peak <= 100 * GIB


def test_unknown_estimates_count_as_half_the_gpu():
    budget = GpuBudget(100 * GIB, margin=0.0)
    assert budget.need_for(None) == 50 * GIB
    gpu = Gpu(100 * GIB)
    run_threads(budget, gpu, [None] * 5, real=[10 * GIB] * 5)
    assert gpu.max_concurrent == 2


def test_an_underestimate_that_runs_out_of_memory_while_sharing_is_rerun_alone():
    gpu = Gpu(100 * GIB)
    budget = GpuBudget(100 * GIB, margin=0.0)
    # each claims 20 GiB but really needs 60: two side by side go out of memory
    results = run_threads(budget, gpu, [20 * GIB] * 4, real=[60 * GIB] * 4)
    assert all(r.result == "ok" and not r.too_large for r in results)
    assert any(r.retried_alone for r in results)


def test_out_of_memory_alone_is_too_large_not_a_failure_to_run():
    gpu = Gpu(100 * GIB)
    budget = GpuBudget(100 * GIB, margin=0.0)
    alone = run_admitted(budget, 10 * GIB, lambda: gpu.run(120 * GIB), oom)
    assert alone.too_large and not alone.retried_alone  # it was alone: no point rerunning
    shared = run_threads(budget, gpu, [10 * GIB, 10 * GIB], real=[120 * GIB, 120 * GIB])
    assert all(r.too_large for r in shared)
    assert any(r.retried_alone for r in shared)  # they overlapped: each got a run alone


def test_an_old_waiter_is_not_overtaken_forever():
    budget = GpuBudget(100 * GIB, margin=0.0, max_wait_s=0.2)
    first = budget.acquire(30 * GIB)
    order = []

    def big():
        with budget.hold(80 * GIB):
            order.append("big")

    def small():
        with budget.hold(50 * GIB):  # more than the 20 the big task leaves beside itself
            order.append("small")
            time.sleep(0.05)

    t_big = threading.Thread(target=big)
    t_big.start()
    time.sleep(0.4)  # past max_wait_s: the big task is protected now
    t_small = threading.Thread(target=small)
    t_small.start()
    time.sleep(0.2)
    assert order == []  # 50 would fit beside the 30, but it may not pass the old waiter
    budget.release(first)
    t_big.join(5)
    t_small.join(5)
    assert order[0] == "big"


def test_tasks_that_fit_beside_a_protected_waiter_start_and_never_hold_it_back():
    budget = GpuBudget(100 * GIB, margin=0.0, max_wait_s=0.2, factor=1.0)
    first = budget.acquire(60 * GIB)
    events = []

    def big():
        with budget.hold(70 * GIB):  # leaves 30 beside itself
            events.append(("big", budget.used))

    def small(n):
        with budget.hold(15 * GIB):
            events.append((f"small{n}", budget.used))
            time.sleep(1.0)  # still running when the first task goes

    t_big = threading.Thread(target=big)
    t_big.start()
    time.sleep(0.4)  # protected now: without backfill nothing newer would start
    smalls = [threading.Thread(target=small, args=(n,)) for n in range(3)]
    for t in smalls:
        t.start()
    time.sleep(0.2)
    # two fit in the 30 the big task leaves (and beside the 60 now); the third waits
    assert len(events) == 2 and all(name.startswith("small") for name, _ in events)
    assert budget.backfills == 2 and budget.used == 90 * GIB
    budget.release(first)
    t_big.join(0.5)
    assert not t_big.is_alive()  # it started at once, beside the two still running
    assert ("big", 100 * GIB) in events
    for t in smalls:
        t.join(5)
    assert budget.used == 0 and len(events) == 4


def test_a_young_waiter_lets_smaller_tasks_fill_the_gap():
    budget = GpuBudget(100 * GIB, margin=0.0, max_wait_s=60)
    first = budget.acquire(60 * GIB)
    waiting = threading.Thread(target=lambda: budget.release(budget.acquire(50 * GIB)))
    waiting.start()
    time.sleep(0.1)
    small = budget.acquire(30 * GIB)  # fits beside the 60 while the 50 waits
    assert budget.used == 90 * GIB
    budget.release(small)
    budget.release(first)
    waiting.join(5)
    assert not waiting.is_alive() and budget.used == 0


def never(result) -> bool:
    return False


def _waiter(budget: GpuBudget, need: int, started: list) -> threading.Thread:
    def task():
        with budget.hold(need):
            started.append(need)
            time.sleep(0.05)

    thread = threading.Thread(target=task)
    thread.start()
    return thread


def test_a_problems_second_worker_keeps_its_grant_instead_of_queueing_again():
    # the probe ran alone (it asks for more than half the GPU); newer problems queue behind it
    budget = GpuBudget(100 * GIB, margin=0.0, max_wait_s=60, factor=1.0)
    started: list = []
    with Tenancy(budget) as tenancy:
        probe = tenancy.run(80 * GIB, lambda: "ok", never)
        waiters = [_waiter(budget, 40 * GIB, started) for _ in range(3)]
        time.sleep(0.1)
        assert started == []  # 40 does not fit beside 80
        replay = tenancy.run(50 * GIB, lambda: budget.used, never)
        # the replay started at once on the grant it kept, shrunk to its ask: 50 held, and
        # one 40 waiter fits beside it at last
        assert replay.waited_s == 0.0 and replay.result == 50 * GIB
        assert probe.need == 80 * GIB and replay.need == 50 * GIB
    for thread in waiters:
        thread.join(5)
    assert started == [40 * GIB] * 3 and budget.used == 0


def test_a_second_run_that_asks_for_more_queues_again_without_deadlock():
    budget = GpuBudget(100 * GIB, margin=0.0, max_wait_s=0.2, factor=1.0)
    results = []

    def problem():
        with Tenancy(budget) as tenancy:
            tenancy.run(45 * GIB, lambda: time.sleep(0.05), never)
            # both hold 45 and want 70: growing in place would deadlock the two
            results.append(tenancy.run(70 * GIB, lambda: budget.used, never).result)

    threads = [threading.Thread(target=problem) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads), "admission deadlocked"
    assert sorted(results) == [70 * GIB, 70 * GIB] and budget.used == 0


def test_a_library_error_while_sharing_is_rerun_alone_and_kept_when_it_recurs_alone():
    budget = GpuBudget(100 * GIB, margin=0.0, max_wait_s=60, factor=1.0)
    suspect = lambda result: "CUDNN_STATUS_INTERNAL_ERROR" in result  # noqa: E731
    other = budget.acquire(50 * GIB)  # another worker shares the GPU
    runs = []

    def flaky():  # fails while another worker holds memory, passes alone
        runs.append(budget.holders)
        return "cuDNN error: CUDNN_STATUS_INTERNAL_ERROR" if budget.holders > 1 else "ok"

    releaser = threading.Timer(0.2, lambda: budget.release(other))
    releaser.start()
    with Tenancy(budget) as tenancy:
        admitted = tenancy.run(10 * GIB, flaky, oom, suspect)
    assert admitted.result == "ok" and admitted.retried_alone and not admitted.too_large
    assert runs == [2, 1]
    with Tenancy(budget) as tenancy:  # alone from the start: a real failure, kept as it is
        again = tenancy.run(10 * GIB, lambda: "CUDNN_STATUS_INTERNAL_ERROR", oom, suspect)
    assert not again.retried_alone and not again.too_large
    assert again.result == "CUDNN_STATUS_INTERNAL_ERROR"


def test_a_too_large_grant_shrunk_to_a_fitting_ask_shares_the_gpu_again():
    budget = GpuBudget(100 * GIB, margin=0.0, max_wait_s=60)
    started: list = []
    grant = budget.acquire(150 * GIB)  # more than the GPU: alone
    waiter = _waiter(budget, 10 * GIB, started)
    time.sleep(0.1)
    assert started == []
    budget.shrink(grant, 30 * GIB)
    waiter.join(5)
    assert started == [10 * GIB]
    budget.release(grant)
    alone = budget.acquire(20 * GIB, alone=True)  # asked to be alone: stays alone when shrunk
    budget.shrink(alone, 5 * GIB)
    second = _waiter(budget, 10 * GIB, started)
    time.sleep(0.1)
    assert started == [10 * GIB]
    budget.release(alone)
    second.join(5)
    assert started == [10 * GIB] * 2 and budget.used == 0


def test_occupancy_accounts_for_the_time_alone_draining_and_shared():
    budget = GpuBudget(100 * GIB, margin=0.0, max_wait_s=0.2)
    first = budget.acquire(60 * GIB)
    big = threading.Thread(target=lambda: budget.release(budget.acquire(150 * GIB)))
    big.start()  # waits for an empty GPU; protected after 0.2 s: the GPU drains for it
    time.sleep(0.5)
    budget.release(first)
    big.join(5)
    time.sleep(0.1)
    occ = budget.occupancy()
    assert 0.55 < occ["wall_s"] < 5
    assert 0.4 < occ["one_holder_s"] < 3  # the 60 alone, then the big task
    # from the waiter's first wake-up after 0.2 s of waiting until the 60 went at 0.5 s
    assert 0.05 < occ["draining_s"] < 0.5
    assert occ["several_s"] == 0 and occ["empty_s"] >= 0.09 and occ["idle_waiting_s"] < 0.05
    assert 0.3 < occ["mean_fill"] < 1.0 and occ["peak_holders"] == 1


def test_budgets_are_per_physical_gpu_and_read_once():
    reset_budgets()
    reads = []

    def read(slot):
        reads.append(slot["gpu"])
        return 80 * GIB, 80 * GIB

    try:
        assert budget_for({"device": "cpu", "gpu": None}, read) is None
        a = budget_for({"device": "cuda:0", "gpu": 3}, read)
        b = budget_for({"device": "cuda:0", "gpu": 3}, read)
        c = budget_for({"device": "cuda:0", "gpu": 5}, read)
        assert a is b and a is not c and reads == [3, 5]
        assert a.capacity == int(80 * GIB * 0.9)
        assert budget_for({"device": "cuda:0", "gpu": 7}, lambda slot: None) is None
    finally:
        reset_budgets()


def test_a_run_that_meets_its_cap_runs_again_beside_others_with_a_larger_cap_first():
    budget = GpuBudget(100 * GIB, margin=0.0)
    caps: list = []
    others = budget.acquire(20 * GIB)  # another problem holds part of the GPU throughout

    def run_needing(live):  # its live tensors need ``live``; its cap is what it may hold
        def capped_run():
            caps.append(tenancy.cap)
            return "CUDA out of memory" if tenancy.cap and tenancy.cap < live else "ok"
        return capped_run

    first_cap = int(budget.need_for(10 * GIB) * CAP_FACTOR)
    with Tenancy(budget, caps=True) as tenancy:  # 30 GiB: the larger cap is enough, shared
        admitted = tenancy.run(10 * GIB, run_needing(30 * GIB), oom)
        assert tenancy.grant.need == int(first_cap * RETRY_GROWTH) and budget.holders == 2
    assert admitted.result == "ok" and admitted.retried_larger and not admitted.retried_alone
    assert caps == [first_cap, int(first_cap * RETRY_GROWTH)]  # the retry: capped at its grant
    assert admitted.memory_info()["retried_larger"] is True
    caps.clear()
    budget.release(others)
    with Tenancy(budget, caps=True) as tenancy:  # 70 GiB: the larger cap is not, alone is
        admitted = tenancy.run(10 * GIB, run_needing(70 * GIB), oom)
    assert admitted.result == "ok" and admitted.retried_larger and admitted.retried_alone
    assert caps[-1] is None and not admitted.too_large
    with Tenancy(budget, caps=True) as tenancy:  # out of memory uncapped and alone: too large
        big = tenancy.run(10 * GIB, lambda: "CUDA out of memory", oom)
    assert big.too_large and big.retried_alone
    with Tenancy(budget, caps=True) as tenancy:  # a cap whose double is over half: alone next
        caps.clear()
        huge = tenancy.run(30 * GIB, run_needing(90 * GIB), oom)
    assert huge.retried_alone and not huge.retried_larger and caps[-1] is None
    with Tenancy(budget) as tenancy:  # without caps nothing is capped, as before
        plain = tenancy.run(10 * GIB, lambda: "CUDA out of memory", oom)
    assert plain.too_large and not plain.retried_alone and tenancy.cap is None
    answers = iter(["CUDA out of memory", "CUDNN_STATUS_INTERNAL_ERROR", "ok"])
    with Tenancy(budget, caps=True) as tenancy:  # the larger retry met a library error: alone
        mixed = tenancy.run(10 * GIB, lambda: next(answers), oom,
                            lambda r: "CUDNN" in str(r))
    assert mixed.result == "ok" and mixed.retried_larger and mixed.retried_alone


def test_a_retry_keeps_its_place_ahead_of_tasks_that_asked_after_it():
    budget = GpuBudget(100 * GIB, margin=0.0, max_wait_s=0.2)
    holder = budget.acquire(60 * GIB)
    asked = time.monotonic() - 1.0  # the retried task first asked a second ago
    order: list[str] = []

    def take(name, need, since=None):
        grant = budget.acquire(need, since=since)
        order.append(name)
        time.sleep(0.05)
        budget.release(grant)

    newer = threading.Thread(target=take, args=("newer", 60 * GIB))
    newer.start()
    time.sleep(0.1)  # the newer task waits first, but asked after the retried one
    retry = threading.Thread(target=take, args=("retry", 60 * GIB, asked))
    retry.start()
    time.sleep(0.1)
    budget.release(holder)
    newer.join(5)
    retry.join(5)
    assert order == ["retry", "newer"]


FAKE_SMI = """#!/bin/sh
case "$*" in
  *index,uuid,name*) echo "0, GPU-aaaa-1111, NVIDIA H200"; echo "1, GPU-bbbb-2222, NVIDIA H200" ;;
  *"-i GPU-bbbb-2222 --query-gpu=memory.free,memory.total"*) echo "140000, 143771" ;;
  *) exit 3 ;;
esac
"""


def test_a_gpus_memory_is_read_from_nvidia_smi_without_a_worker(tmp_path, monkeypatch):
    """The budget of GPU 1 (named by index in the slot's environment) from ``nvidia-smi``: no
    worker, which would import torch first, is started."""
    from kernelmill.validate import admission, harness
    from kernelmill.validate import gpus as W

    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(W, "_GPUS", {})
    monkeypatch.setattr(harness, "run_in_worker", lambda *a, **k: pytest.fail("a worker ran"))
    slot = {"device": "cuda:0", "gpu": 1, "env": {"CUDA_VISIBLE_DEVICES": "1"}}
    assert admission.read_gpu_memory(slot) == (140000 * 2**20, 143771 * 2**20)
    # a GPU nvidia-smi does not list: no reading here (the worker reads it instead)
    assert W.gpu_memory("cuda:0", {"CUDA_VISIBLE_DEVICES": "7"}) is None
    assert W.gpu_memory("cpu") is None


def test_a_replays_retry_does_not_overtake_a_waiter_protected_before_it_asked():
    """The retry keeps its own run's place (when that run asked), not the problem's first ask:
    a waiter protected while the problem's probe ran stays ahead of the replay's retry."""
    budget = GpuBudget(100 * GIB, margin=0.0, max_wait_s=0.2)
    holder = budget.acquire(30 * GIB)
    order: list[str] = []
    with Tenancy(budget, caps=True) as tenancy:
        tenancy.run(10 * GIB, lambda: "ok", oom)  # the probe, which keeps its grant

        def waiter():
            grant = budget.acquire(70 * GIB)
            order.append("waiter")
            time.sleep(0.1)
            budget.release(grant)

        waiting = threading.Thread(target=waiter)
        waiting.start()
        time.sleep(0.3)  # the waiter is protected now
        threading.Timer(0.2, budget.release, args=(holder,)).start()
        replies = iter(["CUDA out of memory", "ok"])

        def replay():
            answer = next(replies)
            if answer == "ok":
                order.append("retry")
            return answer

        admitted = tenancy.run(10 * GIB, replay, oom)
        waiting.join(5)
    assert admitted.retried_larger and order == ["waiter", "retry"]


def test_grant_seconds_weigh_each_stage_by_the_grant_its_worker_held():
    from kernelmill.validate.stage_times import grant_seconds, grant_table

    records = [{"validation": {"memory": {"need_bytes": 10 * GIB,
                                          "replay": {"need_bytes": 4 * GIB}},
                               "profile": {"probe.wall": 6.0, "probe.startup": 1.0,
                                           "probe.cpu_s": 9.0, "replay.wall": 5.0,
                                           "replay.inductor compile": 3.0,
                                           "estimate_s": 0.5}}},
               {"validation": {"memory": {"need_bytes": 20 * GIB},  # no replay
                               "profile": {"probe.wall": 2.0, "probe.startup": 2.0}}}]
    spent = grant_seconds(records)
    assert spent["probe.startup"] == 10 * GIB * 1.0 + 20 * GIB * 2.0
    assert spent["replay.inductor compile"] == 4 * GIB * 3.0
    assert spent["probe.wall"] == 10 * GIB * 6.0 + 20 * GIB * 2.0
    assert "probe.cpu_s" not in spent and "estimate_s" not in spent  # not a grant's time
    table = grant_table(records, 100 * GIB, wall_s=2.0)
    # (60 + 40 + 20) GiB-s over a 100 GiB budget: 1.2 s of a 2 s run
    assert "held the whole budget 1 s of the run's 2 s (60%)" in table
    assert table.index("probe.startup") < table.index("replay.inductor compile")
