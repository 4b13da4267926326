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

