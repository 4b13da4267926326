"""What a problem's reference runs hold, and so what a grade of it asks for: one fresh run's
tensors, its outputs and its members' own part (kept per problem, here and on disk), what NVML
read its workers holding, the device and host bytes a grade's members are admitted by, and how
many members share a run and each of its workers (``ReferenceSizes``, a mixin of the
``Grader`` through ``reference_run.ReferenceRuns``, which re-exports these names). Reads the
grader's ``policy``, ``worker_device``, ``_env``, ``_lock``, ``_reference_sizes``,
``_seen_workers`` and its size cache (``remembered_size``, ``remember_size``,
``_size_cache_path``).
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from kernelmill.core.errors import env_choice
from kernelmill.validate.gpus import gpu_name
from kernelmill.validate.harness import WORKER_FILE_BYTES, LatePart

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


# How many workers make a shared run's members' unseen trials (``members_per_worker``):
# ``bytes`` (the default), none holding more than a member's own run or ``BATCH_BYTES``;
# ``fewest``, as few as their results files allow (the one-worker form cut a group's reference
# CPU to 0.7 s a member on an H100, and doubled large problems' reference phase, written by one
# thread: an A/B switch for the GPU runs)
SHARED_WORKERS_VAR = "KERNELMILL_SHARED_WORKERS"
SHARED_WORKERS_MODES = ("bytes", "fewest")


def shipped_outputs(policy) -> int:
    """The most outputs a candidate's worker ships for one grade under ``policy``, none of them
    alike (``worker.call.ship`` sends a repeat once): every shown trial's call; the refill,
    repeat and audit calls; the timed call, the secret timed check's and the graph check's;
    the two ghost calls; every unseen trial and spare (the one-call checks take the last one
    or two of them)."""
    return max(1, policy.trials) + 3 + 3 + 2 + max(0, policy.unseen_trials) + \
        policy.hidden_spares


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


class ReferenceSizes:
    """The ``Grader``'s reckoning of what its problems' reference runs and workers hold."""

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
        problem's first group, every group under ``own``, and every group of a problem whose
        shared run once fell back to a run per member: one each)."""
        if members <= 1 or group_reference() != "shared":
            return 1
        with self._lock:
            if source in self._own_runs:
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
        (``harness.WORKER_FILE_BYTES``); under ``SHARED_WORKERS_VAR`` ``fewest``, that file
        alone bounds it."""
        sizes = self._sizes(source, slot_env)
        outputs, tensors = sizes.get("output_bytes"), sizes.get("tensor_bytes") or 0
        unseen = sizes.get("unseen_bytes") or 0
        if not outputs:
            return 1
        policy = self.policy
        private = max(0, policy.unseen_trials) + policy.hidden_spares \
            if policy.time else 0
        room = WORKER_FILE_BYTES // 2 // outputs - max(1, policy.trials) - 1
        held = (max(BATCH_BYTES, tensors) - (tensors - unseen)) // unseen if unseen else members
        if env_choice(SHARED_WORKERS_VAR, SHARED_WORKERS_MODES) == "fewest":
            held = members
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
