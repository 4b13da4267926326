"""The worker's pinned staging buffer (``grade.worker.inputs._Staging``): device tensors looked at
on the host through one page-locked buffer, kept ones copied out of it."""
import pytest
import torch
from kernelmill.grade.worker.inputs import STAGING_MAX_BYTES, _Staging
from kernelmill.validate.measure import same_bits


def test_host_tensors_are_copied_and_never_staged():
    staging = _Staging()
    value = torch.arange(1 << 16, dtype=torch.float32)
    looked = staging.look(value)
    assert same_bits(looked, value) and looked.data_ptr() != value.data_ptr()
    assert staging.buffer is None  # nothing pinned off a GPU
    assert staging.keep(looked) is looked  # a copy of its own already


@pytest.mark.gpu
def test_cuda_tensors_are_seen_through_one_pinned_buffer_and_kept_apart_from_it():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    staging = _Staging()
    first = torch.randn(1 << 20, device="cuda")
    looked = staging.look(first)
    assert looked.is_pinned() and same_bits(looked, first.cpu())
    kept = staging.keep(looked)
    assert not kept.is_pinned() and kept.data_ptr() != looked.data_ptr()
    second = torch.randint(0, 100, (512, 256), device="cuda", dtype=torch.int16)
    again = staging.look(second)  # the same buffer, another dtype and shape
    assert again.data_ptr() == looked.data_ptr() and same_bits(again, second.cpu())
    assert same_bits(kept, first.cpu())  # the kept copy is its own
    strided = torch.randn(256, 512, device="cuda").t()
    assert not staging.look(strided).is_pinned()  # not contiguous: a copy of its own
    assert same_bits(staging.look(strided), strided.cpu())
    big = torch.empty(STAGING_MAX_BYTES + 4, dtype=torch.uint8, device="cuda")
    assert not staging.look(big).is_pinned()
