"""Run per-item work on a Ray cluster: one host actor per GPU (or per CPU worker) that runs the
same slots the local backend would.

Same contract as ``LocalBackend.map_unordered``: ``fn(item, slot)`` is a module-level function,
``slot`` names the device the task may use, and ``(item, result)`` pairs are yielded as they
finish, so the caller streams them into its resumable JSONL.

On CUDA every GPU of the cluster gets one long-lived host actor (``num_gpus=1``) that runs up to
``per_host`` items at once in threads, so one process per GPU owns that GPU's memory admission
and its running-worker limit, exactly as the local backend's threads do on one machine (a task
per item with ``num_gpus=1`` would run one problem per GPU at a time). On CPU each host runs one
item at a time. A host whose process dies (node gone, worker killed) is restarted and the items
it was running are run again, up to ``max_retries`` times each; an exception raised by ``fn``
itself is not retried and reaches the caller, as with the local backend.

Ray is an optional extra (``pip install -e '.[ray]'``) and is imported only here, only when
this backend is built.
"""
from __future__ import annotations

import logging
import math
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
        raise KernelmillError("the ray backend needs Ray: pip install -e '.[ray]'") from None
    return ray


def _host_slot(gpu: bool, running: int | None) -> Slot:
    """The slot of this Ray actor's device (Ray pins CUDA_VISIBLE_DEVICES for us)."""
    if not gpu:
        return {"device": "cpu", "gpu": None, "env": {}}
    import ray

    ids = [str(i) for i in ray.get_gpu_ids()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") or ",".join(ids) or "0"
    first = visible.split(",")[0]
    slot = {"device": "cuda:0", "gpu": int(first) if first.isdigit() else first,
            "env": {"CUDA_VISIBLE_DEVICES": visible}}
    if running:
        slot["running"] = running
    return slot


def _ensure_ray(ray, address: str | None) -> None:
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, ignore_reinit_error=True,
                 log_to_driver=False)


def cluster_resources(address: str | None = None) -> dict:
    """The cluster's resources (``{"CPU": 32.0, "GPU": 2.0, ...}``), joining or starting it."""
    ray = _import_ray()
    _ensure_ray(ray, address)
    return ray.cluster_resources()


class _Host:
    """One device's slots in one process (the actor's threads share its admission state)."""

    def __init__(self, gpu: bool, running: int | None):
        self.slot = _host_slot(gpu, running)

    def run(self, fn: TaskFn, item: Any) -> Any:
        return fn(item, dict(self.slot))


class RayBackend:
    """Schedule ``fn(item, slot)`` on one host actor per GPU (or per CPU worker).

    device: "auto", "cpu" or "cuda".
    workers: on CPU the number of hosts (default: the cluster's CPUs); on CUDA the items in
        flight across the cluster, spread over its GPUs (default ``per_host`` per GPU).
    per_host: items one GPU's host runs at once (default: ``workers`` spread over the GPUs, or 1).
    running: on CUDA, the most worker processes one GPU runs at once (the slot's ``running``,
        taken after memory admission; validation asks for half its slots).
    address: the cluster to join (``ray://host:10001`` or ``auto``); None starts a local Ray
        unless this process already called ``ray.init``.
    max_retries: how many times an item whose host died is run again.
    """

    def __init__(self, device: str = "auto", workers: int | None = None,
                 address: str | None = None, max_retries: int = 3, *,
                 per_host: int | None = None, running: int | None = None):
        self.ray = _import_ray()
        self.device = resolve_device(device)
        self.gpu = self.device.startswith("cuda")
        self.workers = workers
        self.per_host = per_host
        self.running = running
        self.address = address
        self.max_retries = max_retries

    def _ensure_ray(self) -> None:
        _ensure_ray(self.ray, self.address)

    def layout(self) -> tuple[int, int]:
        """(hosts, items per host) for this cluster."""
        self._ensure_ray()
        resources = self.ray.cluster_resources()
        if not self.gpu:
            return max(1, self.workers or int(resources.get("CPU", 1))), 1
        gpus = int(resources.get("GPU", 0))
        if gpus < 1:
            raise KernelmillError("ray: --device cuda but the cluster has no GPU "
                                  f"(resources: {sorted(resources)})")
        per_host = self.per_host or (math.ceil(self.workers / gpus) if self.workers else 1)
        return gpus, max(1, per_host)

    def _start_hosts(self, count: int, per_host: int) -> list:
        actor = self.ray.remote(_Host).options(
            num_gpus=1 if self.gpu else 0, num_cpus=0 if self.gpu else 1,
            max_concurrency=per_host, max_restarts=-1, max_task_retries=self.max_retries)
        return [actor.remote(self.gpu, self.running) for _ in range(count)]

    def map_unordered(self, fn: TaskFn, items: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
        ray = self.ray
        count, per_host = self.layout()
        queue = iter(items)
        first = next(queue, _END)
        if first is _END:
            return
        hosts = self._start_hosts(count, per_host)
        load = [0] * len(hosts)
        pending: dict[Any, tuple[Any, int]] = {}  # ObjectRef -> (item, host index)
        try:
            item = first
            while True:
                while item is not _END and len(pending) < per_host * len(hosts):
                    index = min(range(len(hosts)), key=load.__getitem__)
                    pending[hosts[index].run.remote(fn, item)] = (item, index)
                    load[index] += 1
                    item = next(queue, _END)
                if not pending:
                    return
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    done, index = pending.pop(ref)
                    load[index] -= 1
                    yield done, self._result(ref, done)
        finally:
            for ref in pending:  # interrupted or failed: stop what is still queued or running
                try:
                    ray.cancel(ref, force=False)
                except Exception as exc:  # noqa: BLE001 — best effort on the way out
                    log.debug(f"ray: cancelling a task failed: {exc}")
            for host in hosts:
                try:
                    ray.kill(host)
                except Exception as exc:  # noqa: BLE001 — best effort on the way out
                    log.debug(f"ray: stopping a host failed: {exc}")

    def _result(self, ref: Any, item: Any) -> Any:
        ray = self.ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            raise (cause if isinstance(cause, BaseException) else exc) from None
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
                ray.exceptions.NodeDiedError, ray.exceptions.ObjectLostError) as exc:
            raise KernelmillError(f"ray: task for {str(item)[:80]!r} lost its worker "
                                  f"{self.max_retries + 1} times ({type(exc).__name__})") from None


_END = object()
