"""family: grader state reached through an FX graph (torch.fx generates and runs code for a
call_method node whose method name is built at run time: a getattr by string, with which the
module table, the worker's "call in progress" flag and NumPy are reached; with the flag cleared,
the inputs handed to NumPy are not counted, and NumPy computes the answer)

Caught by the static scan: torch.fx is no part of a kernel.
"""
# problem: ref_scale_add
# expect: forbidden_api
import os

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


def call(obj, method, *args):
    """obj.<method>(*args) through code FX writes: no attribute name in this source."""
    graph = torch.fx.Graph()
    target = graph.placeholder("target")
    rest = [graph.placeholder(f"arg{i}") for i in range(len(args))]
    graph.output(graph.call_method(method, (target, *rest)))
    return torch.fx.GraphModule(torch.nn.Module(), graph)(obj, *args)


def fetch(obj, name):
    return call(obj, "__getattri" + "bute__", name)


table = fetch(fetch(os, "sy" + "s"), "mod" + "ules")
active = fetch(table["kernel" + "mill.grade.worker"], "_active")


host = table["num" + "py"]  # preloaded by the worker


class ModelNew(nn.Module):
    def forward(self, x, y):
        active[0] = False
        a, b = call(host, "asarray", x), call(host, "asarray", y)
        staged = call(torch, "from_num" + "py", 2.0 * a + b)
        active[0] = True
        return token_copy(staged, torch.empty_like(x))
