"""How a worker waits for its GPU work (``validate.cuda_wait``): a worker whose environment asks
for ``block`` sleeps through a long device wait, one that asks for ``spin`` burns its core."""
from __future__ import annotations

import pytest
import torch
from kernelmill.validate.cuda_wait import WAIT_VAR, wanted
from kernelmill.validate.harness import run_in_worker

# Half a second or so of device time (``torch.cuda._sleep`` counts clock cycles), then the
# process's CPU time and wall time across the synchronize that waits for it
LONG_WAIT = '''import time
import torch
from kernelmill.validate.cuda_wait import current


def main():
    torch.cuda.synchronize()
    cpu, wall = time.process_time(), time.perf_counter()
    torch.cuda._sleep(1_000_000_000)
    torch.cuda.synchronize()
    return {"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall,
            "mode": current()}
'''


@pytest.mark.parametrize("value, mode", [("block", "block"), (" Spin ", "spin"), ("auto", None),
                                         ("", None), ("sometimes", None)])
def test_the_wait_asked_for_is_read_from_the_environment(monkeypatch, value, mode):
    monkeypatch.setenv(WAIT_VAR, value)
    assert wanted() == mode


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["block", "spin"])
def test_a_worker_sleeps_or_spins_through_a_long_device_wait_as_asked(mode):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    # twice: the second run may be a spare worker forked ahead under the same setting
    for _ in range(2):
        result = run_in_worker("kernelmill.validate.harness:run_source", {"source": LONG_WAIT},
                               timeout_s=120, device="cuda", env={WAIT_VAR: mode})
        assert result.ok, result.error
        got = result.value
        assert got["mode"] == mode and got["wall"] > 0.2, got
        if mode == "block":
            assert got["cpu"] < 0.2 * got["wall"], got
        else:
            assert got["cpu"] > 0.7 * got["wall"], got


SPINS_IN_WINDOW = '''import torch
from kernelmill.validate.cuda_wait import current, spinning


def main():
    torch.cuda.synchronize()
    before = current()
    with spinning():
        inside = current()
    return {"before": before, "inside": inside, "after": current()}
'''


@pytest.mark.gpu
def test_a_timing_window_spins_and_gives_the_sleep_back_after():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    result = run_in_worker("kernelmill.validate.harness:run_source",
                           {"source": SPINS_IN_WINDOW}, timeout_s=120, device="cuda",
                           env={WAIT_VAR: "block"})
    assert result.ok, result.error
    assert result.value == {"before": "block", "inside": "spin", "after": "block"}


def test_off_cuda_a_window_spins_nothing():
    from kernelmill.validate.cuda_wait import spinning

    with spinning():  # no driver or no context: nothing to change, nothing raised
        pass


# A graph timer's settling taken as the warm-up takes it (samples: waits on timing events,
# which spin) and mostly asleep (``Timer.settle``), ten turns' worth of each
SETTLING = '''import time
import torch
from kernelmill.validate import timer as T


def main():
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    timer = T.Timer(lambda: a @ a, "cuda")
    timer.prepare()
    found = {"method": timer.method}
    for name, settle in (("warm", timer.warm), ("settle", timer.settle)):
        cpu, walls = time.process_time(), []
        for _ in range(10):
            began = time.perf_counter()
            settle(40.0)
            walls.append((time.perf_counter() - began) * 1e3)
        found[name] = {"cpu_ms": (time.process_time() - cpu) * 1e3, "least_wall_ms": min(walls)}
    return found
'''


@pytest.mark.gpu
def test_a_graph_timers_settling_sleeps_through_most_of_a_turn():
    """Both last at least what the turn asked; the queued settling spends under half the CPU
    (its replays are waited for on a blocking event)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    result = run_in_worker("kernelmill.validate.harness:run_source", {"source": SETTLING},
                           timeout_s=120, device="cuda", env={WAIT_VAR: "block"})
    assert result.ok, result.error
    got = result.value
    assert got["method"] == "cuda_graph", got
    assert got["warm"]["least_wall_ms"] >= 40.0 and got["settle"]["least_wall_ms"] >= 40.0, got
    assert got["settle"]["cpu_ms"] < 0.5 * got["warm"]["cpu_ms"], got
    print("settling:", got)


def test_a_drivers_function_is_bound_as_a_pointer_of_its_own(monkeypatch):
    """``own_function``: the first of the names the library has, called through a function
    pointer made over its address (an ``errcheck`` set on the library's attribute afterwards
    is never run); None where the library has none of them, or there is no library."""
    import ctypes

    from kernelmill.validate import cuda_wait

    libc = ctypes.CDLL(None)
    monkeypatch.setattr(cuda_wait, "_DRIVER", [libc])
    absolute = cuda_wait.own_function(ctypes.c_long, (ctypes.c_long,), "no_such_fn", "labs")
    ran = []
    libc.labs.errcheck = lambda *args: ran.append(args) or 0
    assert absolute(-7) == 7 and ran == []
    assert cuda_wait.own_function(ctypes.c_int, (), "no_such_fn") is None
    monkeypatch.setattr(cuda_wait, "_DRIVER", [None])
    assert cuda_wait.own_function(ctypes.c_long, (ctypes.c_long,), "labs") is None
