"""What the grader keeps of a reference run: the run itself, its failure (the problem's fault,
not a candidate's), its tensors' size, the dtype its tolerance is picked by, the on-disk cache
of its timing and sizes (library versions, files written whole), and the grader's runs of the
reference (``ReferenceRuns``): the fresh ones made for each submission from secret seeds, in
batches per worker, or one shared by a group's members. What those runs hold, and so what a
grade asks the device and the host for, is ``reference_sizes``' (re-exported here).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path

from kernelmill.core.errors import KernelmillError
from kernelmill.validate.bytecode import bytecode_folder
from kernelmill.validate.gpus import gpu_lock_path, gpu_name, init_lock
from kernelmill.validate.harness import (
    WorkerResult,
    run_in_worker,
)
from kernelmill.validate.harness_worker import BYTECODE_VAR
from kernelmill.validate.window import WindowSettings

from .compare import remember_scales
from .judge import reference_fault
from .live_reference import LiveReference
from .reference_sizes import (  # noqa: F401 — importable from here, as before
    BATCH_BYTES,
    COMPARE_COPIES,
    GROUP_REFERENCE_MODES,
    GROUP_REFERENCE_VAR,
    HOST_COPIES,
    HOST_FLOOR,
    PEAK_FACTOR,
    SEEN_KEPT,
    SIZE_KEYS,
    WORKER_KINDS,
    ReferenceSizes,
    _tensor_bytes,
    _write_atomically,
    group_reference,
    shipped_outputs,
)
from .side_by_side import _side_by_side, _split

TIMING_KEYS = ("eager", "inductor", "inductor_error")
# The grader's caches (folders of its ``cache_root``): reference runs' sizes and times, and the
# reference's compiled Inductor and Triton kernels. No submission's worker may read them
# (``Grader.private_folders``).
SIZES_FOLDER, TIMINGS_FOLDER = "reference-size", "reference-timing"
INDUCTOR_FOLDER, TRITON_FOLDER = "inductor", "triton-reference"
CACHE_FOLDERS = (SIZES_FOLDER, TIMINGS_FOLDER, INDUCTOR_FOLDER, TRITON_FOLDER)


# Timer settings that change how a sample is taken, not what it times: the cached eager and
# Inductor times are read as their ratio (``checks.timing``), both taken alike
# (``spare_graph``: where a resized graph is captured, not what it holds; ``replay_sync`` and
# ``gate``: how the unseen check's replays are timed, which no scored sample is;
# ``single_warm``: a second one-call check, on inputs read into the L2 cache first)
RATIO_NEUTRAL = ("cover", "spare_graph", "replay_sync", "gate", "single_warm")


def cached_timing_settings(settings: dict) -> dict:
    """The timing settings a cached reference timing depends on: all but the window's own
    (``validate.window.WindowSettings``) and ``RATIO_NEUTRAL``. Inductor's timing is measured
    once per reference, outside any window, so a window's settling or round length does not
    change it."""
    window = WindowSettings.__dataclass_fields__
    return {k: v for k, v in (settings or {}).items()
            if k not in window and k not in RATIO_NEUTRAL}


@functools.lru_cache(maxsize=1)
def _library_versions() -> tuple:
    from importlib import metadata

    import torch

    try:
        triton = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton = None
    return ("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton)


class ReferenceError(KernelmillError):
    """The reference problem itself failed to build or run."""


@dataclass
class ReferenceRun:
    value: dict
    result: WorkerResult
    device: str
    source: str = ""  # what the reference worker ran (a timing worker of its own rebuilds it)
    # the worker that made this run, kept to time it in its grade's window, and the run's
    # index there (``live_reference``); None: a timing worker of its own times it
    live: tuple[LiveReference, int] | None = None
    shared_by: int = 1  # the group members judged against this run (``member_runs``)


class _OwnRuns(Exception):
    """A shared run's members are graded against runs of their own (``_shared_run``)."""


def _reference_value(result: WorkerResult) -> dict:
    """A reference worker's value, or the ``ReferenceError`` of its failure (the problem's)."""
    if not result.ok:
        error = result.error or {}
        raise ReferenceError(f"reference failed in {error.get('stage')}: "
                             f"{error.get('message')}")
    fault = reference_fault(result.value)
    if fault:
        raise ReferenceError(fault)
    return result.value


def member_value(value: dict, member: int) -> dict:
    """What one member of a group sharing a reference run is judged against: the run's
    weights, states and shown trials, and its own unseen trials (``member``), never another's.
    A run made for one submission is its own."""
    return {**value, "trials": [trial for trial in value.get("trials") or []
                                if trial.get("member", member) == member]}


def member_runs(run: ReferenceRun, members: int) -> list[ReferenceRun]:
    """A run made for ``members`` members of a group (``ReferenceRuns.fresh_reference``) as
    each one's ``ReferenceRun`` (``member_value``), each charged a share of its worker's CPU;
    the worker kept to time it (``live``) times it once for all."""
    if members <= 1:
        return [run]
    share = None if run.result.cpu_s is None else round(run.result.cpu_s / members, 3)
    made = []
    for member in range(members):
        value = member_value(run.value, member)
        made.append(ReferenceRun(value, dataclasses.replace(run.result, value=value, cpu_s=share),
                                 run.device, run.source, live=run.live, shared_by=members))
    return made


def close_live(runs: list[ReferenceRun]) -> None:
    """End the kept workers of ``runs`` (each once; those that timed already have ended)."""
    for live in {id(run.live[0]): run.live[0] for run in runs if run.live}.values():
        live.close()


def _first_dtype(ref: dict) -> str:
    """The dtype the judge picks a trial's tolerance by: its first tensor output's."""
    return next((str(t.dtype) for trial in ref["trials"][:1] for t in trial["outputs"]
                 if hasattr(t, "dtype")), "torch.float32")


def _remember_output_scales(value: dict) -> None:
    """The scales the reference's worker computed of each trial's outputs where it made them,
    kept for those tensors (``compare.remember_scales``): the judge does not compute them."""
    for trial in value.get("trials") or []:
        remember_scales(trial.get("outputs") or [], trial.pop("scales", None))


class ReferenceTiming:
    """The ``Grader``'s caches on disk of the reference's eager and Inductor times and of its
    runs' sizes. Reads the grader's ``policy``, ``cache_root``, ``worker_device``, ``_env``,
    ``_run_reference``, ``_timings``, ``_locks`` and ``_lock``."""

    def inductor_timing(self, source: str, *, slot_env: dict | None = None) -> dict:
        """The reference's eager and Inductor times, measured together (their ratio prices
        Inductor in every verdict). They do not depend on a submission's inputs, so they are
        kept on disk per reference source, GPU model, library versions and timing settings,
        shared by every grader and trainer process on this machine, and in this process (the
        times, not the timed run)."""
        path = self._timing_cache_path(source, slot_env)
        if path is not None and path.exists():
            try:
                return json.loads(path.read_text())
            except (OSError, ValueError):
                pass  # unreadable: measure again and rewrite
        memo = (hashlib.sha256(source.encode()).hexdigest(), None if path is None else str(path))
        with self._lock:
            lock = self._locks.setdefault(("timing", *memo), threading.Lock())
        with lock:  # one timed run per source at a time: the grades waiting take its times
            with self._lock:
                if memo in self._timings:
                    return dict(self._timings[memo])
            # its times kept, not the run (every trial's inputs and outputs, on the host and
            # admitted by no grade)
            timed = self._run_reference(source, slot_env).value
            found = {k: timed[k] for k in TIMING_KEYS if k in timed}
            del timed
            if path is not None and found:
                _write_atomically(path, json.dumps(found, default=str))
            with self._lock:
                self._timings[memo] = found
        return dict(found)

    def remembered_size(self, source: str, slot_env: dict | None) -> dict:
        """The sizes (``tensor_bytes``, ``device_peak_bytes``) an earlier grader process saw
        of one fresh reference run of ``source`` on this GPU model ({} where none did): a
        problem's first grade in a new process is admitted by them, not by a share of the GPU
        held until its reference is in."""
        path = self._size_cache_path(source, slot_env)
        try:
            sizes = json.loads(path.read_text()) if path is not None and path.exists() else {}
        except (OSError, ValueError):
            return {}
        return {k: v for k, v in sizes.items() if k in SIZE_KEYS and type(v) is int and v > 0} \
            if isinstance(sizes, dict) else {}

    def remember_size(self, source: str, slot_env: dict | None, sizes: dict) -> None:
        path = self._size_cache_path(source, slot_env)
        if path is not None:
            _write_atomically(path, json.dumps(sizes))

    def _size_cache_path(self, source: str, slot_env: dict | None,
                         kind: str = "sizes") -> Path | None:
        """Sizes depend on the source, the GPU model, the libraries and the trials a grade
        draws; ``kind``: the reference run's sizes, or what NVML read its workers holding
        (``seen``)."""
        name = gpu_name(self.worker_device, self._env(slot_env))
        if name is None:
            return None
        policy = self.policy
        key = json.dumps([kind, source, name, _library_versions(), policy.trials,
                          policy.unseen_trials, policy.hidden_spares, policy.state_trials,
                          policy.redraw_state,
                          # an untimed grade draws no unseen trials
                          *([] if policy.time else ["untimed"]),
                          # what a worker holds by the window's end moves with the timer's own
                          *([cached_timing_settings(policy.timing_settings)]
                            if kind == "seen" else [])],
                         sort_keys=True, default=str)
        folder = self.cache_root / SIZES_FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"

    def _timing_cache_path(self, source: str, slot_env: dict | None) -> Path | None:
        name = gpu_name(self.worker_device, self._env(slot_env))
        if name is None:
            return None
        key = json.dumps([source, name, _library_versions(),
                          cached_timing_settings(self.policy.timing_settings)],
                         sort_keys=True, default=str)
        folder = self.cache_root / TIMINGS_FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"


class ReferenceRuns(ReferenceSizes):
    """The ``Grader``'s runs of the reference: fresh runs for each submission from new secret
    seeds, several to a worker once their size is known; and the device and host bytes a
    grade's workers are admitted by, from those runs' sizes. Reads the grader's ``policy``,
    ``device``, ``worker_device``, ``cache_root``, ``_reference_sizes``, ``_lock`` and
    ``_env``, its host admission (``_on_host``) and its caches on disk (``inductor_timing``,
    ``remembered_size``, ``remember_size``)."""

    def fresh_reference(self, source: str, *, slot_env: dict | None = None,
                        dists: tuple[str, ...] | None = None,
                        live: bool = False, members: int = 1,
                        per_worker: int | None = None) -> ReferenceRun:
        """A reference run for ONE submission: weights and every trial's inputs drawn from new
        secret seeds, so no submission is graded on inputs an earlier one saw (or left answers
        for). The members of one group whose runs one worker made share its shown file (the
        inputs and weights each is given), never its outputs or unseen inputs. Only the
        per-source timing figures (eager/Inductor on CUDA) are shared.
        ``dists``: the input distributions its trials cycle over (default: the policy's).
        ``live``: its worker stays to time it in the grade's window (``ReferenceRun.live``).
        ``members`` > 1: the run of that many members of a group (``_fresh_seeds``), which
        ``member_runs`` splits into each member's; ``per_worker``: the members each of its
        workers makes (default: ``members_per_worker``)."""
        run = self._shared_run(source, slot_env, dists, live, members, per_worker) \
            if members > 1 else \
            self._run_reference(source, slot_env, timed=False, dists=dists, live=live)
        try:
            if self.policy.time and self.policy.use_inductor(self.device):
                run.value.update(self.inductor_timing(source, slot_env=slot_env))
        except BaseException:
            close_live([run])
            raise
        return run

    def _fresh_seeds(self, dists: tuple[str, ...] | None = None, members: int = 1) -> dict:
        """One submission's secret seeds: its weights' and each trial's (and distribution, of
        ``dists``; default: the policy's). ``members`` > 1: one run for that many members of a
        group (``group_reference``), its weights and shown trials theirs alike, and each
        member's unseen trials and spares its own, drawn as one submission's and marked with
        the member's index (``member``)."""
        own = [self._one_submission_seeds(dists) for _ in range(max(1, members))]
        if members <= 1:
            return own[0]
        private = [{**spec, "member": index} for index, seeds in enumerate(own)
                   for spec in seeds["trials"] if spec["hidden"] or spec.get("spare")]
        return {**own[0], "trials": [spec for spec in own[0]["trials"]
                                     if not (spec["hidden"] or spec.get("spare"))] + private}

    def _one_submission_seeds(self, dists: tuple[str, ...] | None) -> dict:
        policy = self.policy
        dists = dists or policy.distributions or ("natural",)
        shown = max(1, policy.trials)
        # for its timing window: the unseen trials, then its spares (on the problem's own
        # draws, as the timed inputs), timed only where the first read slow
        hidden = max(0, policy.unseen_trials) if policy.time else 0
        spares = policy.hidden_spares if hidden else 0
        # Model states (T-18, ``worker.state``): every trial runs under a state re-drawn from
        # the constructor's (1, the base: the candidate gets it at construction), and each of
        # ``state_trials`` checked trials from the second on under another one (2, 3...),
        # loaded between two calls of the candidate's model, on the problem's own input draws
        # (a state and a range apart). The other trials cycle over the distributions.
        base = 1 if policy.redraw_state else 0
        redrawn = range(1, min(shown, 1 + max(0, policy.state_trials))) if base else range(0)
        others = iter(range(shown + hidden))
        trials = [{"seed": secrets.randbelow(2**31 - 2),
                   "dist": "natural" if i in redrawn or i >= shown + hidden
                   else dists[next(others) % len(dists)],
                   "hidden": i >= shown, "state": 1 + i if i in redrawn else base,
                   **({"spare": True} if i >= shown + hidden else {})}
                  for i in range(shown + hidden + spares)]
        return {"init_seed": secrets.randbelow(2**31 - 2),
                "state_seed": secrets.randbelow(2**31 - 2), "trials": trials}

    def _run_reference(self, source: str, slot_env: dict | None, timed: bool = True,
                       dists: tuple[str, ...] | None = None, live: bool = False,
                       seeds: dict | None = None) -> ReferenceRun:
        """One reference worker's run, from ``seeds`` (default: one submission's, fresh)."""
        policy = self.policy
        payload = {"source": source, "device": self.worker_device,
                   **(seeds or self._fresh_seeds(dists)),
                   "serve_timing": live, "time": policy.time and timed,
                   "inductor": timed and policy.time and policy.use_inductor(self.device),
                   "timing_settings": policy.timing_settings,
                   "lock": gpu_lock_path(self.worker_device, self._env(slot_env))}
        env, writable = self._worker_env(slot_env), []
        if payload["inductor"]:
            # Reference workers never run candidate code, so they alone may keep compiled
            # Inductor/Triton artefacts between runs (candidates cannot write there).
            for var, name in (("TORCHINDUCTOR_CACHE_DIR", INDUCTOR_FOLDER),
                              ("TRITON_CACHE_DIR", TRITON_FOLDER)):
                folder = self.cache_root / name
                folder.mkdir(parents=True, exist_ok=True)
                env[var] = str(folder)
                writable.append(str(folder))
            # Inductor's compile subprocesses would initialise CUDA inside the sandbox, which
            # the driver refuses; compile in the worker itself.
            env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
        with self._on_host(source) as limits:
            result, kept = self._reference_worker(payload, env, writable, limits, live)
        try:
            value = _reference_value(result)
        except ReferenceError:
            if kept is not None:
                kept.close()
            raise
        value["init_seed"] = payload["init_seed"]
        _remember_output_scales(value)
        # one member's part: what each grade is admitted by, however many share the run
        self._note_reference_bytes(source, member_value(value, 0), slot_env)
        return ReferenceRun(value, result, self.device, source,
                            live=(kept, 0) if kept is not None else None)

    def _worker_env(self, slot_env: dict | None) -> dict:
        env = self._env(slot_env)
        bytecode = bytecode_folder()
        if bytecode:  # the libraries' bytecode, read only (``validate.bytecode``)
            env[BYTECODE_VAR] = bytecode
        return env

    def _shared_run(self, source: str, slot_env: dict | None,
                    dists: tuple[str, ...] | None, live: bool, members: int,
                    per_worker: int | None = None) -> ReferenceRun:
        """ONE fresh reference run for ``members`` members of a group (``_fresh_seeds``): its
        weights, states and shown trials made once, by the first worker, with the unseen trials
        of the first ``members_per_worker`` members; the other members' unseen trials made
        beside it by workers of their own, under the same weights and states (the same seeds),
        none holding more than a member's own run or ``BATCH_BYTES`` (``members_per_worker``).
        Returns the whole run, every member's unseen trials in it (``member_runs`` splits it);
        its CPU is all its workers'. Raises ``_OwnRuns`` where another worker's draws overflow
        under the base state the first kept."""
        seeds = self._fresh_seeds(dists, members)
        per_worker = per_worker or self.members_per_worker(source, members, slot_env)
        owners = [set(part) for part in _split(range(members), per_worker)]
        shown = [spec for spec in seeds["trials"] if "member" not in spec]

        def private(owned: set) -> list[dict]:
            return [spec for spec in seeds["trials"] if spec.get("member") in owned]

        made: list = [None] * len(owners)

        def make(index: int):
            if index == 0:
                made[0] = self._run_reference(source, slot_env, timed=False, live=live,
                                              seeds={**seeds, "trials": shown + private(owners[0])})
            else:
                made[index] = self._private_trials(source, slot_env, seeds, private(owners[index]))
            return made[index]

        try:
            run, *parts = _side_by_side(make, range(len(owners)))
            cpu = [r.cpu_s for r in (run.result, *parts)]
            if parts and not run.value.get("base_redrawn", True):
                # the first worker fell back to the constructor's base state (its draws
                # overflowed under the re-drawn one): the others' trials again, under it
                parts = made[1:] = []  # their files let go before the new ones are made
                parts = _side_by_side(lambda owned: self._private_trials(
                    source, slot_env, seeds, private(owned), constructor=True), owners[1:])
                cpu += [r.cpu_s for r in parts]
            if any(part.value.get("natural_finite") is False for part in parts):
                # another worker's draws overflowed under the base state the first kept: a run
                # of its own would have fallen back for those members; each member gets one
                raise _OwnRuns
            if any(part.value.get("state_digest") != run.value.get("state_digest")
                   for part in parts):
                raise _OwnRuns  # the same seeds built other weights (the constructor draws
                # from generators the seed does not reach): each member a run of its own
        except BaseException:
            if made[0] is not None:
                close_live([made[0]])
            raise
        for part in parts:
            run.value["trials"] += part.value["trials"]
        run.result = dataclasses.replace(
            run.result, cpu_s=None if None in cpu else round(sum(cpu), 3))
        return run

    def _private_trials(self, source: str, slot_env: dict | None, seeds: dict,
                        trials: list[dict], constructor: bool = False) -> WorkerResult:
        """Some group members' unseen trials, made by a worker of their own under the weights
        and states of ``seeds`` (the run whose shown trials they share); ``constructor``: under
        the constructor's base state, as that run settled on."""
        payload = {"source": source, "device": self.worker_device,
                   "init_seed": seeds["init_seed"], "state_seed": seeds["state_seed"],
                   "trials": trials, "private_only": True, "base_constructor": constructor,
                   "serve_timing": False, "time": False, "inductor": False,
                   "timing_settings": self.policy.timing_settings,
                   "lock": gpu_lock_path(self.worker_device, self._env(slot_env))}
        with self._on_host(source) as limits:
            result, _kept = self._reference_worker(payload, self._worker_env(slot_env), [],
                                                   limits, False)
        _remember_output_scales(_reference_value(result))
        return result

    def _reference_worker(self, payload: dict, env: dict, writable: list, limits: dict,
                          live: bool) -> tuple[WorkerResult, LiveReference | None]:
        """A reference worker's results; with ``live``, delivered ahead by a worker that stays
        to time one of its runs (returned beside them), else at its end."""
        job = {"target": "kernelmill.grade.worker:reference_task", "payload": payload,
               "timeout_s": self.policy.timeout_s * 2,
               "device": self.worker_device, "env": env, "writable": writable,
               "sandbox": self.policy.sandbox, "limits": limits,
               "init_lock": init_lock(self.worker_device, env)}
        # the unseen trials' inputs come back as late parts of their own (handed on as they are)
        job["late_parts"] = True
        if not live:
            return run_in_worker(**job, early_results=True), None
        kept = LiveReference(job, timing_s=self.policy.timeout_s)  # the timing's own limit
        return kept.results(), kept

    def _fresh_batch(self, source: str, count: int, slot_env: dict | None,
                     dists: tuple[str, ...] | None = None,
                     live: bool = False) -> list[ReferenceRun]:
        """``count`` fresh reference runs of ``source`` from ONE worker (one process, one CUDA
        context): each its own secret seeds, weights and inputs, as ``fresh_reference``.
        ``live``: the worker stays to time one of them in the grade's window."""
        if count == 1:
            return [self.fresh_reference(source, slot_env=slot_env, dists=dists, live=live)]
        policy = self.policy
        runs = [self._fresh_seeds(dists) for _ in range(count)]
        payload = {"source": source, "device": self.worker_device, "runs": runs,
                   "serve_timing": live, "time": False, "inductor": False,
                   "timing_settings": policy.timing_settings,
                   "lock": gpu_lock_path(self.worker_device, self._env(slot_env))}
        with self._on_host(source, count, together=True) as limits:
            result, kept = self._reference_worker(payload, self._env(slot_env), [], limits, live)
        try:
            return self._batch_runs(source, runs, result, kept, slot_env)
        except BaseException:
            if kept is not None:
                kept.close()
            raise

    def _batch_runs(self, source: str, runs: list[dict], result: WorkerResult,
                    kept: LiveReference | None, slot_env: dict | None) -> list[ReferenceRun]:
        """A batch worker's result as one ``ReferenceRun`` per run it made."""
        policy, count = self.policy, len(runs)
        values = _reference_value(result).get("runs") or []
        if len(values) != count:
            raise ReferenceError(f"reference worker returned {len(values)} runs of {count}")
        timing = self.inductor_timing(source, slot_env=slot_env) \
            if policy.time and policy.use_inductor(self.device) else {}
        made = []
        for index, (seeds, value) in enumerate(zip(runs, values)):
            fault = reference_fault(value)
            if fault:
                raise ReferenceError(fault)
            value.update(init_seed=seeds["init_seed"], **timing)
            _remember_output_scales(value)
            # each run's share of the worker's CPU time
            share = None if result.cpu_s is None else round(result.cpu_s / count, 3)
            made.append(ReferenceRun(value, dataclasses.replace(result, value=value, cpu_s=share),
                                     self.device, source,
                                     live=(kept, index) if kept is not None else None))
        self._note_reference_bytes(source, values[0], slot_env)
        return made

    def _counted(self, slot_env: dict | None, workers: int):
        """``workers`` reference workers counted on the grade's device while they run
        (``Beside``: the device-work check's floor reads it), the workers started, whichever
        way a grade's runs are made."""
        beside = getattr(self, "_beside", None)
        if beside is None:
            return contextlib.nullcontext()
        return beside.held(self._device_key(slot_env), workers)

    def _fresh_references(self, source: str, count: int, slot_env: dict | None,
                          dists: tuple[str, ...] | None = None,
                          live: bool = False,
                          plan: int | None | str = "decide") -> list[ReferenceRun]:
        """``count`` fresh reference runs of ``source`` (one per member of a grade), made in
        workers side by side. Where members share a run (``members_per_run``), it is made for
        all of them and split into theirs (``member_runs``). Else, once a run of this source
        has been seen, each worker makes as many as fit in ``BATCH_BYTES`` of tensors (a group
        of small problems: one worker, not eight CUDA contexts, which a GPU's driver creates
        one at a time); until then, one each. ``live``: the worker of the first run or batch
        stays to time one of its runs in the grade's window (the caller ends it:
        ``close_live``). ``plan``: ``shared_per_worker`` as the caller read it (default: read
        here)."""
        per_worker = self.shared_per_worker(source, count, slot_env) if plan == "decide" \
            else plan
        if per_worker is not None:
            try:
                with self._counted(slot_env, -(-count // per_worker)):
                    return member_runs(self.fresh_reference(
                        source, slot_env=slot_env, dists=dists, live=live, members=count,
                        per_worker=per_worker), count)
            except _OwnRuns:  # a run for each member, as under ``own``, in every later group
                with self._lock:
                    self._own_runs.add(source)
        size = self.reference_tensor_bytes(source)
        per_worker = 1 if size is None else max(1, min(count, BATCH_BYTES // max(size, 1)))
        sizes = [len(part) for part in _split(range(count), per_worker)]
        made: list[list[ReferenceRun]] = []

        def batch(index_size: tuple[int, int]) -> list[ReferenceRun]:
            runs = self._fresh_batch(source, index_size[1], slot_env, dists,
                                     live=live and index_size[0] == 0)
            made.append(runs)
            return runs

        try:  # a ReferenceError is the problem's: it reaches the caller
            with self._counted(slot_env, len(sizes)):
                batches = _side_by_side(batch, list(enumerate(sizes)))
        except BaseException:
            close_live([run for runs in made for run in runs])
            raise
        return [run for batch in batches for run in batch]
