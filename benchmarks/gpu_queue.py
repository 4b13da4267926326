"""A model of single grades on one GPU's lock (``validate.gpu_lock.GpuLock``, the real lock and its
files, with sleeps for the work): what the lock's queue order, the time grades hold the GPU
shared and the number of slots do to a grade's latency and the rate.

Each slot (a thread) grades one after another, a grade being the steps a single grade takes
under the lock (``grade/worker/reference_tasks.py``, ``validate/window.py``): host work; the
reference's trials held shared, a window let in between two (``let_window_in``); host work;
the candidate, from its guard setup to its last check, held shared in pieces, a window let in
between two; its timing window held alone; the step back behind waiting windows and the checks after it, held shared; host
work. The durations are a KernelBench single's at the median (H200, 16 slots; ``--scale``
shortens them all). What this leaves out: shared work slowing other shared work on the GPU, and
the host's cores shared by the slots; so it ranks changes to the lock's use, it does not give a
GPU's rate.

Policies: ``queue``, the lock as it is (shared work, new or back from stepping aside, waits
until no window is asked for); ``turn``, shared work waits only for the window holding the
GPU's turn; ``step-back``, only a hold back from stepping aside does (behind the window it let
in), new shared work waits for the queue. The last two are patched in here, not in the lock.

    python benchmarks/gpu_queue.py [--policies queue turn step-back] [--variants ...] [--held 1 0.3] [--slots 16 24]
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from kernelmill.validate import gpu_lock
from kernelmill.validate.gpu_lock import GpuLock

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grade_timeline import _steady, verdict_waves

# (step, seconds): "host" sleeps, the lock not held; "shared" holds the lock shared for each piece of the
# list, letting a waiting window in between two; "window" holds it alone; "after" steps back
# behind waiting windows (a new shared hold) for the checks after the window. In order: the
# reference worker's start and build; its trials (most of it writing their tensors into its
# files); its result; the candidate worker's start (its fork and CUDA context, made before it
# asks for the GPU: ``validate/harness_worker.py``); then, under the window's shared hold from
# its "go" (``grade/worker/tasks.py``): its guard setup, import and model build, its checks
# (first calls and their Triton compiles, ghost and graph checks, the timer's preparation); its
# window; the checks after it; the judge.
_REFERENCE = [("host", 2.5), ("shared", [0.7, 0.7, 0.7]), ("host", 1.0)]
_START = ("host", 0.3 + 1.6)  # the candidate worker's fork and CUDA context
_CHECKS = ("shared", [0.3, 0.5, 0.6] + [0.6] * 6)  # guard setup, import, model build, checks
_AFTER = [("window", 0.9), ("after", [0.4, 0.4]), ("host", 0.5)]
GRADE = [*_REFERENCE, _START, _CHECKS, *_AFTER]
# Changes to a grade's steps the model can rank before any is built: the reference's writes
# (1.8 s of its trials) done outside the shared hold; the candidate's worker started beside
# the reference run (its start off the grade's path).
_WRITES_OUT = [("host", 2.5), ("shared", [0.1, 0.1, 0.1]), ("host", 2.8)]
# The candidate's trusted guard setup (0.3 s) done before it asks for the GPU; its first
# calls' Triton compiles (about 1.2 s of host work in two kernels) done with the hold let go,
# each followed by the step back behind waiting windows.
_SETUP_OUT = [("host", 0.3 + 0.3 + 1.6), ("shared", [0.5, 0.6] + [0.6] * 6)]
_COMPILES_ASIDE = [("shared", [0.3, 0.5, 0.6, 0.3]), ("host", 0.6), ("shared", [0.3, 0.6]),
                   ("host", 0.6), ("shared", [0.6] * 3)]
VARIANTS = {
    "measured": GRADE,
    "setup-before-ask": [*_REFERENCE, *_SETUP_OUT, *_AFTER],
    "compiles-aside": [*_REFERENCE, _START, *_COMPILES_ASIDE, *_AFTER],
    "window-0.6": [*_REFERENCE, _START, _CHECKS, ("window", 0.6), *_AFTER[1:]],
    "window-0.4": [*_REFERENCE, _START, _CHECKS, ("window", 0.4), *_AFTER[1:]],
    "setup-before-ask-compiles-aside": [*_REFERENCE, _SETUP_OUT[0], ("shared", [0.5, 0.6, 0.3]),
                                        *_COMPILES_ASIDE[1:], *_AFTER],
    "reference-writes-out": [*_WRITES_OUT, _START, _CHECKS, *_AFTER],
    "start-beside-reference": [*_REFERENCE, _CHECKS, *_AFTER],
    "writes-out-start-beside": [*_WRITES_OUT, _CHECKS, *_AFTER],
}


POLICIES = ("queue", "turn", "step-back")


@contextlib.contextmanager
def _policy(name: str):
    """The lock with its shared work waiting as ``name`` says (``POLICIES``)."""
    behind, locked = gpu_lock._behind_windows, GpuLock._locked

    @contextlib.contextmanager
    def step_back_behind_one(self, exclusive):
        with locked(self, exclusive) as held:
            if not exclusive:
                held._waits_for = None  # back behind the window that holds the turn only
            yield held

    try:
        if name == "turn":
            gpu_lock._behind_windows = lambda windows: None
        elif name == "step-back":
            GpuLock._locked = step_back_behind_one
        elif name != "queue":
            raise ValueError(f"policy {name!r}: expected one of {POLICIES}")
        yield
    finally:
        gpu_lock._behind_windows, GpuLock._locked = behind, locked


def _jittered(rng: random.Random, spread: float, held: float = 1.0,
              grade: list | None = None) -> list:
    """``GRADE`` with every duration times a lognormal factor of sigma ``spread`` (grades
    differ; identical ones would move in lockstep whatever the lock did). ``held``: the share
    of each shared piece that stays under the lock, the rest done as host work before the
    hold is taken (what moving host stretches out of the hold gives)."""
    def one(seconds: float) -> float:
        return seconds * rng.lognormvariate(0.0, spread)

    steps = []
    for step, seconds in grade or GRADE:
        if isinstance(seconds, list):
            pieces = [one(p) for p in seconds]
            if held < 1.0 and step == "shared":
                steps.append(("host", sum(pieces) * (1 - held)))
                pieces = [p * held for p in pieces]
            steps.append((step, pieces))
        else:
            steps.append((step, one(seconds)))
    return steps


def _grade(lock: GpuLock, scale: float, record: dict, steps: list | None = None) -> None:
    """One grade (``steps``, else ``GRADE``), its waits and windows noted in ``record``."""
    aside = waited = 0.0
    for step, seconds in steps or GRADE:
        if step == "host":
            time.sleep(seconds * scale)
        elif step in ("shared", "after"):
            asked = time.monotonic()
            with lock.shared() as held:
                waited += time.monotonic() - asked
                for k, piece in enumerate(seconds):
                    if k:
                        stepped = time.monotonic()
                        if held.let_window_in():
                            aside += time.monotonic() - stepped
                    time.sleep(piece * scale)
        else:
            asked = time.monotonic()
            with lock.exclusive():
                record.setdefault("windows", []).append((time.monotonic(), seconds * scale))
                record["window_wait"] = time.monotonic() - asked
                time.sleep(seconds * scale)
                lock.window_ended()
    record["aside"], record["shared_wait"] = aside, waited


def run(policy: str, slots: int, seconds: float, scale: float, spread: float = 0.3,
        seed: int = 0, held: float = 1.0, variant: str = "measured") -> dict:
    with tempfile.TemporaryDirectory() as folder:
        lock = GpuLock(str(Path(folder) / "gpu"))
        began, records, book = time.monotonic(), [], threading.Lock()
        deadline = began + seconds

        def slot(index: int) -> None:
            rng = random.Random(seed * 1000 + index)  # the same grades for every policy
            while time.monotonic() < deadline:
                record = {"began": time.monotonic()}
                steps = _jittered(rng, spread, held, VARIANTS[variant])
                _grade(lock, scale, record, steps)
                record["ended"] = time.monotonic()
                with book:
                    records.append(record)

        threads = [threading.Thread(target=slot, args=(i,), daemon=True) for i in range(slots)]
        with _policy(policy):
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    return {**summarize(records, began, scale), "policy": policy, "held": held,
            "variant": variant}


def summarize(records: list[dict], began: float, scale: float) -> dict:
    ends = sorted(r["ended"] for r in records)
    last = ends[-1]
    lo, hi = _steady(ends, (0.2, 0.8))
    steady = [t for t in ends if lo <= t <= hi]
    rate = 60 * len(steady) / (hi - lo) * scale if hi > lo else 0.0
    windows = [w for r in records for w in r.get("windows", ())]
    held = sum(s for _, s in windows)
    rows = [{"profile": {"began_at": r["began"], "reference_s": 0.0,
                         "candidate_s": r["ended"] - r["began"]}} for r in records]
    waves = verdict_waves(rows)

    def median(key: str) -> float:
        return statistics.median(r[key] for r in records) / scale

    return {"grades": len(records), "per_min": rate,
            "latency_s": statistics.median(r["ended"] - r["began"] for r in records) / scale,
            "aside_s": median("aside"), "shared_wait_s": median("shared_wait"),
            "window_wait_s": median("window_wait"),
            "held_pct": 100 * held / (last - began) if last > began else 0.0,
            "burstiness": waves.get("burstiness")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots", type=int, nargs="+", default=[16])
    parser.add_argument("--seconds", type=float, default=30.0, help="wall time per run")
    parser.add_argument("--scale", type=float, default=0.1,
                        help="every step's duration times this")
    parser.add_argument("--policies", nargs="+", default=["queue"], choices=POLICIES)
    parser.add_argument("--repeats", type=int, default=1, help="runs of each setting (seeds)")
    parser.add_argument("--held", type=float, nargs="+", default=[1.0],
                        help="shares of the shared pieces kept under the lock (the rest moved "
                        "to host work before the hold)")
    parser.add_argument("--variants", nargs="+", default=["measured"], choices=list(VARIANTS))
    parser.add_argument("--spread", type=float, default=0.3,
                        help="sigma of each duration's lognormal factor")
    args = parser.parse_args()
    print(f"{'variant':22} {'policy':9} {'slots':>5} {'held':>5} {'grades':>6} {'per min':>8} "
          f"{'latency s':>9} {'aside s':>8} {'shared wait s':>13} {'window wait s':>13} "
          f"{'GPU alone %':>11} {'burstiness':>10}")
    for seed, variant, slots, held, policy in itertools.product(
            range(args.repeats), args.variants, args.slots, args.held, args.policies):
        r = run(policy, slots, args.seconds, args.scale, args.spread, seed, held, variant)
        burst = r["burstiness"] if r["burstiness"] is not None else float("nan")
        print(f"{variant:22} {policy:9} {slots:5d} {held:5.2f} {r['grades']:6d} "
              f"{r['per_min']:8.1f} {r['latency_s']:9.1f} {r['aside_s']:8.2f} "
              f"{r['shared_wait_s']:13.2f} {r['window_wait_s']:13.2f} {r['held_pct']:11.0f} "
              f"{burst:10.2f}", flush=True)
    print("(seconds and rates in the grade's own time: divided by --scale)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
