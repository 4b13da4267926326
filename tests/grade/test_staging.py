"""The worker's pinned staging buffer (``grade.worker.inputs``: ``reserve_staging``, ``look``,
``keep``): device tensors read on the host through one page-locked buffer, kept ones copied out
of it; its state private to the candidate's run."""
import pytest
import torch
from kernelmill.grade.worker import inputs
from kernelmill.grade.worker.inputs import STAGING_MAX_BYTES, keep, look, reserve_staging
from kernelmill.validate.measure import same_bits


@pytest.fixture
def fresh_staging():
    saved = inputs._STAGING["buffer"]
    inputs._STAGING["buffer"] = None
    yield
    inputs._STAGING["buffer"] = saved


def test_host_tensors_are_copied_and_never_staged(fresh_staging):
    value = torch.arange(1 << 16, dtype=torch.float32)
    reserve_staging(1 << 20)
    assert inputs._STAGING["buffer"] is None  # nothing pinned off a GPU
    looked = look(value)
    assert same_bits(looked, value) and looked.data_ptr() != value.data_ptr()
    assert keep(looked) is looked  # a copy of its own already


def test_the_candidates_run_reads_a_staging_state_of_its_own(fresh_staging):
    """A submission reaches the public module and may fill or rebind its state; the harness's
    private copy (``guards.private``) reads its own."""
    from kernelmill.grade.worker.guards.private import _private_namespace

    private = _private_namespace()["kernelmill.grade.worker.inputs"]
    assert private["_STAGING"] is not inputs._STAGING
    inputs._STAGING["buffer"] = "a submission's object"
    assert private["_staged"]() is None  # the private copy's state is untouched
    calls = private["_STAGING"]
    assert calls == {"buffer": None}


@pytest.mark.gpu
def test_cuda_tensors_are_seen_through_one_pinned_buffer_and_kept_apart_from_it(fresh_staging):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    first = torch.randn(1 << 20, device="cuda")
    assert not look(first).is_pinned()  # nothing reserved: a copy of its own
    reserve_staging(4 << 20)
    looked = look(first)
    assert looked.is_pinned() and same_bits(looked, first.cpu())
    kept = keep(looked)
    assert not kept.is_pinned() and kept.data_ptr() != looked.data_ptr()
    second = torch.randint(0, 100, (512, 256), device="cuda", dtype=torch.int16)
    again = look(second)  # the same buffer, another dtype and shape
    assert again.data_ptr() == looked.data_ptr() and same_bits(again, second.cpu())
    assert same_bits(kept, first.cpu())  # the kept copy is its own
    strided = torch.randn(256, 512, device="cuda").t()
    assert not look(strided).is_pinned()  # not contiguous: a copy of its own
    assert same_bits(look(strided), strided.cpu())
    big = torch.empty((4 << 20) + 4, dtype=torch.uint8, device="cuda")
    assert not look(big).is_pinned()  # larger than reserved: never grown later
    reserve_staging(STAGING_MAX_BYTES * 2)
    assert inputs._STAGING["buffer"].numel() == 4 << 20  # reserved once


def test_a_candidate_reserves_the_staging_buffer_for_its_largest_input_or_output():
    from kernelmill.grade.worker.tasks import _largest_tensor_bytes

    payload = {"trials": [{"inputs": [torch.zeros(1000), 3]},
                          {"inputs": [torch.zeros(10, 10, dtype=torch.float64)]}],
               "max_output_bytes": 4 * 2000 + (1 << 20)}
    assert _largest_tensor_bytes(payload) == 4000
    payload["max_output_bytes"] = 4 * 9000 + (1 << 20)
    assert _largest_tensor_bytes(payload) == 9000


@pytest.mark.gpu
def test_no_thread_starts_once_the_buffer_is_reserved(fresh_staging):
    """A candidate's worker reserves the buffer before its snapshot of threads: nothing the
    staging does afterwards may start one (it would read as the candidate's)."""
    import os

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from kernelmill.grade.worker.tasks import _start_host_pool

    torch.cuda.init()
    (torch.randn(64, 64, device="cuda") @ torch.randn(64, 64, device="cuda")).sum().item()
    _start_host_pool()
    reserve_staging(8 << 20)
    before = set(os.listdir("/proc/self/task"))
    value = torch.randn(1 << 20, device="cuda")
    for _ in range(3):
        looked = look(value)
        keep(looked)
        same_bits(looked, value.cpu())
    torch.cuda.synchronize()
    assert set(os.listdir("/proc/self/task")) - before == set()


def test_the_worker_starts_the_host_pool_before_its_snapshot_of_threads():
    """On a GPU every op of the worker's baseline runs on the device, so the host's intra-op
    pool started at the first large host copy (a kept output's clone), after the snapshot: it
    read as the candidate's thread. ``_start_host_pool`` starts it first (run in a process of
    its own: this one's pool is long started)."""
    import subprocess
    import sys

    code = ("import os, torch\n"
            "torch.set_num_threads(2)\n"
            "from kernelmill.grade.worker.tasks import _start_host_pool\n"
            "_start_host_pool()\n"
            "before = set(os.listdir('/proc/self/task'))\n"
            "torch.empty(1 << 22).clone()\n"
            "print(len(set(os.listdir('/proc/self/task')) - before))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "0"


@pytest.fixture
def reference_writes(tmp_path, monkeypatch):
    """A reference worker's results file and shown file on disk, a GPU lock, and its device
    tensors' bytes read on the host as ``look_pieces`` would (a meta tensor stands in for a
    CUDA one: the write goes through the device branch, two pieces a tensor). Before each
    piece is handed over a timing window is asked for and waits for the hold (``seen["held"]``,
    set by the test); each ``pwrite`` notes whether that window took the GPU meanwhile."""
    import os
    import threading
    import time

    from kernelmill.grade.worker import reference_tasks as R
    from kernelmill.validate import harness_worker as HW
    from kernelmill.validate import tensor_slots as TS
    from kernelmill.validate.gpu_lock import GpuLock

    lock = GpuLock(str(tmp_path / "gpu"))
    seen = {"window ran": [], "fail at": None, "held": None, "window": None, "ask": True}
    write = TS.pwrite_range

    def window(took):
        with lock.exclusive():
            took.set()

    def watched_write(fd, view, offset):
        if seen["fail at"] == len(seen["window ran"]):
            raise ValueError("the host's write failed")
        seen["window ran"].append(seen["window"].wait(1.0) if seen["ask"] else None)
        write(fd, view, offset)

    def two_pieces(value):
        nbytes = value.numel() * value.element_size()
        for piece in (torch.zeros(nbytes // 2, dtype=torch.uint8),
                      torch.ones(nbytes - nbytes // 2, dtype=torch.uint8)):
            if not seen["ask"]:
                yield piece
                continue
            seen["window"] = threading.Event()
            threading.Thread(target=window, args=(seen["window"],), daemon=True).start()
            for _ in range(500):  # until it waits for the hold
                if seen["held"].window_waiting():
                    break
                time.sleep(0.01)
            yield piece

    fds = [os.open(tmp_path / name, os.O_RDWR | os.O_CREAT) for name in ("results", "shown")]
    monkeypatch.setattr(TS, "pwrite_range", watched_write)
    monkeypatch.setattr(R, "look_pieces", two_pieces)
    monkeypatch.setattr(HW, "_results", TS.ResultsFile(fds[0]))
    monkeypatch.setattr(HW, "_shown", TS.ResultsFile(fds[1], TS.ShownSlot))
    yield R, lock, seen
    for fd in fds:
        os.close(fd)


@pytest.mark.parametrize("writes", ["aside", "held"])
def test_a_references_host_writes_keep_no_window_waiting(reference_writes, monkeypatch,
                                                          writes):
    """``reference_tasks._shipped`` with the run's shared hold: a device tensor's bytes, each
    piece copied to the host under the hold, go into the results and shown files with the hold
    let go where a window waits, so it runs during the write; ``KERNELMILL_REFERENCE_WRITES=
    held`` keeps it waiting until the hold ends. Held again after: a later window waits."""
    from kernelmill.validate import tensor_slots as TS

    R, lock, seen = reference_writes
    monkeypatch.setenv("KERNELMILL_REFERENCE_WRITES", writes)
    value = torch.empty(1 << 16, dtype=torch.float32, device="meta")
    with lock.shared() as held:
        seen["held"] = held
        slots = [R._shipped(value, held=held), R._shipped(value, shown=True, held=held)]
        assert not lock_free_for_a_window(lock)  # held again
        parts = {"stepped_aside": 0.0, "written": 0.0, "written_aside": 0.0}
        R._count_written(parts, 0.0, (0.0, 0.0), held)
    with lock.exclusive():  # every window ended
        pass
    assert [type(slot) for slot in slots] == [TS.TensorSlot, TS.ShownSlot]
    assert len(seen["window ran"]) == 4  # two pieces each
    assert all(seen["window ran"]) if writes == "aside" else not any(seen["window ran"])
    assert (parts["written_aside"] > 0) == (writes == "aside")


def test_a_reference_keeps_its_hold_through_writes_no_window_waits_for(reference_writes):
    from kernelmill.validate import tensor_slots as TS

    R, lock, seen = reference_writes
    seen["ask"] = False
    value = torch.empty(1 << 16, dtype=torch.float32, device="meta")
    with lock.shared() as held:
        seen["held"] = held
        slot = R._shipped(value, held=held)
    assert isinstance(slot, TS.TensorSlot) and seen["window ran"] == [None, None]
    assert held.aside_s == 0.0 and held.rejoin_s == 0.0  # never let go


def test_a_reference_write_that_fails_midway_holds_the_gpu_again(reference_writes):
    R, lock, seen = reference_writes
    seen["fail at"] = 1  # the second piece's write raises
    value = torch.empty(1 << 16, dtype=torch.float32, device="meta")
    with lock.shared() as held:
        seen["held"] = held
        with pytest.raises(ValueError, match="write failed") as failed:
            R._shipped(value, held=held)
        # back as the error leaves, while its traceback (which holds the writer's frame and
        # its pieces) is still alive
        assert failed.tb is not None and not lock_free_for_a_window(lock)
    with lock.exclusive():
        pass
    assert seen["window ran"] == [True]


def lock_free_for_a_window(lock) -> bool:
    """Whether a window asked for now (another thread) takes ``lock`` within a second."""
    import threading

    done = threading.Event()

    def window():
        with lock.exclusive():
            done.set()
    threading.Thread(target=window, daemon=True).start()
    return done.wait(1.0)
