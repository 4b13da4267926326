"""Run per-item work on a Ray cluster: one task per item, one GPU per task on CUDA.

Same contract as ``LocalBackend.map_unordered``: ``fn(item, slot)`` is a module-level function,
``slot`` names the device the task may use, and ``(item, result)`` pairs are yielded as tasks
finish, so the caller streams them into its resumable JSONL. A task whose worker process is lost
(node gone, worker killed) is retried up to ``max_retries`` times by Ray; an exception raised by
``fn`` itself is not retried and reaches the caller, as with the local backend.

Ray is an optional extra (``pip install 'kernelmill[ray]'``) and is imported only here, only when
this backend is built.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from typing import Any

from kernelmill.core.devices import Slot, TaskFn, resolve_device
from kernelmill.core.errors import KernelmillError

log = logging.getLogger("kernelmill")


def _import_ray():
    try:
        import ray
    except ImportError:
        raise KernelmillError("the ray backend needs Ray: pip install 'kernelmill[ray]'") from None
    return ray


def _task_slot(gpu: bool) -> Slot:
    """The slot of the task running in this Ray worker (Ray pins CUDA_VISIBLE_DEVICES for us)."""
    if not gpu:
        return {"device": "cpu", "gpu": None, "env": {}}
    import ray

    ids = [str(i) for i in ray.get_gpu_ids()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") or ",".join(ids) or "0"
    first = visible.split(",")[0]
    return {"device": "cuda:0", "gpu": int(first) if first.isdigit() else first,
            "env": {"CUDA_VISIBLE_DEVICES": visible}}


def _run_task(fn: TaskFn, item: Any, gpu: bool) -> Any:
    return fn(item, _task_slot(gpu))


class RayBackend:
    """Schedule ``fn(item, slot)`` as Ray tasks.

    device: "auto", "cpu" or "cuda"; on CUDA every task asks Ray for ``num_gpus=1``.
    workers: the most tasks in flight at once (default: as many as the cluster has GPUs, or CPUs).
    address: the cluster to join (``ray://host:10001`` or ``auto``); None starts a local Ray
        unless this process already called ``ray.init``.
    max_retries: how many times a task whose worker died is run again.
    """

    def __init__(self, device: str = "auto", workers: int | None = None,
                 address: str | None = None, max_retries: int = 3):
        self.ray = _import_ray()
        self.device = resolve_device(device)
        self.gpu = self.device.startswith("cuda")
        self.workers = workers
        self.address = address
        self.max_retries = max_retries

    def _ensure_ray(self) -> None:
        if not self.ray.is_initialized():
            self.ray.init(address=self.address, include_dashboard=False, ignore_reinit_error=True,
                          log_to_driver=False)

    def _in_flight_limit(self) -> int:
        if self.workers:
            return self.workers
        resources = self.ray.cluster_resources()
        return max(1, int(resources.get("GPU" if self.gpu else "CPU", 1)))

    def map_unordered(self, fn: TaskFn, items: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
        ray = self.ray
        self._ensure_ray()
        remote = ray.remote(num_gpus=1 if self.gpu else 0, num_cpus=1,
                            max_retries=self.max_retries, retry_exceptions=False)(_run_task)
        limit = self._in_flight_limit()
        pending: dict[Any, Any] = {}  # ObjectRef -> item
        queue = iter(items)
        exhausted = False
        try:
            while True:
                while not exhausted and len(pending) < limit:
                    try:
                        item = next(queue)
                    except StopIteration:
                        exhausted = True
                        break
                    pending[remote.remote(fn, item, self.gpu)] = item
                if not pending:
                    return
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    item = pending.pop(ref)
                    yield item, self._result(ref, item)
        finally:
            for ref in pending:  # interrupted or failed: stop what is still queued or running
                try:
                    ray.cancel(ref, force=True)
                except Exception as exc:  # noqa: BLE001 — best effort on the way out
                    log.debug(f"ray: cancelling a task failed: {exc}")

    def _result(self, ref: Any, item: Any) -> Any:
        ray = self.ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            raise (cause if isinstance(cause, BaseException) else exc) from None
        except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                ray.exceptions.ObjectLostError) as exc:
                raise KernelmillError(f"ray: task for {str(item)[:80]!r} lost its worker "
                                  f"{self.max_retries + 1} times ({type(exc).__name__})") from None
