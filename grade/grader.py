"""Grade one candidate against one reference: the orchestration in the trusted parent (the
``Grader``). Its reference runs (step 2) are a mixin, ``reference_run.ReferenceRuns``; this module
holds the steps around them: the candidate's build and run, the timing window, the judge.

1. Static: parse the candidate, check it defines ``ModelNew``, scan it (``static.scan``).
2. Reference: a worker that never sees the candidate builds the problem from its source text,
   draws the weights and each trial's inputs from seeds chosen here (``secrets``) afresh for
   every submission, and computes the reference outputs. Only Inductor's timing (CUDA) is
   cached: on disk per reference source, GPU model and library versions.
3. Candidate: a second worker gets the inputs, the constructor arguments and the weights (never
   the reference outputs) and runs forward under observation. Timing: the reference's worker
   of step 2, kept after its results (``live_reference``; else a third worker that rebuilds the
   reference), times the reference (never the candidate) on the candidate's timing inputs, and
   both are timed in one exclusive window on the GPU, in alternating rounds
   (``validate.window``); the verdict's ``timing`` and speedups come from that window only,
   or with ``KERNELMILL_REFERENCE_TIME=pooled`` over the reference's kept windows of the same
   problem (``reference_pool``).
4. Judge (``judge.judge``) here, then the reward.

``Grader.grade`` always returns a verdict dict; it raises only for a reference that cannot run
(``ReferenceError``), which is the problem's fault, not the candidate's.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
from pathlib import Path

from kernelmill.core.devices import resolve_device
from kernelmill.core.errors import KernelmillError
from kernelmill.validate.cuda_wait import WAIT_VAR
from kernelmill.validate.gpus import gpu_lock_path, init_lock
from kernelmill.validate.harness import LatePart, WorkerResult, run_in_worker

from . import static
from .beside import Beside
from .builds import (
    _guarded_files,
    _stamp,
    cuda_arch_list,
    extension_dir,
    needs_extension_build,
    streamed_texts,
)
from .early_candidates import CANDIDATE_TARGET, EarlyWorkers, early_candidates
from .host_memory import THREAD_ROOM, HostMemory  # noqa: F401
from .judge import amend, judge, usable_trials
from .policy import Policy
from .reference_pool import ReferencePool, may_keep, pool_mode, pool_views
from .reference_run import (  # noqa: F401 — importable from here, as before
    CACHE_FOLDERS,
    HOST_COPIES,
    PEAK_FACTOR,
    TIMING_KEYS,
    ReferenceError,
    ReferenceRun,
    ReferenceRuns,
    ReferenceTiming,
    _first_dtype,
    close_live,
)
from .rewards import get_reward
from .side_by_side import (
    _side_by_side,
    stage_cpu_seconds,
    stage_seconds,
    unseen_calls,
    unseen_steps,
)
from .size import grading_size
from .source_scan import SourceReader
from .static_gate import StaticGate
from .timed_window import TimedWindow


def _refuse_hiding_libraries(folders: list[str]) -> None:
    """A folder hidden from submissions' workers (``Grader.private_folders``) may not hold the
    Python installation or kernelmill itself: every worker would then fail to import what it
    runs. Raises ``KernelmillError`` naming the folder."""
    import sys

    # the installation's prefixes and kernelmill's own folder (this module's package's parent)
    needed = [sys.prefix, sys.base_prefix, os.path.dirname(os.path.dirname(__file__))]
    for folder in folders:
        real = os.path.realpath(folder)
        held = [path for path in needed if os.path.realpath(path) == real or
                os.path.realpath(path).startswith(real.rstrip(os.sep) + os.sep)]
        if held:
            raise KernelmillError(f"{folder}: a grader's cache or extension build folder may not "
                                  f"hold {held[0]} (submissions may not read it); choose a "
                                  "folder of its own")


class Grader(HostMemory, ReferenceRuns, ReferenceTiming, StaticGate, TimedWindow):
    """Grades candidates on one device; reuses reference runs across candidates. Its host
    memory admission (``host_memory``), its reference runs and the reference's timing cache
    (``reference_run``), its static decisions (``static_gate``) and its timing windows
    (``timed_window``) are mixins."""

    def __init__(self, device: str = "auto", *, policy: Policy | None = None,
                 extensions_root: str | None = None, guard_paths: list[str] = (),
                 cache_root: str | None = None,
                 cpu_max_numel: int | None = None, host_memory_bytes: int | None = None):
        self.device = resolve_device(device)
        self.policy = policy or Policy()
        # absolute: workers run in folders of their own, and the folders hidden from them
        # (``private_folders``) name this one
        self.cache_root = Path(os.path.abspath(
            cache_root or os.environ.get("KERNELMILL_CACHE_DIR") or
            Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kernelmill"))
        # Extension builds: one folder per candidate source, writable by that candidate only.
        # absolute: the compile worker and the candidate's worker run in folders of their own,
        # and a relative build folder (``grade_file``'s beside a relative ``--out``) named a
        # different place in each: the candidate found no build and tried to compile itself
        self.extensions_root = os.path.abspath(extensions_root) if extensions_root else \
            str(self.cache_root / "extensions")
        _refuse_hiding_libraries(self.private_folders())
        self.guard_paths = [*guard_paths, *_guarded_files()]
        self.cpu_max_numel = cpu_max_numel  # None: synth.resize.CPU_MAX_NUMEL, as validation
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        # sources whose extensions a compile worker built, with its result, and the findings
        # in the native sources that build compiled (assembled at run time or not)
        self._compiled: dict[str, WorkerResult] = {}
        self._built_findings: dict[str, list[str]] = {}
        # CPU workers are admitted on the host's memory (validate.host_admission) like validation's
        self.host_memory_bytes = host_memory_bytes
        self._host_needs: dict[str, int] = {}
        # per source: one fresh reference run's tensors and its worker's device peak
        self._reference_sizes: dict[str, dict] = {}
        # sources whose shared run fell back to a run per member (``_OwnRuns``): so from then on
        self._own_runs: set[str] = set()
        # per source and GPU model: its workers' NVML readings
        self._seen_workers: dict[tuple, dict] = {}
        # per source and timing cache file: the reference's eager and Inductor times
        self._timings: dict[tuple, dict] = {}
        # the candidate's source is parsed, checked and scanned in bounded scanner processes
        self._reader = SourceReader(self.policy.max_source_bytes, self.policy.scan_timeout_s)
        self._beside = Beside()  # GPU workers in flight per device (the device-work bound)
        # the reference's time pooled over a problem's windows (``reference_pool``), or not
        self._reference_mode = pool_mode()
        self._reference_pool = ReferencePool() if self._reference_mode != "window" else None

    def _device_key(self, slot_env: dict | None) -> str:
        """The device a grade's workers see, as ``Beside`` counts them."""
        return self._env(slot_env).get("CUDA_VISIBLE_DEVICES", self.device)

    @property
    def worker_device(self) -> str:
        return "cuda:0" if self.device.startswith("cuda") else "cpu"

    def _env(self, slot_env: dict | None) -> dict:
        env = dict(slot_env or {})
        if self.device.startswith("cuda") and ":" in self.device and not env:
            env["CUDA_VISIBLE_DEVICES"] = self.device.split(":")[1]
        if self.device.startswith("cuda"):
            # workers sleep while they wait for the GPU (``validate.cuda_wait``): a spinning
            # wait burns a core for every worker queued on the shared GPU. The grading
            # process's own KERNELMILL_CUDA_WAIT (``auto``: the driver's choice) overrides it.
            env.setdefault(WAIT_VAR, os.environ.get(WAIT_VAR) or "block")
        return env

    # ------------------------------------------------------------ candidate

    def private_folders(self) -> list[str]:
        """The folders a submission's workers may not read: the grader's caches
        (``CACHE_FOLDERS``: the reference's compiled Inductor and Triton kernels, its timings
        and sizes) and every submission's extension builds, the worker's own build folder
        excepted (``writable`` grants it): another submission's sources and builds are neither
        its to read nor a place to leave answers in. The cache root itself is not hidden: a
        user's may hold more than the grader's."""
        return [str(self.cache_root / name) for name in CACHE_FOLDERS] + [self.extensions_root]

    def compile(self, candidate_source: str) -> WorkerResult | None:
        """Build the candidate's extensions on a CPU-only worker (overlaps GPU work)."""
        if not (self.extensions_root and needs_extension_build(candidate_source)):
            return None
        build = extension_dir(self.extensions_root, candidate_source)
        env = {"TORCH_EXTENSIONS_DIR": build, "CUDA_VISIBLE_DEVICES": ""}
        if self.device.startswith("cuda"):
            arch = cuda_arch_list()
            if arch:
                env["TORCH_CUDA_ARCH_LIST"] = arch
        result = run_in_worker("kernelmill.grade.worker:compile_task",
                               {"source": candidate_source},
                               timeout_s=max(self.policy.timeout_s, self.policy.compile_timeout_s),
                               device="cpu", env=env, writable=[build],
                               sandbox=self.policy.sandbox, hidden=self.private_folders())
        # the texts the worker streamed as its loaders were handed them, and those it reported
        texts = streamed_texts(result.reports) + \
            ((result.value or {}).get("native_texts") or [] if result.ok else [])
        built = [f"compiled source: {f}" for text in texts if isinstance(text, str)
                 for f in static.native_findings(text)] + static.built_source_findings(build)
        with self._lock:
            self._compiled[candidate_source] = result
            self._built_findings[candidate_source] = built
        return result


    def grade(self, reference_source: str, candidate_source: str, *, record: dict | None = None,
              reward: str = "composite", slot_env: dict | None = None) -> dict:
        return self.grade_group(reference_source, [candidate_source], record=record,
                                reward=reward, slot_env=slot_env)[0]

    def grade_group(self, reference_source: str, candidate_sources: list[str], *,
                    record: dict | None = None, reward: str = "composite",
                    slot_env: dict | None = None, on_references=None) -> list[dict]:
        """Grade several candidates for one problem together (a GRPO group): one fresh
        reference run's weights and shown inputs for the members (``group_reference`` ``own``:
        a run each), each its own unseen inputs, its own worker and its own checks, and all
        are timed in ONE window beside one reference timing worker, so the GPU is taken
        alone once per group and every speedup in the group divides by the same reference
        time. A candidate that fails before or during the window drops out of it alone.
        ``on_references()`` is called once the fresh reference runs are in (the batch grader
        then knows the problem's size). Returns one verdict per candidate, in order."""
        reward_fn = get_reward(reward)
        # On CPU, the size validation calibrated the record's tolerances at (grade/size.py).
        size = grading_size(reference_source, self.device, record, self.cpu_max_numel)
        began, began_at = time.monotonic(), time.time()
        verdicts: list[dict | None] = [self._static(source) or self._decided_statically(source)
                                       for source in candidate_sources]
        pending = [i for i, verdict in enumerate(verdicts) if verdict is None]
        if pending:
            # only the input distributions the record's validation found the reference stable
            # under (T-19); with a window to come, the first reference worker stays to time
            # the reference there (``live_reference``): one worker, one CUDA context fewer per
            # grade. Its workers are counted on the device while they run (``beside``), as
            # many as start (``_counted``). ``shared``: one run for the members, made by fewer
            # workers (``_shared_run``), as many as this plan says
            plan = self.shared_per_worker(size.source, len(pending), slot_env)
            with contextlib.ExitStack() as early_held:
                # (``KERNELMILL_EARLY_CANDIDATES``) the candidates' workers start now, beside
                # the reference run, and wait for their payloads
                early = self._early_workers(size.source, len(pending), slot_env)
                if early is not None:
                    early_held.callback(early.close)
                references = self._fresh_references(size.source, len(pending), slot_env,
                                                     self.policy.distributions_for(record),
                                                     live=self.policy.time, plan=plan)
                try:
                    if on_references is not None:
                        on_references()
                    after_reference = time.monotonic()
                    judged = self._candidates(references,
                                              [candidate_sources[i] for i in pending],
                                              record, slot_env, early=early)
                finally:
                    close_live(references)
            for i, reference, verdict in zip(pending, references, judged):
                # Where a grade's time went (seconds): what throughput work looks at first.
                verdict["profile"] = {"began_at": round(began_at, 3),
                                      "reference_s": round(after_reference - began, 3),
                                      "candidate_s": round(time.monotonic() - after_reference, 3),
                                      "warm": bool(reference.result.warm), "group": len(pending),
                                      # members judged against its reference run
                                      "reference_shared_by": reference.shared_by,
                                      "reference_stages_s": stage_seconds(
                                          reference.result.stages, reference.result.wall_s),
                                      "reference_stages_cpu_s": stage_cpu_seconds(
                                          reference.result.stage_cpu, None),
                                      # its forward stage: stepped aside, files written, rest
                                      "reference_forward_s": (reference.value or {}).get(
                                          "forward_parts_s"),
                                      # its longest stretch without a point where a waiting
                                      # window may go first
                                      "reference_stretch_s": (reference.value or {}).get(
                                          "forward_stretch_s"),
                                      **verdict.get("profile", {})}
                verdicts[i] = verdict
        for verdict in verdicts:
            verdict["reward"] = float(reward_fn(verdict))
            verdict["device"] = self.device
            verdict["resized"] = size.factor
        return verdicts

    def _unrun_verdict(self, findings: list[str], by: str, **fields) -> dict | None:
        decisive = [f for f in findings if static.VENDOR_PREFIX not in f]
        if not decisive:
            return None
        not_run = WorkerResult(ok=False, error={
            "stage": "static scan", "message": f"not run: {by} decided the verdict"})
        verdict = judge({}, not_run, not_run, policy=self.policy, findings=decisive)
        verdict.update(stage_reached="parsed", **fields)
        return verdict

    def _early_workers(self, source: str, members: int,
                       slot_env: dict | None) -> EarlyWorkers | None:
        """The candidates' workers started before the reference run (``early_candidates``);
        None when off. Waiting, a worker holds little of the host's memory and runs no GPU
        work: the candidates' hold on the host and their count on the device (which the
        device-work check's floor reads) are taken where they were (``_candidates``), for the
        members that run; a hold on the host before the reference run's would make it wait."""
        if not early_candidates():
            return None
        policy, env = self.policy, self._env(slot_env)
        limits = self._worker_limits(source)
        return EarlyWorkers({"target": CANDIDATE_TARGET, "timeout_s": policy.timeout_s,
                             "device": self.worker_device, "env": env, "writable": [],
                             "sandbox": policy.sandbox, "hidden": self.private_folders(),
                             "init_lock": init_lock(self.worker_device, env),
                             "limits": limits}, members)

    def _candidates(self, references: list[ReferenceRun], sources: list[str],
                    record: dict | None, slot_env: dict | None,
                    early: EarlyWorkers | None = None) -> list[dict]:
        """Run and judge each candidate against its own reference run; time them together.
        ``early``: their workers started already (``_early_workers``), each taken by the
        member whose job fits it."""
        policy = self.policy
        prepared = [self._prepare(reference, source, record, slot_env)
                    for reference, source in zip(references, sources)]
        runnable = [i for i, job in enumerate(prepared) if "target" in job]
        verdicts: list = [None if "target" in job else job for job in prepared]
        results: dict[int, WorkerResult] = {}
        windows: dict[int, dict | None] = {i: None for i in runnable}
        to_keep = None  # this window's reference time, for the pool once its members are judged
        before = _stamp(self.guard_paths)
        if runnable:
            workers = len(runnable) + (1 if policy.time else 0)
            with self._on_host(references[0].source, workers) as limits, \
                    self._beside.held(self._device_key(slot_env), len(runnable)):
                for i in runnable:
                    prepared[i]["limits"] = limits
                taken = {}
                if early is not None:
                    taken = {i: worker for i in runnable
                             if (worker := early.take(i, prepared[i])) is not None}
                    early.close_untaken()
                if policy.time:
                    # the physical GPU, for the pool's key (only where there is a pool)
                    gpu = gpu_lock_path(self.worker_device, self._env(slot_env)) \
                        if self._reference_pool is not None else None
                    # ``sampled``: the reference timed in this window only where the pool wants it
                    score = self._reference_mode != "sampled" or \
                        self._reference_pool.wants_reference(references[0].source, gpu,
                                                             len(runnable))
                    results, windows = self._timed(references, {i: prepared[i] for i in runnable},
                                                   record, slot_env, score_reference=score,
                                                   early=taken)
                    self.note_worker_memory(references[0].source, windows, slot_env)
                    if self._reference_pool is not None:
                        to_keep = pool_views(self._reference_pool, references[0].source, gpu,
                                             windows)
                else:
                    done = _side_by_side(lambda i: taken[i].run(prepared[i]) if i in taken
                                         else run_in_worker(**prepared[i]), runnable)
                    results = dict(zip(runnable, done))
        changed = [p for p, stamp in _stamp(self.guard_paths).items() if stamp != before[p]]

        def judged(i: int) -> dict:
            began = time.monotonic()
            verdict = self._judge_run(references[i], sources[i], results[i], windows[i],
                                      record, changed)
            verdict.setdefault("profile", {})["judge_s"] = round(time.monotonic() - began, 3)
            return verdict

        # a group's members judged side by side: each compares every call's outputs with its
        # own reference run's on the host (0.14-0.2 s per call for KernelBench's 268 MB
        # LayerNorm output on two cores); one after another, every verdict waited for all
        for i, verdict in zip(runnable, _side_by_side(judged, runnable)):
            verdicts[i] = verdict
        # the window's reference time kept for later windows: none of its members flagged or
        # failed
        if to_keep is not None and may_keep([verdicts[i] for i in runnable]):
            self._reference_pool.keep(*to_keep)
        return verdicts

    def _prepare(self, reference: ReferenceRun, source: str, record: dict | None,
                 slot_env: dict | None) -> dict:
        """The candidate worker's job (``target``, ``payload``...), or its verdict when it
        ends before running (a failed extension build)."""
        policy = self.policy
        ref = reference.value
        shown, hidden = usable_trials(ref)
        trials = [{"seed": t["seed"], "inputs": t["inputs"], "state": t.get("state", 0)}
                  for t in shown]
        states = ref.get("states") or {}
        # the timing graph is replayed on a trial of the timed trial's state (its weights are
        # the ones captured)
        graph_trial = next((i for i in range(len(trials) - 1, 0, -1)
                            if trials[i]["state"] == trials[0]["state"]), None)
        largest = max((t.numel() * t.element_size() for trial in ref["trials"]
                       for t in trial["outputs"] if hasattr(t, "numel")), default=0)
        payload = {"source": source, "device": self.worker_device,
                   "init_inputs": ref["init_inputs"], "state_dict": ref["state_dict"],
                   "base_state": ref.get("base_state", 0),
                   "states": {k: v for k, v in states.items()
                              if any(t["state"] == k for t in trials)},
                   "init_seed": ref["init_seed"], "trials": trials,
                   "refill_from": len(trials) - 1 if len(trials) > 1 else None,
                   "time": policy.time, "max_output_bytes": 4 * largest + (1 << 20),
                   "timing_settings": policy.timing_settings,
                   "graph_check_trial": graph_trial,
                   "timed_check_seed": secrets.randbelow(2**63), "confine": policy.sandbox,
                   "hidden_trials": len(hidden), "early_check": not policy.time_incorrect,
                   # the unseen trials timed always; the rest only where those read slow
                   "hidden_required": policy.unseen_required(len(hidden)),
                   "hidden_required_ungraphed": policy.unseen_required(len(hidden), False),
                   "unseen_retry_ratio": policy.retry_ratio(self.device),
                   # the graph's calls agree with its last within this, element by element
                   "tolerance": list(policy.tolerance(_first_dtype(ref), record))}
        env, writable = self._env(slot_env), []
        if self.extensions_root and needs_extension_build(source):
            build = extension_dir(self.extensions_root, source)
            # The candidate worker may not create processes (no compiler): build first.
            built = self._compiled.get(source) or self.compile(source)
            decided = self._decided_by_build(source)
            if decided is not None:
                return decided
            if built is not None and not built.ok:
                # its build failed or ran out of time: that is the verdict (no GPU run)
                return judge(ref, reference.result, built, policy=policy,
                             findings=self.findings(source), record=record)
            env["TORCH_EXTENSIONS_DIR"] = build
            writable.append(build)
            if built is not None and isinstance((built.value or {}).get("digests"), list):
                # only the module files the compile worker built from the texts scanned
                payload["extension_digests"] = built.value["digests"]
            if self.device.startswith("cuda") and cuda_arch_list():
                env["TORCH_CUDA_ARCH_LIST"] = cuda_arch_list()
        # the unseen inputs reach the worker one at a time, each just before its call
        # (``harness.run_in_worker(late=...)``): nothing of them is in its memory before; each
        # in the file the reference's worker wrote it in (``LatePart``), never copied here
        return {"target": CANDIDATE_TARGET, "payload": payload,
                "timeout_s": policy.timeout_s, "device": self.worker_device, "env": env,
                "writable": writable, "sandbox": policy.sandbox,
                "hidden": self.private_folders(),
                "init_lock": init_lock(self.worker_device, env),
                "late": [t["inputs"] if isinstance(t["inputs"], LatePart) else
                         {"seed": t["seed"], "inputs": t["inputs"]} for t in hidden]}

    def _judge_run(self, reference: ReferenceRun, source: str, result: WorkerResult,
                   window: dict | None, record: dict | None, changed: list[str]) -> dict:
        policy = self.policy
        findings = self.findings(source)
        verdict = judge(reference.value, reference.result, result, policy=policy,
                        findings=findings, record=record, window=window,
                        own_kernels=static.declared_kernels(source))
        if window:  # where the GPU's lock made this grade wait, and how long it held it alone
            verdict["profile"] = {k: window.get(k) for k in
                                  ("shared_wait_ms", "exclusive_wait_ms",
                                   "exclusive_queue_ms", "exclusive_drain_ms", "window_ms",
                                   "rounds", "phases_ms", "turn_overhead_ms", "turn_ms",
                                   "late_write_ms", "stepped_aside", "ready_ms",
                                   "last_ready_ms", "clocks", "exclusive_setup_ms",
                                   "exclusive_held_ms", "stepped_aside_by_stage",
                                   "longest_stretch_by_stage", "compile_aside",
                                   "workers_beside", "device_mib")}
            verdict["profile"]["stages_s"] = stage_seconds(result.stages, result.wall_s)
            verdict["profile"]["unseen_steps_ms"] = unseen_steps(result.value)
            verdict["profile"]["unseen_calls_ms"] = unseen_calls(result.value)
            # each timed round's median sample, [round, ms], of the reference and the candidate,
            # and the rounds where each one's turn followed its own unsettled
            parts = window.get("participants") or {}
            # (and how long each one's timer took to prepare, before it was ready; its graph's
            # calls per sample, and where the window captured it again, the count prepared)
            for key in ("round_medians_ms", "unsettled_rounds", "prepare_ms",
                        "calls_per_sample", "prepared_calls", "spare_graph"):
                verdict["profile"][key] = {who: (parts.get(who) or {}).get(key)
                                           for who in ("reference", "candidate")}
        # CPU seconds of this grade's workers (warm ones report theirs): its candidate run, its
        # share of the fresh-reference worker and of the window's reference timing worker
        verdict.setdefault("profile", {})["cpu_s"] = {
            "candidate": result.cpu_s, "reference": reference.result.cpu_s,
            "timing_reference": (window or {}).get("timing_reference_cpu_s")}
        # the candidate's worker was a spare, its CUDA context made before the grade asked
        verdict["profile"]["spare"] = bool(result.spare)
        verdict["profile"]["stages_cpu_s"] = stage_cpu_seconds(result.stage_cpu, result.cpu_s)
        # what reading the candidate's profiler sessions cost (``Witness.cost``): numbers only,
        # for the profile (no check reads them)
        value = result.value if isinstance(result.value, dict) else {}
        witness = value.get("witness")
        cost = witness.get("cost") if isinstance(witness, dict) else None
        if isinstance(cost, dict):
            verdict["profile"]["witness"] = {
                k: round(v, 3) for k in ("records", "read_s", "calls_s")
                if type(v := cost.get(k)) in (int, float)}
        # the candidate's allocator peaks (``worker.timing.device_memory``): numbers only,
        # beside NVML's reading of the whole worker (``device_mib``)
        memory = value.get("device_memory")
        if isinstance(memory, dict):
            verdict["profile"]["candidate_allocator_mib"] = {
                k: v for k in ("allocated", "reserved") if _mib(v := memory.get(k))}
            stages = _stage_marks(memory.get("stages"))
            if stages:
                verdict["profile"]["candidate_allocator_mib"]["stages"] = stages
        if changed:  # the guarded files changed while this run (or its group) ran (T-04)
            amend(verdict, "guarded_files_unchanged", changed)
        verdict["wall_s"] = round(result.wall_s, 3)
        return verdict


def _stage_marks(marks) -> list[list]:
    """A worker's stage marks of its allocator (``worker.timing.StageMemory``) as the profile
    keeps them: [name, MiB held, most so far, MiB reserved] rows, the first ``MEMORY_MARKS``
    well-formed."""
    if not isinstance(marks, list):
        return []
    return [[m[0][:40], *m[1:]] for m in marks[:MEMORY_MARKS]
            if isinstance(m, list) and len(m) == 4 and isinstance(m[0], str)
            and all(_mib(v) for v in m[1:])]


def _mib(value) -> bool:
    """A MiB count the profile keeps from a worker: an int of a sane size (the worker's
    process is the candidate's; an int of thousands of digits would not even encode)."""
    return type(value) is int and 0 <= value < 1 << 32


MEMORY_MARKS = 32
