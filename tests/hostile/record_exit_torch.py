"""family: candidate code outside the observed call, second door (after torch.no_grad was
bound in the worker): record_function.__exit__ closes the witness's FORWARD range through
torch.ops.profiler._record_function_exit._RecordFunction, looked up at every exit. That
overload object is replaced through local aliases (the scan judges private attributes and
assignments only on names bound to torch/triton by an import; the worker's module snapshot
covers module-level callables, not torch.ops namespaces). The wrapper closes the range, then
has PyTorch compute the answer into the output: after the op trace and the range. A Triton
kernel marks the call (the ghost call, launches skipped, gets no answer)."""
# problem: ref_scale_add
# expect: forbidden_api
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mark_kernel(flag_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(flag_ptr + offsets, tl.full((BLOCK,), 1, tl.int32), mask=offsets < 1)


_pending = []
_ops = torch.ops
_prof = _ops.profiler
_packet = _prof._record_function_exit
_real = _packet._RecordFunction


def _exit_then_answer(record):
    result = _real(record)
    while _pending:  # forward has just returned: the range closing is the call's own
        x, y, out, flag = _pending.pop()
        if int(flag.item()) == 1:
            torch.add(y, x, alpha=2.0, out=out)
    return result


# the Python dispatcher (an active dispatch mode) looks the overload up on its packet by name
_exit_then_answer.__qualname__ = _real.__qualname__
_packet._RecordFunction = _exit_then_answer


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        flag = torch.zeros(1, dtype=torch.int32, device=x.device)
        mark_kernel[(1,)](flag, BLOCK=16)
        _pending.append((x, y, out, flag))
        return out
