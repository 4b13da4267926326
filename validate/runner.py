"""Validate problem records on a device: the parent side of the validator.

``validate_file(in_path, out_path, ...)`` reads records, validates each in isolated workers and
writes every record (passed or not) with its ``validation`` section, resumably.

Per problem (``validate_source``):

1. static check of the source (``curate.problem.check_source``);
2. on CPU, shrink its sizes (``synth.resize.shrink_for_cpu``) so the checks run in seconds;
3. libcst ablations of ``Model.forward`` (``ablation.ablations``);
4. worker 1 (``probe.probe_problem``): every single-process check, fp64 calibration, aten trace,
   flops/bytes, output statistics and eager timing;
5. worker 2 (``replay.replay_problem``, on CUDA by default): the same build in a fresh process
   (cross-process determinism) and TorchInductor (match + median time);
6. verdicts (``checks.judge``), roofline, difficulty.

A problem that crashes, hangs or cannot be read gets ``validation.passed = false`` with the
reason in ``checks.runs``; the run goes on. ``validation.passed`` is true only when no gating check
failed (a skipped check, ``passed: null``, never fails and never passes).

Several workers may share one GPU (``workers_per_gpu``) so Inductor compiles overlap; timing runs
take an exclusive per-GPU file lock so no measurement overlaps another worker's kernels.
Memory: before its workers start, a CPU worker estimates the problem's peak device memory on the
meta device (``memory.py``; ``validation.memory``); a worker starts only when that fits in what
its GPU has left (``admission.py``), one that still runs out of memory while sharing is rerun
alone, and a problem that does not fit alone is flagged ``too_large`` (never ``runs``).
On CPU the same estimate (plus a worker's own memory) is admitted against the host's memory
(``host_admission.host_budget``: what is available, or ``host_memory_gib``), each worker's address
space is limited to what it was admitted for, a worker that still runs out of it is rerun alone
with the whole budget, and a problem that needs more than the budget is flagged ``too_large``
with "out of host memory".
On CPU each worker of a problem may use ``cpu_budget_s`` CPU seconds (RLIMIT_CPU; CPU time, so a
busy host does not make a problem slow); one that uses it up, or whose shrunk size predicts
more (``CPU_SECONDS_PER_CPU_SIZE`` per CPU size of its largest tensor), is flagged
``too_slow_on_cpu`` instead of running into the wall-clock ``timeout_s``; so is one that ran
into that timeout having used a quarter of its budget (a busy host: slow, not hung).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelmill.core.devices import usable_cores
from kernelmill.core.errors import KernelmillError
from kernelmill.core.progress import track
from kernelmill.core.record import Record
from kernelmill.core.stats import DONE_BEFORE, StageStats
from kernelmill.core.step import Step, option
from kernelmill.core.store import JsonlWriter, read_records

from .backends import get_backend, resolve_device
from .gpus import init_lock

# One problem's validation, the settings and the workers' resources live in their own modules;
# every name this module held is re-exported here (callers import several of them from here).
from .one_problem import (
    _validate_source,  # noqa: F401
    validate_source,
)
from .settings import (
    CPU_SECONDS_FIXED,  # noqa: F401
    CPU_SECONDS_PER_CPU_SIZE,  # noqa: F401
    ESTIMATE,  # noqa: F401
    ESTIMATE_BYTES,  # noqa: F401
    INDUCTOR_OFF_ON_CPU,  # noqa: F401
    NON_GATING,  # noqa: F401
    PROBE,  # noqa: F401
    REPLAY,  # noqa: F401
    REPLAY_CHECKS,  # noqa: F401
    ValidateConfig,
    _failed,
    _torch_version,  # noqa: F401
)
from .worker_budgets import (
    _CONTENTION_MARKERS,  # noqa: F401
    _RUNNING,  # noqa: F401
    _RUNNING_LOCK,  # noqa: F401
    _cold_address_base,  # noqa: F401
    _cpu_max_numel,  # noqa: F401
    _eager_timing,  # noqa: F401
    _estimate_memory,  # noqa: F401
    _gib,  # noqa: F401
    _host_budget,  # noqa: F401
    _lock_path,  # noqa: F401
    _out_of_cpu_budget,  # noqa: F401
    _out_of_memory,  # noqa: F401
    _retry_alone,  # noqa: F401
    _running,  # noqa: F401
    _shared_folder,  # noqa: F401
    _shrink,  # noqa: F401
    _stage_seconds,  # noqa: F401
    _too_large,  # noqa: F401
    _too_slow,  # noqa: F401
    _too_slow_prediction,  # noqa: F401
    _worker_contention,  # noqa: F401
    _worker_env,  # noqa: F401
    _worker_oom,  # noqa: F401
    _writable,  # noqa: F401
    address_base,  # noqa: F401
    estimate_on_host,  # noqa: F401
)

log = logging.getLogger("kernelmill")


def _finite(value: Any) -> Any:
    """JSON-safe copy: NaN and infinities become null (strict JSON readers reject them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _validate_item(item: tuple[dict, dict], slot: dict) -> dict:
    """Backend task: never raises, so one bad problem cannot stop the run."""
    record, config = item
    start = time.monotonic()
    try:
        validation = validate_source(record["source"], slot, config)
    except Exception as exc:  # noqa: BLE001 — a validator failure is recorded, not fatal
        validation = _failed(slot.get("device", "?"), "validator",
                             f"{type(exc).__name__}: {exc}")
    validation["wall_s"] = round(time.monotonic() - start, 3)
    return _finite(validation)


class _Running:
    """The problems the local backend's slot threads are validating now, for the progress
    line (``einsum_bmm_softshrink 95s``): a slow problem shows by name instead of the line
    standing still."""

    def __init__(self):
        self._lock = threading.Lock()
        self._now: dict[int, tuple[str, float]] = {}

    def validate(self, item: tuple[dict, dict], slot: dict) -> dict:
        key = threading.get_ident()
        record = item[0]
        with self._lock:
            self._now[key] = (str(record.get("name") or record.get("id", "?"))[:60],
                              time.monotonic())
        try:
            return _validate_item(item, slot)
        finally:
            with self._lock:
                self._now.pop(key, None)

    def status(self) -> str:
        now = time.monotonic()
        with self._lock:
            running = sorted(self._now.values(), key=lambda nt: nt[1])
        return ", ".join(f"{name} {now - since:.0f}s" for name, since in running)


def _ray_workers_per_gpu(address: str | None, workers: int | None) -> int:
    """Running workers per GPU on a Ray cluster: ``workers`` spread over its GPUs, else its
    CPU cores per GPU (at most 16), as the local default."""
    from .ray_backend import cluster_resources

    resources = cluster_resources(address)
    gpus = max(1, int(resources.get("GPU", 1)))
    if workers:
        return max(1, workers // gpus)
    return max(1, min(16, int(resources.get("CPU", 2)) // gpus))


def validate_file(in_path, out_path, *, device: str = "auto", workers: int | None = None,
                  backend: str = "local", address: str | None = None,
                  config: ValidateConfig | dict | None = None, progress: bool = True
                  ) -> StageStats:
    """Validate every record of ``in_path`` into ``out_path`` (resumable; all records written)."""
    cfg = ValidateConfig.coerce(config)
    device = resolve_device(device)
    init_lock("cpu")  # an unknown value of the switch is refused before any record is read
    stats = StageStats("validate")
    start = time.monotonic()

    def corrupt(message: str) -> None:
        log.warning(message)
        stats.count("corrupt input")

    if device.startswith("cuda") and backend == "local":  # Ray places work on its own GPUs
        import torch

        if not torch.cuda.is_available():
            raise KernelmillError(f"--device {device}: torch sees no CUDA device "
                                  "(use --device cpu or auto)")
        if workers is None:
            gpus = max(1, torch.cuda.device_count())
            workers = gpus * (cfg.workers_per_gpu or
                              max(1, min(16, usable_cores() // gpus)))

    if backend == "local":  # the estimates' CPU workers and the probes' start together
        from .harness import prestart_workers

        prestart_workers(["cpu", device])
    with JsonlWriter(out_path) as writer:
        records, seen = [], set()
        for record in read_records(in_path, on_error=corrupt, allow_empty=False):
            if record.id in seen:  # a repeated id: validated (or taken over) once
                continue
            seen.add(record.id)
            if record.id in writer:
                stats.count(DONE_BEFORE)
            else:
                records.append(record)
        per_gpu = None
        if device.startswith("cuda") and backend == "local":  # memory waits do not hold slots
            per_gpu = max(1, workers // max(1, torch.cuda.device_count()))
            workers *= 2
        elif device.startswith("cuda"):  # Ray: each GPU's host runs the local backend's slots
            per_gpu = cfg.workers_per_gpu or _ray_workers_per_gpu(address, workers)
        runner = get_backend(backend, device=device, workers=workers, address=address,
                             per_gpu=per_gpu and 2 * per_gpu, running=per_gpu)
        if per_gpu and backend == "local":
            for slot in runner.slots:
                slot["running"] = per_gpu
        config_dict = dataclasses.asdict(cfg)
        items = [(r.to_dict(), config_dict) for r in records]
        running = _Running() if backend == "local" else None  # Ray runs items elsewhere
        results = runner.map_unordered(running.validate if running else _validate_item, items)
        if progress:
            results = track(results, total=len(items), description="validate",
                            status=running.status if running else None)
        for (data, _cfg), validation in results:
            record = Record.from_dict(data).replace(validation=validation)
            writer.write(record)
            stats.kept()  # validation enriches every record; the filter step drops failures
            if validation["passed"]:
                stats.count("passed")
            else:
                stats.count(f"failed {validation['flags'][0] if validation['flags'] else 'runs'}")
                for flag in validation["flags"]:
                    stats.count(f"flag: {flag}")
    stats.seconds = time.monotonic() - start
    return stats


__all__ = ["ValidateConfig", "validate_file", "validate_source"]


@dataclass
class ValidateOptions(ValidateConfig):
    """The validate stage's knobs: where it runs, plus every validator setting."""

    device: str = option("auto", "auto, cpu, cuda or cuda:N", build="=")
    workers: int | None = option(None, "parallel problems (default: CUDA workers-per-gpu x GPUs, "
                                 "CPU 2)", build="=", result=False)
    backend: str = option("local", "where problems run: local worker processes, or one Ray host "
                          "per GPU of a cluster", build="=", choices=("local", "ray"),
                          result=False)
    address: str | None = option(None, "Ray cluster address (--backend ray; default: start a "
                                 "local one)", build="=", result=False)

    def settings(self) -> ValidateConfig:
        names = {f.name for f in dataclasses.fields(ValidateConfig)}
        return ValidateConfig(**{k: v for k, v in dataclasses.asdict(self).items() if k in names})


def _run(inputs: list[Path], out: Path, config: ValidateOptions) -> StageStats:
    return validate_file(inputs[0], out, device=config.device, workers=config.workers,
                         backend=config.backend, address=config.address,
                         config=config.settings())


STEP = Step(
    name="validate", title="validate", config=ValidateOptions, run=_run,
    inputs=("problems.jsonl",), output="validated.jsonl", resumable=True,
    input_help="problem records (JSONL)", out_help="validated records (JSONL, appended)",
    requires=lambda config: {"ray": "pip install -e '.[ray]'"}
    if config.backend == "ray" else {},
    build_values=lambda build: {"device": build.device, **build.config.validate},
    help="run every problem on a device and record its checks",
    description="Validate problem records: runs, finite, deterministic, not stochastic, "
                "input/weight sensitive, not near-zero/constant/affine, no dead ops, tolerance "
                "vs fp64, runtime band, launch overhead, TorchInductor, roofline, difficulty. "
                "Every record is written to OUT with its validation section (pass or fail); "
                "rerunning resumes. `kernelmill filter` (or `kernelmill dedup`) drops the "
                "failed ones.")
