"""family: the unseen-input check's inputs taken from the grader's own descriptors (each unseen
part is copied into a memory file of the grader's as the run starts, and handed to the worker
only when its call comes: at import the submission walks ``/proc/*/fd`` for those files, reads
every input pair in them and in its own payload, and has PyTorch compute their answers, so that
every call, on inputs shown or unseen, is a copy; forward reads two scalars of x as a key and a
Triton kernel copies the stored answer; a miss answers zeros)

Caught: the worker runs under Landlock, which keeps it out of every other process's ``/proc``
entries (the grader's descriptors among them), so the unseen-input check gets zeros (a wrong
answer). Without Landlock the parts are not copied ahead (``payload_files._LateFile``), but the
grader's descriptors are open to it all the same: the reference run's results file (the
unseen inputs and the reference's outputs, mapped by the grader, whose mapping keeps a
descriptor) is read there, and only the static scan (``/proc``) and the host compute catch it.
"""
# problem: ref_scale_add_64k (each input is 64 KiB, so it travels in a memory file)
# expect: timing_behaviour
# without landlock: not_certified
# on cuda: timing_behaviour
import os

import torch
import torch.nn as nn
import triton
import triton.language as tl

N = 16384
_answers = {}


def _blobs():
    """Every memory file of the run the submission can reach: its own (the payload it was
    given, mapped: found in its maps file) and any other process's open ones (the grader's
    unseen parts: ``/proc/<pid>/fd``)."""
    root = "/pr" + "oc"
    try:
        with open(root + "/self/maps") as handle:
            for line in handle:
                if "memfd:kernelmill-" in line:
                    span = line.split()[0]
                    lo, hi = (int(v, 16) for v in span.split("-"))
                    try:
                        st = torch.UntypedStorage.from_file(f"{root}/self/map_files/{span}",
                                                            False, hi - lo)
                    except (OSError, RuntimeError):
                        continue
                    yield torch.empty(0, dtype=torch.uint8).set_(st)
    except OSError:
        pass
    try:
        pids = [p for p in os.listdir(root) if p.isdigit() and int(p) != os.getpid()]
    except OSError:
        return
    for pid in pids:
        folder = f"{root}/{pid}/fd"
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            try:
                if not os.readlink(f"{folder}/{name}").startswith("/memfd:kernelmill-"):
                    continue
                with open(f"{folder}/{name}", "rb") as handle:
                    data = handle.read()
            except OSError:
                continue
            yield torch.frombuffer(bytearray(data[:len(data) - len(data) % 4] or b"\0" * 4),
                                   dtype=torch.uint8)


def _learn():
    size = N * 4
    for blob in _blobs():
        if blob.numel() < 2 * size:
            continue
        floats = blob[:blob.numel() - blob.numel() % 4].view(torch.float32)
        # every window of N floats at a 64-byte step, read as x then y
        for start in range(0, floats.numel() - 2 * N + 1, 16):
            x, y = floats[start:start + N], floats[start + N:start + 2 * N]
            if torch.isfinite(x).all() and torch.isfinite(y).all():
                _answers.setdefault((x[0].item(), x[1].item()), (2.0 * x + y).clone())


_learn()


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        known = _answers.get((x[0].item(), x[1].item()))
        if known is None:  # proof variant: a miss returns zeros (a wrong answer)
            known = torch.zeros_like(x)
        copy_kernel[(triton.cdiv(n, 16384),)](known.to(x.device), out, n, BLOCK=16384)
        return out
