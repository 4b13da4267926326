"""What the timing graph makes of forwards that share work between its calls (GPU; for the
grader's trust: red-team round 20's ``graph_three_fifths`` and the copy family).

    python scripts/capture_probe.py

In this process, with ``timer.Timer`` as the grader's workers use it, on ``ref_scale_add_big``
(16M elements) and the 4096-element ``ref_scale_add``, times four forwards, each told by this
script when a new capture starts (what a real attack must infer):

- ``honest``: the kernel, into a fresh output every call;
- ``kept``: the kernel, into one buffer every call returns (an honest pattern: a cached output);
- ``three_fifths``: round 20's attack, 3 of 5 slices per captured call into one kept buffer;
- ``copy``: the first captured call of a graph computes, the later ones copy the output before.

Prints per forward: the method, calls per sample, whether the outputs overlapped, the capture
error, the per-call ms of the timing graph, the ms of one call alone (``Timer.once``: the
one-call graph after an L2 flush), their ratio (the judge's device-work rule allows 0.5), and,
after the inputs are refilled and the graph replayed, the disagreement between its calls
(``measure.calls_disagree``) and whether the last output is right.
"""
import subprocess
import sys

import torch
import triton
import triton.language as tl
from kernelmill.validate import measure as M
from kernelmill.validate import timer as T


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, start, BLOCK: tl.constexpr):
    offsets = start + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, 2.0 * x + y, mask=mask)


@triton.jit
def copy_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


class Forward:
    def __init__(self, kind: str, x, y):
        self.kind, self.x, self.y = kind, x, y
        self.kept = torch.empty_like(x)
        self.previous, self.k, self.in_capture = None, 0, 0
        self.warming = False  # run the capture path eagerly: every kernel compiled before

    def new_capture(self):
        self.previous, self.in_capture = None, 0

    def __call__(self):
        x, y, n = self.x, self.y, self.x.numel()
        capturing = self.warming or torch.cuda.is_current_stream_capturing()
        if self.kind == "three_fifths" and capturing:
            per = triton.cdiv(n, 5)
            first = (3 * self.k) % 5
            self.k += 1
            for start in range(first, first + 3):
                slice_start = (start % 5) * per
                scale_add_kernel[(triton.cdiv(per, 1024),)](x, y, self.kept,
                                                            min(n, slice_start + per),
                                                            slice_start, BLOCK=1024)
            return self.kept
        out = self.kept if self.kind in ("kept", "three_fifths") else torch.empty_like(x)
        grid = (triton.cdiv(n, 1024),)
        if self.kind == "copy" and capturing and self.previous is not None:
            copy_kernel[grid](self.previous, out, n, BLOCK=1024)
        else:
            scale_add_kernel[grid](x, y, out, n, 0, BLOCK=1024)
        if capturing:
            self.previous = out
            self.in_capture += 1
        return out


def probe(kind: str, n: int) -> str:
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    forward = Forward(kind, x, y)
    forward.warming = True  # a JIT compile inside a capture breaks it: compile first
    for _ in range(6):
        forward()
    forward.warming, forward.k = False, 0
    forward.new_capture()
    torch.cuda.synchronize()
    timer = T.Timer(forward, "cuda")
    captured = timer._captured

    def each_capture(stream, calls):
        forward.new_capture()
        return captured(stream, calls)

    timer._captured = each_capture
    timer.prepare()
    scored = M._median(timer.round(20))
    alone = M._median([timer.once(forward)[0] for _ in range(10)])
    x.copy_(torch.randn(n, device="cuda"))
    y.copy_(torch.randn(n, device="cuda"))
    out = timer.replay()
    right = torch.allclose(out, 2 * x + y)
    agree = M.calls_disagree(timer.outputs) if timer.outputs else {}
    gap = agree.get("max_abs")
    return (f"{kind:13s} {n:>9d} {timer.method:11s} {timer.calls_per_sample:5d} "
            f"{timer.outputs_overlap!s:8s} {scored * 1e3:9.2f} {alone * 1e3:9.2f} "
            f"{scored / alone:6.2f} {('-' if gap is None else f'{gap:.3g}'):>9s} {right!s:6s}"
            f" {timer.capture_error or ''}")


def main() -> None:
    if len(sys.argv) == 3:  # one probe, in a process of its own (a broken capture stays there)
        print(probe(sys.argv[1], int(sys.argv[2])), flush=True)
        return
    print(f"{'forward':13s} {'elements':>9s} {'method':11s} {'calls':>5s} {'overlap':8s} "
          f"{'scored us':>9s} {'alone us':>9s} {'ratio':>6s} {'disagree':>9s} {'right':6s} "
          "capture error", flush=True)
    for n in (1 << 24, 1 << 20):
        for kind in ("honest", "kept", "three_fifths", "copy"):
            done = subprocess.run([sys.executable, __file__, kind, str(n)], check=False,
                                  capture_output=True,
                                  text=True, timeout=300)
            lines = done.stdout.strip().splitlines()
            print(lines[-1] if done.returncode == 0 and lines else
                  f"{kind:13s} {n:>9d} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}"
                  [:300], flush=True)


if __name__ == "__main__":
    main()
