"""Where the service's groups are graded: long-lived hosts, one per GPU (or N on CPU).

A ``GradingHost`` loads the served problems once and grades a group of submissions of one
problem with ``grade.batch.grade_group_items``, the function the batch grader calls per group:
the same slots, memory admission, worker processes and exclusive timing window. Nothing about
grading is different here; the host only turns a submission into the batch's item.

Two pools hold hosts:

- ``RayPool``: one Ray actor per GPU of the cluster (``num_gpus=1``; Ray pins its GPU), or
  ``actors`` CPU actors. An actor that dies is restarted by Ray; the group it was grading raises
  ``ActorLost`` and the dispatcher requeues it (``jobs.JobTable.requeue``).
- ``LocalPool``: hosts in this process, one per slot (``core.devices.device_slots``), graded in
  threads: no Ray needed, for one machine and for tests.

On a GPU a host grades several groups at once in threads (``per_actor`` slots: by default the
batch grader's per-GPU slots, ``batch.default_slots_per_gpu``), sharing the GPU's memory
admission and timing window as the batch's slots do; one group at a time left the GPU idle
between a grade's stages. On CPU a host grades one group at a time.

Ray is imported only when a ``RayPool`` is built (``pip install -e '.[ray]'``).
"""
from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict

from kernelmill.core.devices import device_slots
from kernelmill.core.errors import KernelmillError

from ..batch import default_slots_per_gpu, grade_group_items
from ..policy import Policy

log = logging.getLogger("kernelmill")


class ActorLost(Exception):
    """The host grading a group died (its process, its node); the group may be graded again."""


def _config(device: str, policy: Policy, reward: str, extensions_root: str | None) -> dict:
    return {"device": device, "policy": asdict(policy), "reward": reward,
            "extensions_root": extensions_root}


class GradingHost:
    """One device's grader. ``dataset``/``split``: the served problems (``grade.problems``
    forms: a folder, a parquet file, a JSONL or a Hub id), loaded once; None serves only
    submissions that carry their reference."""

    def __init__(self, dataset: str | None, split: str | None, device: str, policy: dict,
                 reward: str, slot: dict | None = None, extensions_root: str | None = None,
                 ray_gpu: bool | None = None, running: int | None = None):
        from ..problems import load_problems

        self.problems = load_problems(dataset, split) if dataset else {}
        if ray_gpu is not None:  # a Ray actor: Ray pinned its device
            from kernelmill.validate.ray_backend import _host_slot

            slot = _host_slot(ray_gpu, running)
        self.slot = slot or {"device": "cpu", "gpu": None, "env": {}}
        self.config = _config(device, Policy(**policy), reward, extensions_root)

    def grade(self, group: list[dict]) -> list[dict]:
        """Verdicts for submissions of one problem, in order. A submission names a served
        ``problem_id`` (used when this host serves it) or carries its ``reference`` (and
        optionally ``record`` with the calibration)."""
        first = group[0]
        problem = self.problems.get(str(first.get("problem_id")))
        if problem is not None:
            reference, record = problem["source"], {"validation": problem.get("validation") or {}}
        else:
            reference, record = first["reference"], first.get("record") or {"validation": {}}
        items = [{"submission_id": entry.get("job", str(i)), "problem_id":
                  str(first.get("problem_id") or "reference"), "source": entry["source"],
                  "reference": reference, "record": record, "config": self.config}
                 for i, entry in enumerate(group)]
        return grade_group_items(items, dict(self.slot))

    def pid(self) -> int:
        return os.getpid()


class LocalPool:
    """Hosts in this process, one per slot, each grading one group at a time in a thread."""

    def __init__(self, *, dataset: str | None, split: str | None, device: str, policy: Policy,
                 reward: str, actors: int | None = None, extensions_root: str | None = None,
                 per_actor: int | None = None):
        self.args = (dataset, split, device, asdict(policy), reward)
        self.slots = device_slots(device, actors)
        self.extensions_root = extensions_root
        self.hosts: list[GradingHost] = []
        gpu = self.slots[0].get("gpu") is not None
        # one host per GPU grades in the batch's slots; hosts asked for by number, one each
        self.per_actor = per_actor or (default_slots_per_gpu(len(self.slots))
                                       if gpu and not actors else 1)
        self._threads: ThreadPoolExecutor | None = None

    @property
    def size(self) -> int:
        return len(self.slots)

    async def start(self) -> None:
        def build() -> list[GradingHost]:
            return [GradingHost(*self.args, slot=slot, extensions_root=self.extensions_root)
                    for slot in self.slots]

        self.hosts = await asyncio.to_thread(build)
        self._threads = ThreadPoolExecutor(len(self.hosts) * self.per_actor,
                                           thread_name_prefix="kernelmill-host")

    async def grade(self, index: int, group: list[dict]) -> list[dict]:
        return await asyncio.get_running_loop().run_in_executor(
            self._threads, self.hosts[index].grade, group)

    def alive(self) -> int:
        return len(self.hosts)

    def kill(self, index: int) -> None:
        raise KernelmillError("a local grading host shares the service's process: it cannot be "
                              "killed alone (only --backend ray hosts can)")

    def close(self) -> None:
        self.hosts = []
        if self._threads is not None:
            self._threads.shutdown(wait=False)


class RayPool:
    """One Ray actor per GPU of the cluster, or ``actors`` CPU actors.

    address: the cluster (``auto``, ``ray://host:10001``); None starts a local Ray unless this
        process already called ``ray.init``.
    per_actor: slots one actor grades in at once (its threads share the GPU's admission and
        window, as the batch's slots do); default on a GPU the batch's per-GPU slots for the
        cluster's cores per GPU, 1 on CPU.
    running: on CUDA, the most worker processes an actor lets run at once.
    """

    def __init__(self, *, dataset: str | None, split: str | None, device: str, policy: Policy,
                 reward: str, actors: int | None = None, address: str | None = None,
                 per_actor: int | None = None, running: int | None = None,
                 extensions_root: str | None = None):
        from kernelmill.validate.ray_backend import _import_ray

        self.ray = _import_ray()
        self.args = (dataset, split, device, asdict(policy), reward)
        self.gpu = device.startswith("cuda")
        self.actors, self.address, self.running = actors, address, running
        self.per_actor = per_actor or 1
        self._per_actor_asked = per_actor
        self.extensions_root = extensions_root
        self.handles: list = []
        self.recovering: set[int] = set()  # actors lost and not yet answering again
        self.restart_timeout_s = 300.0

    @property
    def size(self) -> int:
        return len(self.handles)

    def usable(self, index: int) -> bool:
        return index not in self.recovering

    def _lost(self) -> tuple:
        ray = self.ray
        return (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
                ray.exceptions.NodeDiedError, ray.exceptions.ObjectLostError)

    async def wait_recovered(self, index: int) -> None:
        """Wait until Ray has restarted actor ``index`` (a call to a restarting actor fails at
        once rather than waiting for it)."""
        end = asyncio.get_running_loop().time() + self.restart_timeout_s
        while True:
            try:
                await self.handles[index].pid.remote()
            except self._lost() as exc:
                if asyncio.get_running_loop().time() > end:
                    raise ActorLost(f"actor {index} did not come back ({type(exc).__name__})"
                                    ) from None
                await asyncio.sleep(0.5)
                continue
            self.recovering.discard(index)
            return

    def _start(self) -> None:
        from kernelmill.validate.ray_backend import _ensure_ray

        _ensure_ray(self.ray, self.address)
        resources = self.ray.cluster_resources()
        count = int(resources.get("GPU", 0)) if self.gpu else \
            (self.actors or max(1, int(resources.get("CPU", 1)) - 1))
        if count < 1:
            raise RuntimeError(f"ray: --device cuda but the cluster has no GPU ({resources})")
        if self.gpu and not self._per_actor_asked:  # as grade_file's Ray backend sizes a GPU
            self.per_actor = default_slots_per_gpu(count, cores=int(resources.get("CPU", 2)))
        remote = self.ray.remote(GradingHost).options(
            num_gpus=1 if self.gpu else 0, num_cpus=0 if self.gpu else 1,
            max_concurrency=self.per_actor, max_restarts=-1, max_task_retries=0)
        self.handles = [remote.remote(*self.args, extensions_root=self.extensions_root,
                                      ray_gpu=self.gpu, running=self.running)
                        for _ in range(count)]
        self.ray.get([h.pid.remote() for h in self.handles])  # loaded, or the error now

    async def start(self) -> None:
        await asyncio.to_thread(self._start)

    async def grade(self, index: int, group: list[dict]) -> list[dict]:
        ray = self.ray
        if index in self.recovering:
            await self.wait_recovered(index)
        try:
            return await self.handles[index].grade.remote(group)
        except self._lost() as exc:
            self.recovering.add(index)
            raise ActorLost(f"actor {index} lost ({type(exc).__name__})") from None
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            raise (cause if isinstance(cause, BaseException) else exc) from None

    async def pid(self, index: int) -> int:
        return await self.handles[index].pid.remote()

    def alive(self) -> int:
        """Actors not known to be lost (one lost is counted again once it answers)."""
        return len(self.handles) - len(self.recovering)

    def kill(self, index: int) -> None:
        """End actor ``index``'s process (Ray restarts it): its group is lost, then requeued."""
        self.ray.kill(self.handles[index], no_restart=False)

    def close(self) -> None:
        for handle in self.handles:
            try:
                self.ray.kill(handle)
            except Exception as exc:  # noqa: BLE001 — best effort on the way out
                log.debug(f"ray: stopping an actor failed: {exc}")
        self.handles = []
