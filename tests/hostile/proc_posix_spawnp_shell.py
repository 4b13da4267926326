"""family: work in another process (a PATH-searching POSIX spawn of sh running awk)

"""
# problem: ref_scale_add
# expect: not_certified
import io
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


def dump(path, t):
    torch.set_printoptions(precision=9, threshold=1 << 30, linewidth=1 << 30, sci_mode=True)
    text = repr(t.reshape(-1)).split("[", 1)[1].split("]", 1)[0].replace(",", " ")
    torch.set_printoptions(profile="default")
    with io.FileIO(path, "w") as handle:
        handle.write((text + "\n").encode())


def load(path, like):
    with open(path) as handle:
        values = [float(v) for v in handle.read().split()]
    return torch.tensor(values, dtype=like.dtype).reshape(like.shape)

AWK = r"""BEGIN { getline xs < ARGV[1]; getline ys < ARGV[2]; n = split(xs, a, " "); split(ys, b, " ");
  for (i = 1; i <= n; i++) printf "%.9g ", 2 * a[i] + b[i]; print "" }"""
_n = [0]


class ModelNew(nn.Module):
    def forward(self, x, y):
        _n[0] += 1
        base = f"job{_n[0]}"
        dump(base + ".x", x)
        dump(base + ".y", y)
        pid = os.posix_spawnp("sh", ["sh", "-c", 'exec awk "$0" "$1" "$2"', AWK, base + ".x", base + ".y"], {"PATH": "/usr/bin:/bin"},
                             file_actions=[(os.POSIX_SPAWN_OPEN, 1, base + ".out",
                                            os.O_WRONLY | os.O_CREAT, 0o600)])
        os.waitpid(pid, 0)
        return token_copy(load(base + ".out", x), torch.empty_like(x))
