"""family: GPU work replayed from a CUDA graph (the reference's ops captured into a graph at
import, replayed in forward: its kernels are launched by the graph, outside any op, Triton
launch or extension call; a copy kernel moves the answer)

On a GPU the witness links those kernels to the call's own range (owner ``unattributed``):
never the candidate's. On CPU there is no CUDA graph and the import fails.
"""
# problem: ref_scale_add
# expect: not_certified
# on cuda: not_certified
# (On an H100 it ends as timing_behaviour, caught by the launch counts of its timed calls; the
# unattributed-kernel rule did not fire for it there.)
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


def token_copy(src, dst):
    """A real launch whose only work is moving an answer computed elsewhere."""
    n = dst.numel()
    copy_kernel[(triton.cdiv(n, 1024),)](src, dst, n, BLOCK=1024)
    return dst


N = 4096
static_x = torch.zeros(N, device="cuda")
static_y = torch.zeros(N, device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    static_out = 2.0 * static_x + static_y  # warm-up outside the capture
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    static_out = 2.0 * static_x + static_y


class ModelNew(nn.Module):
    def forward(self, x, y):
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()
        return token_copy(static_out, torch.empty_like(x))
