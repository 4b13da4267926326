"""What every candidate worker spends before and after its calls, apart from the calls: the
guards its setup installs (hooks, the snapshot of watched bindings and its own part, the
dispatcher's kernels), the check of its own part at each timing report, and the full checks
of the bindings its result makes (twice: where its facts begin, which fences the facts read
after it, then the guard just before encoding). Each part's CPU seconds, in warm workers
forked from the zygote as a grade's are (its listings inherited), median over ``--runs``
workers.

    python benchmarks/worker_setup.py [--runs 5] [--device cpu]
"""
from __future__ import annotations

import argparse
import statistics

from kernelmill.validate.harness import run_in_worker

# The candidate task's setup, step by step in its order (``grade/worker/tasks.py``), then its
# result's checks; CPU seconds of this process (its threads) per step.
PROBE = '''
import time
def main(payload):
    import kernelmill.grade.worker.tasks as T
    from kernelmill.grade.witness import Witness
    from kernelmill.grade.worker.guards.dispatch import dispatch_changed, dispatch_snapshot
    from kernelmill.grade.worker.guards.patches import patched_functions, snapshot_modules
    device = payload["device"]
    took = {}
    def step(name, fn):
        began = time.process_time()
        value = fn()
        took[name] = time.process_time() - began
        return value
    if device.startswith("cuda"):  # as the task does first (its CUDA state, lazily made)
        import torch
        step("torch.cuda.init", torch.cuda.init)
    step("baseline", lambda: T._baseline(device))
    step("witness", lambda: Witness(device))
    step("triton hook", T._install_triton_hook)
    step("extension hooks", lambda: T._install_extension_hooks(allowed_digests=[]))
    step("thread hooks", T._install_thread_hooks)
    step("host access hooks", T._install_host_access_hooks)
    snapshot, own = step("snapshot", lambda: snapshot_modules(with_own=True))
    dispatch = step("dispatch snapshot", dispatch_snapshot)
    step("own check (per report)", lambda: patched_functions(own))
    for name in ("result check", "guard check"):
        step(name, lambda: (patched_functions(snapshot), dispatch_changed(dispatch)))
    return took
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    runs = []
    for _ in range(args.runs):
        result = run_in_worker("kernelmill.validate.harness:run_source",
                               {"source": PROBE, "device": args.device}, timeout_s=120,
                               device=args.device)
        if not result.ok:
            raise SystemExit(f"probe failed: {result.error}")
        if not result.warm:
            print("note: not a warm worker (no zygote): the zygote's listings are not used")
        runs.append(result.value)
    width = max(len(name) for name in runs[0])
    print(f"{'step':<{width}}  median ms  min ms  max ms")
    for name in runs[0]:
        values = [run[name] * 1e3 for run in runs]
        print(f"{name:<{width}}  {statistics.median(values):9.1f}  {min(values):6.1f}  "
              f"{max(values):6.1f}")
    total = [sum(run.values()) * 1e3 for run in runs]
    print(f"{'total':<{width}}  {statistics.median(total):9.1f}  {min(total):6.1f}  "
          f"{max(total):6.1f}")


if __name__ == "__main__":
    main()
