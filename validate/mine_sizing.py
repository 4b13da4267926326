"""Worker side of ``kernelmill mine``, after probing: ``size_batch`` builds each rendered
problem on the meta device at each step of its sizing ladder and estimates one eager forward
from its flops and the bytes every op reads and writes (the composer's sizing model, so
mined and composed problems aim at the same band); ``smoke_batch`` runs shrunk problems on the
CPU (the benchmark's smoke run). Torch and the standard library only.
"""
from __future__ import annotations

import math

import torch
from kernelmill.core.taxonomy import PURE_MEMORY_OPS, op_base

from .measure import load_namespace
from .mine_worker import (
    JobTimeout,
    _flat,
    _mark,
    _one_line,
    _seed,
    _with_limit,
    classify,
    meta_build,
)

# eager sizing model (synth/composer.py: what eager PyTorch sustains on an H100)
PEAK_FLOPS = 40e12
BANDWIDTH = 2.5e12
LAUNCH_S = 5e-6


class _Traffic(torch.utils._python_dispatch.TorchDispatchMode):
    """Bytes every op reads and writes, and how many ops launch (views and metadata are free)."""

    def __init__(self):
        super().__init__()
        self.bytes = 0
        self.ops = 0
        self.names: dict[str, None] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        base = op_base(str(func))
        if base not in PURE_MEMORY_OPS:
            self.ops += 1
            self.names[base] = None
            for t in _tensors((args, kwargs, out)):
                self.bytes += t.numel() * t.element_size()
        return out


def _tensors(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in _tensors(item)]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    return []


def estimate(ns: dict) -> dict:
    """Build the problem in ``ns`` on the meta device and estimate one eager forward."""
    from torch.utils.flop_counter import FlopCounterMode

    with meta_build():
        model = ns["Model"](*ns["get_init_inputs"]())
    with torch.device("meta"):
        inputs = ns["get_inputs"]()
    model.eval()
    counter = FlopCounterMode(display=False)
    traffic = _Traffic()
    with torch.no_grad(), counter, traffic:
        out = model(*inputs)
    flops = int(counter.get_total_flops())
    seconds = flops / PEAK_FLOPS + traffic.bytes / BANDWIDTH + traffic.ops * LAUNCH_S
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    held = _tensors(inputs) + _tensors(out)
    return {"est_ms": seconds * 1e3, "flops": flops, "bytes": traffic.bytes, "ops": traffic.ops,
            "params_bytes": int(params), "op_names": list(traffic.names)[:200],
            "io_bytes": int(sum(t.numel() * t.element_size() for t in held)),
            "largest": max([t.numel() for t in held] + [p.numel() for p in model.parameters()]
                           or [0])}


def size_batch(payload: dict) -> dict:
    """Worker target: for each job, the estimate at each ladder step (stops above ``stop_ms``)."""
    torch.set_num_threads(1)
    stop_ms = float(payload.get("stop_ms", 1e9))
    results = []
    for job in payload["jobs"]:
        steps: list[dict] = []

        def run_job(job=job, steps=steps):
            ns = load_namespace(job["source"], "mined")
            for values in job["ladder"]:
                ns.update(values)
                try:
                    est = estimate(ns)
                except JobTimeout:
                    raise
                except Exception as exc:  # noqa: BLE001 — meta cannot follow it: unsized
                    steps.append({"ok": False, "error": _one_line(exc)})
                    if any(s.get("ok") for s in steps) or len(steps) >= 3:
                        break
                    continue
                steps.append({"ok": True, **est})
                if est["est_ms"] > stop_ms or not math.isfinite(est["est_ms"]):
                    break

        _mark(f"mine size {job['key']}")
        try:
            _with_limit(float(payload.get("job_s", 20.0)), run_job)
            results.append({"key": job["key"], "steps": steps})
        except (Exception, JobTimeout) as exc:  # noqa: BLE001
            results.append({"key": job["key"], "steps": steps, "error": _one_line(exc),
                            "reason": classify(exc)})
    return {"results": results}


def smoke_batch(payload: dict) -> dict:
    """Worker target: run each (shrunk) problem source on the CPU twice with the same seeds:
    it must build, return a tensor, be finite and repeat exactly."""
    torch.set_num_threads(1)
    results = []
    for job in payload["jobs"]:
        def run_job(job=job) -> dict:
            ns = load_namespace(job["source"], "smoke")
            outs = []
            for _ in range(2):
                _seed(0)
                model = ns["Model"](*ns["get_init_inputs"]())
                _seed(1)
                inputs = ns["get_inputs"]()
                _seed(2)
                with torch.no_grad():
                    outs.append([t for _, t in _flat(model(*inputs))])
            if not outs[0]:
                return {"ok": False, "reason": "no tensor output"}
            if not all(torch.isfinite(t).all() for t in outs[0] if t.is_floating_point()):
                return {"ok": False, "reason": "non-finite output"}
            if not all(torch.equal(a, b) for a, b in zip(*outs)):
                return {"ok": False, "reason": "nondeterministic"}
            return {"ok": True}

        _mark(f"mine smoke {job['key']}")
        try:
            result = _with_limit(float(payload.get("job_s", 20.0)), run_job)
        except (Exception, JobTimeout) as exc:  # noqa: BLE001
            result = {"ok": False, "reason": classify(exc), "detail": _one_line(exc)}
        results.append({"key": job["key"], **result})
    return {"results": results}
