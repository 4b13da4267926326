"""Memory admission on fake GPU sizes: threads asking for budget, OOM reruns, too_large."""
import threading
import time

from kernelmill.validate.admission import GpuBudget, budget_for, reset_budgets, run_admitted

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
    first = budget.acquire(60 * GIB)
    order = []

    def big():
        with budget.hold(50 * GIB):
            order.append("big")

    def small():
        with budget.hold(30 * GIB):
            order.append("small")
            time.sleep(0.05)

    t_big = threading.Thread(target=big)
    t_big.start()
    time.sleep(0.4)  # past max_wait_s: the big task is protected now
    t_small = threading.Thread(target=small)
    t_small.start()
    time.sleep(0.2)
    assert order == []  # 30 would fit beside the 60, but it may not pass the old waiter
    budget.release(first)
    t_big.join(5)
    t_small.join(5)
    assert order[0] == "big"


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
