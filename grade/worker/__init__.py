"""Worker side of grading: the reference run and the candidate run, in separate processes.

``reference_task`` builds the problem from its source text (held in memory, never read from a
file), draws every trial's inputs from the seeds the parent chose, and returns those inputs, the
reference outputs and the reference's timings. It never sees candidate code.

``candidate_task`` builds ``ModelNew`` with the reference's constructor arguments and weights,
calls it on the parent's inputs (fresh buffers, a buffer refilled in place, a repeat) and
returns raw facts: outputs as CPU copies, inputs as they were after each call, the PyTorch ops
each call dispatched, custom-kernel launches, threads and processes left behind, functions
patched, timings. It judges nothing: the trusted parent compares and decides (``grade.judge``).

Timing goes through ``validate.timer`` (shared with the validator): the parent drives both
workers' timers through one exclusive window (``validate.window``), and a captured CUDA graph's
output is replayed on other inputs for the parent to check (``graph_check``).

One mechanism per module:

- ``reference_tasks``: the reference run's tasks (``reference_task``,
  ``reference_timing_task``), which never see candidate code.
- ``tasks``: the candidate's tasks (``candidate_task``, ``compile_task``), run on the private
  copies of this package (``guards/``), and the cap on a GPU worker's host threads that both
  sides set.
- ``call``: the call protocol (``_Run``): every forward, checked or timed, instrumented alike.
- ``probes``: the unseen-input check, the ghost call and the timing graph's even calls.
- ``seeding``, ``inputs``, ``timing``: RNG state, trial inputs, the timer's window.
- ``observers/``: what a call did: threads, host memory, Triton launches, extensions, the op
  trace, and the counts they keep in the sealed audit hook.
- ``guards/``: the in-process best-effort guards: the originals bound at import, the audit hook
  and its sealed state, the patched-function snapshot, and the private copies of this package
  (``_private_namespace``) that the candidate's run calls.

Imports only torch, triton (if present), numpy, the standard library, the harness worker module,
``validate.measure``, ``validate.placement`` and ``validate.timer``.
"""
from __future__ import annotations

from .call import CALL_DEPTH, HELD_REFS, _Run
from .guards.audit import _in_hook, refuse_runtime_code
from .guards.originals import _set_grad_enabled
from .guards.patches import patched_functions, snapshot_modules
from .guards.patches import zygote_warm as _warm_patches
from .inputs import draw_inputs, to_cpu, to_device, transform
from .observers.extensions import _BUILT, STREAMED_PART_CHARS
from .observers.host_memory import zygote_warm as _warm_aliases
from .observers.optrace import active_modes
from .reference_tasks import reference_task, reference_timing_task
from .seeding import forward_seed
from .tasks import GPU_WORKER_THREADS, candidate_task, compile_task
from .timing import device_info


def zygote_warm() -> None:
    """Run by the zygote once its preloads are in, before it forks any worker: the listings a
    forked worker reuses (the bindings the patch check watches, the hooked functions' aliases)."""
    _warm_patches()
    _warm_aliases()


# The public names, and the private ones kernelmill's hostile suite reaches through
# ``sys.modules["kernelmill.grade.worker"]`` (bound here as the same objects, never copies: a
# submission that reaches them reaches what it reached before the package was split).
__all__ = [
    "CALL_DEPTH", "GPU_WORKER_THREADS", "HELD_REFS", "STREAMED_PART_CHARS", "_BUILT", "_Run",
    "_in_hook", "_set_grad_enabled", "active_modes", "candidate_task", "compile_task",
    "device_info", "draw_inputs", "forward_seed", "patched_functions", "reference_task",
    "reference_timing_task", "refuse_runtime_code", "snapshot_modules", "to_cpu", "to_device",
    "transform", "zygote_warm",
]
