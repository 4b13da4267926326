"""What the grader keeps of a reference run: the run itself, its failure (the problem's fault,
not a candidate's), its tensors' size, the dtype its tolerance is picked by, the on-disk cache
of its timing and sizes (library versions, files written whole), and the grader's runs of the
reference (``ReferenceRuns``): the fresh ones made for each submission from secret seeds, in
batches per worker, and the device and host bytes a grade's workers are admitted by.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import secrets
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from kernelmill.core.errors import KernelmillError, env_choice
from kernelmill.validate.bytecode import bytecode_folder
from kernelmill.validate.gpus import gpu_lock_path, gpu_name, init_lock
from kernelmill.validate.harness import (
    WORKER_FILE_BYTES,
    LatePart,
    WorkerResult,
    run_in_worker,
)
from kernelmill.validate.harness_worker import BYTECODE_VAR
from kernelmill.validate.window import WindowSettings

from .compare import remember_scales
from .judge import reference_fault
from .live_reference import LiveReference
from .side_by_side import _side_by_side, _split

TIMING_KEYS = ("eager", "inductor", "inductor_error")
# The grader's caches (folders of its ``cache_root``): reference runs' sizes and times, and the
# reference's compiled Inductor and Triton kernels. No submission's worker may read them
# (``Grader.private_folders``).
SIZES_FOLDER, TIMINGS_FOLDER = "reference-size", "reference-timing"
INDUCTOR_FOLDER, TRITON_FOLDER = "inductor", "triton-reference"
CACHE_FOLDERS = (SIZES_FOLDER, TIMINGS_FOLDER, INDUCTOR_FOLDER, TRITON_FOLDER)
SIZE_KEYS = ("tensor_bytes", "device_peak_bytes", "output_bytes", "unseen_bytes")
# Tensors one reference worker returns for a group's members at most (their inputs and outputs
# cross one pipe, then sit in this process): more members, more workers side by side.
BATCH_BYTES = 1 << 30
# A grading worker's device memory against a reference worker's measured peak (the reference
# holds one trial at a time; a candidate also keeps a few calls' outputs for comparison)
PEAK_FACTOR = 2
SEEN_KEPT = 32  # readings of a problem's workers' device memory kept, of each kind
WORKER_KINDS = ("candidate", "reference")
# The grading process's host memory per member of a grade on a GPU against one fresh reference
# run's tensors: that run (every trial's inputs and outputs, the model's states, the unseen
# inputs: the files the candidate's worker is handed as they are, no copy) and the candidate's
# returned outputs with their comparison. At 3 (a copy of the shown inputs counted for the
# candidate's job) groups of 8 ran two at a time of four slots, waiting up to 60 s for host
# admission (H200, 128 GiB, KernelBench GEMMs)
HOST_COPIES = 2
# Where one trial's outputs are known (``output_bytes``) and it is less, a member is admitted on
# the host at the reference run's tensors once (its files: the shown inputs and weights the
# candidate's job passes on as they are, the unseen inputs its late parts hand over, every
# trial's outputs) plus the outputs the candidate's worker ships (``shipped_outputs``: each of
# its calls', none found alike) and ``COMPARE_COPIES`` outputs of the judge's comparison.
# Measured on the host (a group of 4 of a 16M-element scale-add, the grading process's memory
# files by inode): 8,232 MiB held at most, where this counts 11,264 and ``HOST_COPIES`` 12,800;
# a 4096x4096 row sum (64 MB in, 16 KB out) held 2,050 MiB, its tensors once. An input-heavy
# problem (cross-entropy's 512 MB of logits, a scalar out) is counted at ``HOST_FLOOR``, an
# output-heavy one (LayerNorm: as much out as in) at ``HOST_COPIES``, which a candidate whose
# every call's output differs may pass.
COMPARE_COPIES = 3
# and never under this many times the run's tensors: its job's own copy of the shown inputs and
# weights where the shown file cannot be passed on (``payload_files.passed_on``: at most half
# the run's tensors, the shown trials being half its trials)
HOST_FLOOR = 1.5


# ``shared``: one fresh reference run serves several members of a group (``members_per_run``):
# they are handed its weights, states and shown inputs alike (what each sees anyway: a member
# told another's answers to them learns what it could compute), and each its own unseen trials
# and spares, drawn from seeds of its own and handed to it alone (``member_value``), so the
# unseen check each is judged on stays its own (T-14). The grading process holds its shared part
# once, so a group asks the host for less (the default: on an H100, KernelBench groups of 8,
# LayerNorm's waited 0.2 s for host memory against 125 s under ``own``, which gives each member
# a run of its own)
GROUP_REFERENCE_VAR = "KERNELMILL_GROUP_REFERENCE"
GROUP_REFERENCE_MODES = ("shared", "own")


def group_reference() -> str:
    """The group reference switch's value (``GROUP_REFERENCE_VAR``; an unknown one is an
    error)."""
    return env_choice(GROUP_REFERENCE_VAR, GROUP_REFERENCE_MODES)


def shipped_outputs(policy) -> int:
    """The most outputs a candidate's worker ships for one grade under ``policy``, none of them
    alike (``worker.call.ship`` sends a repeat once): every shown trial's call; the refill,
    repeat and audit calls; the timed call, the secret timed check's and the graph check's;
    the two ghost calls; every unseen trial and spare (the one-call graph's check takes the
    last of them)."""
    return max(1, policy.trials) + 3 + 3 + 2 + max(0, policy.unseen_trials) + \
        max(0, policy.unseen_spares)


# Timer settings that change how a sample is taken, not what it times: the cached eager and
# Inductor times are read as their ratio (``checks.timing``), both taken alike
# (``spare_graph``: where a resized graph is captured, not what it holds; ``replay_sync`` and
# ``gate``: how the unseen check's replays are timed, which no scored sample is)
RATIO_NEUTRAL = ("cover", "spare_graph", "replay_sync", "gate")


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


def _write_atomically(path: Path, text: str) -> None:
    """A cache file appears whole or not at all; several graders (threads or processes) may
    write the same one at once. A cache that cannot be written costs speed, never a grade."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except OSError:
        pass


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


def _tensor_bytes(value) -> int:
    """Bytes of the tensors in a (nested) reference result."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, LatePart):  # an unseen trial's inputs, in a file of their own
        return value.size
    if isinstance(value, dict):
        return sum(_tensor_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v) for v in value)
    return 0


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
                          policy.unseen_trials, policy.unseen_spares, policy.state_trials,
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


class ReferenceRuns:
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
        spares = max(0, policy.unseen_spares) if hidden else 0
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

    def device_bytes(self, source: str, record: dict | None = None,
                     slot_env: dict | None = None) -> int | None:
        """What one worker of a grade of ``source`` is expected to hold on the device:
        ``PEAK_FACTOR`` times the problem's measured peak from validation, else times the device
        peak a reference worker of it reached (its weights, one trial's tensors and its
        activations);
        else (no device peak known: a run off a GPU) twice the tensors of one fresh reference
        run; from this process's runs, else from the sizes an earlier process saw on this GPU
        model (``remembered_size``); None before any is known."""
        peak = self.reference_peak_bytes(source, record, slot_env)
        if peak:
            return PEAK_FACTOR * peak
        sizes = self._sizes(source, slot_env)
        return 2 * sizes["tensor_bytes"] if sizes.get("tensor_bytes") else None

    def reference_peak_bytes(self, source: str, record: dict | None = None,
                             slot_env: dict | None = None) -> int | None:
        """The device peak one reference worker of ``source`` reaches (one trial at a time):
        the problem's measured peak from validation, else the peak a reference worker of it
        reached here or on this GPU model before; None where neither is known."""
        memory = ((record or {}).get("validation") or {}).get("memory") or {}
        if memory.get("measured_bytes"):
            return int(memory["measured_bytes"])
        return self._sizes(source, slot_env).get("device_peak_bytes") or None

    def host_bytes(self, source: str, slot_env: dict | None = None) -> int | None:
        """What this process holds on the host for one member of a grade of ``source`` on a
        GPU: ``HOST_COPIES`` times the tensors of one fresh reference run (every trial's inputs
        and outputs, its weights), or, where one trial's outputs are known and it is less, the
        run's tensors once and the outputs the candidate ships and the judge compares
        (``shipped_outputs`` plus ``COMPARE_COPIES`` of one trial's outputs), never under
        ``HOST_FLOOR`` times the run's tensors: an input-heavy problem's candidate ships
        little. None before any run of it is known."""
        sizes = self._sizes(source, slot_env)
        tensors, outputs = sizes.get("tensor_bytes"), sizes.get("output_bytes")
        if not tensors:
            return None
        if not outputs:
            return HOST_COPIES * tensors
        by_outputs = tensors + (shipped_outputs(self.policy) + COMPARE_COPIES) * outputs
        return int(min(HOST_COPIES * tensors, max(HOST_FLOOR * tensors, by_outputs)))

    def members_per_run(self, source: str, members: int,
                        slot_env: dict | None = None) -> int:
        """How many of a group's ``members`` share one fresh reference run's weights and shown
        trials: under ``shared`` all of them, once a run of ``source`` has shown its size (a
        problem's first group, and every group under ``own``: one each)."""
        if members <= 1 or group_reference() != "shared":
            return 1
        sizes = self._sizes(source, slot_env)
        # (a timed run's sizes without its unseen part: kept before they were told apart)
        known = sizes.get("output_bytes") and (sizes.get("unseen_bytes") or not self.policy.time)
        return members if known else 1

    def members_per_worker(self, source: str, members: int,
                           slot_env: dict | None = None) -> int:
        """How many members' unseen trials one worker of a shared run makes (``_shared_run``):
        as many as keep its tensors within what one member's own run holds, or
        ``BATCH_BYTES`` where that is more (the first worker makes the shown trials too), and
        its results file (every shown trial's outputs once, the constructor's of the first,
        and each member's unseen trials' and spares') within half a worker's file limit
        (``harness.WORKER_FILE_BYTES``)."""
        sizes = self._sizes(source, slot_env)
        outputs, tensors = sizes.get("output_bytes"), sizes.get("tensor_bytes") or 0
        unseen = sizes.get("unseen_bytes") or 0
        if not outputs:
            return 1
        policy = self.policy
        private = max(0, policy.unseen_trials) + max(0, policy.unseen_spares) \
            if policy.time else 0
        room = WORKER_FILE_BYTES // 2 // outputs - max(1, policy.trials) - 1
        held = (max(BATCH_BYTES, tensors) - (tensors - unseen)) // unseen if unseen else members
        return max(1, min(members, room // max(1, private), held))

    def shared_per_worker(self, source: str, members: int,
                          slot_env: dict | None = None) -> int | None:
        """How many members' unseen trials each worker of a group's shared run makes
        (``members_per_worker``), or None where the members do not share a run
        (``members_per_run``). A grade decides it once (``_fresh_references(plan=...)``): the
        sizes it reads are replaced after every run, by other grades too, and the workers it
        counts on the device must be the workers it starts."""
        if self.members_per_run(source, members, slot_env) <= 1:
            return None
        return self.members_per_worker(source, members, slot_env)

    def group_host_bytes(self, source: str, members: int,
                         slot_env: dict | None = None) -> int | None:
        """What this process holds on the host for a grade of ``members`` of ``source`` on a
        GPU: ``host_bytes`` per member, less, where they share a run (``members_per_run``),
        the part of it they share (its weights, states and shown trials: all but a member's
        unseen trials, ``unseen_bytes``) for every member but one. None before any run of it
        is known."""
        each = self.host_bytes(source, slot_env)
        if each is None:
            return None
        sizes = self._sizes(source, slot_env)
        shared = max(0, (sizes.get("tensor_bytes") or 0) - (sizes.get("unseen_bytes") or 0)) \
            if self.members_per_run(source, members, slot_env) > 1 else 0
        return int(members * each - (members - 1) * shared)

    def _sizes(self, source: str, slot_env: dict | None) -> dict:
        with self._lock:
            sizes = self._reference_sizes.get(source)
        if sizes is None:  # read from disk once per process ({}: none there either)
            sizes = self.remembered_size(source, slot_env)
            with self._lock:
                sizes = self._reference_sizes.setdefault(source, sizes)
        return sizes

    def _note_reference_bytes(self, source: str, value: dict,
                              slot_env: dict | None = None) -> None:
        sizes = {"tensor_bytes": _tensor_bytes(value)}
        unseen = _tensor_bytes([trial for trial in value.get("trials") or []
                                if isinstance(trial, dict) and trial.get("hidden")])
        if unseen:  # its unseen trials' inputs and outputs: a member's own part of a run
            sizes["unseen_bytes"] = unseen
        outputs = max((_tensor_bytes(trial.get("outputs")) for trial in value.get("trials") or []
                       if isinstance(trial, dict)), default=0)
        if outputs:  # one trial's outputs, the largest: what each shipped output may hold
            sizes["output_bytes"] = outputs
        if isinstance(value.get("device_peak_bytes"), int):
            sizes["device_peak_bytes"] = value["device_peak_bytes"]
        with self._lock:
            old = self._reference_sizes.get(source) or {}
            self._reference_sizes[source] = sizes
        # on disk when first seen here or grown (a peak moves a little from run to run)
        if any(sizes[k] > old.get(k, 0) for k in sizes):
            self.remember_size(source, slot_env, sizes)

    def note_worker_memory(self, source: str, views: dict,
                           slot_env: dict | None = None) -> None:
        """What NVML read a grade's workers of ``source`` holding on the device once their GPU
        work was done (each window view's ``device_mib``), the last ``SEEN_KEPT`` of each kind
        kept for ``seen_worker_bytes``, here and on disk for later grading processes on this
        GPU model (``remembered_workers``)."""
        read = [view.get("device_mib") or {} for view in views.values() if view]
        seen = self._seen_of(source, slot_env)
        with self._lock:
            added = False
            for who in WORKER_KINDS:
                got = [mib for mib in (r.get(who) for r in read) if type(mib) is int and mib > 0]
                seen[who] = (seen[who] + got)[-SEEN_KEPT:]
                added = added or bool(got)
            kept = {who: list(seen[who]) for who in WORKER_KINDS}
        if added:
            path = self._size_cache_path(source, slot_env, "seen")
            if path is not None:
                _write_atomically(path, json.dumps(kept))

    def remembered_workers(self, source: str, slot_env: dict | None) -> dict:
        """The NVML readings of ``source``'s workers an earlier grading process kept on this
        GPU model (``note_worker_memory``): ``{candidate: [MiB...], reference: [...]}``, empty
        lists where none (or where its file is unreadable or malformed)."""
        path = self._size_cache_path(source, slot_env, "seen")
        try:
            kept = json.loads(path.read_text()) if path is not None and path.exists() else {}
        except (OSError, ValueError, RecursionError):
            kept = {}
        kept = kept if isinstance(kept, dict) else {}
        return {who: [mib for mib in kept.get(who) or [] if type(mib) is int and mib > 0]
                [-SEEN_KEPT:] if isinstance(kept.get(who), list) else []
                for who in WORKER_KINDS}

    def _seen_of(self, source: str, slot_env: dict | None) -> dict:
        """This process's readings of ``source``'s workers on the slot's GPU model, begun from
        the kept ones (read from disk once per process and model; written back as they grow,
        the last writer's kept where processes grade the same problem at once)."""
        key = (source, gpu_name(self.worker_device, self._env(slot_env)))
        with self._lock:
            seen = self._seen_workers.get(key)
        if seen is None:
            kept = self.remembered_workers(source, slot_env)
            with self._lock:
                seen = self._seen_workers.setdefault(key, kept)
        return seen

    def seen_worker_bytes(self, source: str, slot_env: dict | None = None) -> int | None:
        """The device memory a worker of ``source`` was seen to hold, context and allocator
        cache included: the most a reference worker held, or the candidates' median where that
        is more, at most ``PEAK_FACTOR`` times the reference's (candidates set their own
        readings: one holding far more than the others does not raise every later grade's ask;
        it runs out of memory and is graded again alone); None before a reading, here or in
        an earlier process on this GPU model."""
        seen = self._seen_of(source, slot_env)
        with self._lock:
            candidates, references = sorted(seen["candidate"]), list(seen["reference"])
        median = candidates[len(candidates) // 2] if candidates else 0
        if references:
            median = min(median, PEAK_FACTOR * max(references))
        most = max([*references, median])
        return most << 20 if most else None

    def reference_tensor_bytes(self, source: str) -> int | None:
        """The tensors of one fresh reference run of ``source`` seen here (None: not yet)."""
        with self._lock:
            return (self._reference_sizes.get(source) or {}).get("tensor_bytes")

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
                return member_runs(self.fresh_reference(source, slot_env=slot_env, dists=dists,
                                                        live=live, members=count,
                                                        per_worker=per_worker), count)
            except _OwnRuns:
                pass  # a run for each member, as under ``own``
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
            batches = _side_by_side(batch, list(enumerate(sizes)))
        except BaseException:
            close_live([run for runs in made for run in runs])
            raise
        return [run for batch in batches for run in batch]
