"""How long an unseen trial's inputs take to reach the device, by how the worker maps the late
part they come in: at KernelBench's sizes the unseen check's load of one hidden trial took
89-198 ms of the exclusive window for cross-entropy's 512 MiB of logits and 47-106 ms for
LayerNorm's 256 MiB input (H100, singles and groups of 8).

    python scripts/late_load_probe.py [--mib 256 512] [--repeats 5]

The parent writes each late part into a sealed memory file of its own
(``payload_files._LateFile``); the worker maps it when it asks for it
(``late_read.map_part``) and copies its tensors into the timed buffers on the device. For
each size, a sealed file of random bytes, then, interleaved, ``--repeats`` times, a fresh
mapping each: ``private`` (private and writable, as the worker maps it), ``shared`` (shared and
read-only, its pages populated by the mapping: a sealed file cannot be written through it),
``registered`` (shared and read-only, then page-locked for the device's copy engine by
``cuMemHostRegister`` with the read-only flag, unregistered after), and ``pinned`` (from
page-locked memory the process already holds: the floor). Prints each way's median ms per
step (map, register, copy, unregister) and in all.
"""
from __future__ import annotations

import argparse
import ctypes
import fcntl
import mmap
import os
import statistics
import time
import warnings

SEALS = 0x1 | 0x2 | 0x4 | 0x8  # F_SEAL_SEAL, SHRINK, GROW, WRITE
CU_MEMHOSTREGISTER_READ_ONLY = 0x08


def sealed_file(nbytes: int) -> int:
    fd = os.memfd_create("late-probe", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, nbytes)
    chunk = os.urandom(1 << 20)
    for offset in range(0, nbytes, len(chunk)):
        os.pwrite(fd, chunk, offset)
    fcntl.fcntl(fd, getattr(fcntl, "F_ADD_SEALS", 1033), SEALS)
    return fd


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("late_load_probe: no CUDA device")
        return 2
    driver = ctypes.CDLL("libcuda.so.1")
    register, unregister = driver.cuMemHostRegister_v2, driver.cuMemHostUnregister
    register.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    unregister.argtypes = [ctypes.c_void_p]
    torch.cuda.init()
    print(f"{'MiB':>5} {'way':<11} {'map ms':>8} {'register':>9} {'copy ms':>8} "
          f"{'unregister':>10} {'all ms':>8}  copy GB/s")
    for mib in args.mib:
        nbytes = mib << 20
        fd = sealed_file(nbytes)
        target = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        held = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
        held.fill_(1)
        steps: dict[str, list[tuple]] = {w: [] for w in ("private", "shared", "registered",
                                                        "pinned")}
        for _ in range(args.repeats):
            for way in steps:
                began = time.perf_counter()
                mapped = None
                if way == "private":
                    mapped = mmap.mmap(fd, nbytes, flags=mmap.MAP_PRIVATE,
                                       prot=mmap.PROT_READ | mmap.PROT_WRITE)
                elif way in ("shared", "registered"):
                    mapped = mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE,
                                       prot=mmap.PROT_READ)
                mapped_at = time.perf_counter()
                address = None
                if mapped is not None:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # a read-only buffer: only read here
                        source = torch.frombuffer(mapped, dtype=torch.uint8)
                    address = source.data_ptr()
                else:
                    source = held
                if way == "registered":
                    code = register(address, nbytes, CU_MEMHOSTREGISTER_READ_ONLY)
                    if code:
                        print(f"cuMemHostRegister failed: {code}")
                        return 1
                registered_at = time.perf_counter()
                target.copy_(source)
                torch.cuda.synchronize()
                copied_at = time.perf_counter()
                if way == "registered":
                    unregister(address)
                del source
                if mapped is not None:
                    mapped.close()
                ended = time.perf_counter()
                steps[way].append((mapped_at - began, registered_at - mapped_at,
                                   copied_at - registered_at, ended - copied_at,
                                   ended - began))
        for way, rows in steps.items():
            med = [statistics.median(r[i] for r in rows) * 1e3 for i in range(5)]
            print(f"{mib:>5} {way:<11} {med[0]:8.2f} {med[1]:9.2f} {med[2]:8.2f} {med[3]:10.2f} "
                  f"{med[4]:8.2f}  {nbytes / med[2] / 1e6:8.1f}")
        os.close(fd)
        del target, held
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
