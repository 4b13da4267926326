"""The validator's second worker: the problem rebuilt in a fresh process.

``replay_problem(payload)`` rebuilds the problem ``probe.probe_problem`` measured, from the same
seeds (see ``forwards.seeds``), in a second, fresh worker: its output digest shows whether the
reference is deterministic across processes. When asked, it also compiles the problem with
TorchInductor (its error against eager and its time) and times the eager forward right before
the compiled one, each in a window of its own.

Imports only torch, the standard library, ``checks`` and ``measure``, and the worker-side
modules ``forwards`` (building a problem, running its forward) and ``probe_device`` (timing,
memory caps, the GPU lock's sections). It shares a GPU as the probe does: when
``payload["lock"]`` names a file, GPU work runs under the lock held shared and timing under it
held exclusive.
"""
from __future__ import annotations

from typing import Any

from . import checks as C
from .forwards import _mark, build_model, draw_inputs, load_namespace, run_forward, seeds
from .measure import GpuLock
from .probe_device import (
    _launch_work,
    _peak_allocated,
    _peak_bytes,
    _release_cache,
    _section,
    _timed_window,
    _timing_section,
    cap_memory,
)


def replay_problem(payload: dict) -> dict:
    """Rebuild the problem from the same seeds in a fresh process: output digest (cross-process
    determinism) and, when ``payload["inductor"]``, torch.compile's error and median time.
    ``payload["time_eager"]``: the eager forward is timed here too, right before the compiled
    one (``result["timing"]``, the probe's ``timing`` entry), each alone and warmed in a
    window of its own (``_timed_window``)."""
    import torch

    device = payload.get("device", "cpu")
    sd = seeds(int(payload.get("seed", 0)))
    lock = GpuLock(payload.get("lock"))
    cap_memory(payload.get("memory_cap"), device, bool(payload.get("expandable")))
    _mark("load")
    ns = load_namespace(payload["source"])
    with _section(lock, device, "build"):
        model, inputs = build_model(ns, sd, device), draw_inputs(ns, sd["inputs"], device)
    copies = bool(payload.get("copies", True))  # the probe saw the forward write into them
    with _section(lock, device, "forward"):
        ref = run_forward(model, inputs, sd["forward"], device, clone=copies)
    result: dict[str, Any] = {"digest": C.output_digest(ref)}
    timed = payload.get("time", True)
    forwards = {"eager": (model, inputs)} if timed and payload.get("time_eager") else {}
    if payload.get("inductor"):
        _mark("inductor compile")
        try:
            compiled = torch.compile(model, mode=payload.get("inductor_mode") or None)
            out = run_forward(compiled, inputs, sd["forward"], device, clone=copies)  # compiles
            del out
            with _section(lock, device, "inductor check"):
                out = run_forward(compiled, inputs, sd["forward"], device, clone=copies)
                result["inductor"] = {"error_vs_eager": C.max_error(out, ref), "ms": None}
            del out
            if timed:
                forwards["inductor"] = (compiled, inputs)
        except Exception as exc:  # noqa: BLE001 — a compile failure is a finding, not a crash
            result["inductor"] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]}
    del ref  # the timing graphs' pools hold outputs of their own
    _release_cache(device)
    times = _timed_window(lock, device, forwards,
                          (payload.get("config") or {}).get("timing")) if forwards else {}
    if "eager" in times:
        result["timing"] = _timing_section(times["eager"], device, {})
        work = _launch_work(lock, device, model, inputs, result["timing"], copies)
        if work is not None:
            result["timing"]["device_work"] = work
    if "inductor" in times:
        result["inductor"]["ms"] = times["inductor"]["ms"]
    result["peak_bytes"] = _peak_bytes(device)
    result["peak_allocated_bytes"] = _peak_allocated(device)
    return result
