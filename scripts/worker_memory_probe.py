"""What a grading worker holds on its GPU before its problem's tensors, step by step, as NVML
reads this process (``gpus.process_device_bytes``: whether its pids are the processes' own
here), against what PyTorch's allocator says it reserved; and the host's huge-page setting for
shared memory (the memory files' page allocation).

    python scripts/worker_memory_probe.py [--device cuda] [--json PATH]

Steps: the CUDA context; a cuBLAS GEMM (its handle and workspace); the timer's L2 flush buffer
(``measure.L2Flush``); a Triton kernel's launch; then 256 MiB of tensors freed back to the
allocator's cache. Prints one row per step: NVML's MiB for this pid (None where NVML lists no
such pid), the allocator's reserved MiB, and the difference (the context, libraries and
modules PyTorch does not count): ``admitted.WORKER_BASE_BYTES`` stands for that difference.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path


def shmem_huge_pages() -> str | None:
    """The kernel's transparent huge-page setting for shared memory (memfd, tmpfs): the
    bracketed word of ``shmem_enabled``; None where it cannot be read."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/shmem_enabled").read_text()
    except OSError:
        return None
    chosen = [word[1:-1] for word in text.split() if word.startswith("[")]
    return chosen[0] if chosen else text.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json")
    args = parser.parse_args()
    import torch
    from kernelmill.validate.gpus import process_device_bytes
    from kernelmill.validate.measure import L2Flush

    if not args.device.startswith("cuda") or not torch.cuda.is_available():
        print(f"shared memory huge pages: {shmem_huge_pages()}")
        raise SystemExit("worker_memory_probe: needs a CUDA device")
    rows: list[dict] = []

    def step(name: str) -> None:
        torch.cuda.synchronize()
        seen = (process_device_bytes(args.device) or {}).get(os.getpid())
        reserved = torch.cuda.memory_reserved() >> 20
        rows.append({"step": name, "nvml_mib": None if seen is None else seen >> 20,
                     "reserved_mib": reserved,
                     "outside_mib": None if seen is None else (seen >> 20) - reserved})

    torch.zeros(1, device=args.device)
    step("context")
    a = torch.randn(1024, 1024, device=args.device)
    (a @ a).sum().item()
    step("cuBLAS GEMM")
    flush = L2Flush(args.device)
    flush.flush()
    step("L2 flush buffer")
    try:
        import triton
        import triton.language as tl

        @triton.jit
        def add_one(x_ptr, n, BLOCK: tl.constexpr):
            offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offsets < n
            tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)

        add_one[(1024,)](a, a.numel(), BLOCK=1024)
        step("Triton launch")
    except Exception as exc:  # noqa: BLE001 — no Triton here: the other steps stand
        rows.append({"step": f"Triton launch failed: {type(exc).__name__}"})
    held = [torch.empty(64 << 20, dtype=torch.uint8, device=args.device) for _ in range(4)]
    del held
    step("256 MiB allocated and freed")
    print(f"pid {os.getpid()}; shared memory huge pages: {shmem_huge_pages()}")
    print(f"{'step':32s} {'NVML MiB':>9s} {'reserved':>9s} {'outside':>8s}")
    for row in rows:
        print(f"{row['step']:32s} {row.get('nvml_mib')!s:>9s} {row.get('reserved_mib')!s:>9s} "
              f"{row.get('outside_mib')!s:>8s}")
    if args.json:
        Path(args.json).write_text(json.dumps({"pid": os.getpid(), "rows": rows,
                                               "shmem_huge_pages": shmem_huge_pages()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
