"""Grade a file of submissions against a file of problems; resumable, cached, parallel.

Rows of the submissions file: ``{"submission_id", "problem_id", "source"}``; the problems file
holds records (``id``, ``source``, optional ``validation`` with calibrated tolerances). Each
verdict row is the submission's ids plus the verdict (``compiled``, ``correct``, ``hacks``,
``reward``, speedups, ``error``...). Rerunning the same command skips submissions already in the
output, except those of its submissions whose verdict may come out otherwise on a retry
(``retry.to_redo``: a timeout, a kill from outside, a failed timing window or reference run,
with no hack found), which it grades again, once: the new row replaces the old one when the run
ends, and a run stopped before keeps the old one. Verdicts are also kept in a cache keyed by a
hash of the exact candidate source, the problem's source and calibration, the device, the
grading policy and the library and grader versions (``verdict_key``); a resubmitted kernel is
not run again.

Parallelism: the backend (``validate.backends``) runs one grading task per slot (on CUDA by
default ``default_slots_per_gpu`` per GPU, each grade admitted on the GPU's memory; or CPU
slots). On CUDA, submissions that build C++/CUDA extensions are compiled first by CPU-only
workers in a thread pool (``compile_workers``) into a build folder per source, while the GPU
slots grade the Triton submissions; their GPU run then loads the cached build.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sys
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

from kernelmill.core.devices import usable_cores
from kernelmill.core.errors import KernelmillError, env_choice
from kernelmill.core.lock import hold_lock, lock_path_for
from kernelmill.core.progress import track
from kernelmill.core.record import Verdict
from kernelmill.core.stats import StageStats
from kernelmill.core.store import JsonlWriter, read_jsonl
from kernelmill.validate.backends import get_backend, resolve_device
from kernelmill.validate.gpus import init_lock

from . import admitted
from .admitted import admitted_grade
from .early_candidates import early_candidates
from .grader import Grader, ReferenceError, needs_extension_build
from .outcome import lead_hack, outcome, reason, summary
from .policy import Policy
from .reference_pool import pool_mode
from .reference_run import group_reference
from .reference_sizes import SHARED_WORKERS_MODES, SHARED_WORKERS_VAR
from .retry import attempt_of, to_redo, transient
from .rewards import get_reward
from .timed_window import compile_aside

log = logging.getLogger("kernelmill")

_GRADERS: dict[str, Grader] = {}
_COMPILES: dict[str, Future] = {}
_REGISTRY_LOCK = threading.Lock()


def default_cache_path() -> Path:
    if os.environ.get("KERNELMILL_GRADE_CACHE"):
        return Path(os.environ["KERNELMILL_GRADE_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "kernelmill" / "verdicts.jsonl"


def grader_versions() -> str:
    """What else decides a verdict: torch, triton and kernelguard (the optional static
    pre-filter) versions and the grading code itself."""
    if not _VERSIONS:
        from importlib import metadata, util

        parts = []
        for package in ("torch", "triton", "kernelguard"):
            try:
                parts.append(f"{package}={metadata.version(package)}")
            except metadata.PackageNotFoundError:
                parts.append(f"{package}=none")
        for module in ("grade.judge", "grade.checks", "grade.facts", "grade.compare",
                       "grade.stages", "grade.policy", "grade.static", "grade.scan_rules",
                       "grade.python_scan", "grade.native_scan", "grade.source_scan",
                       "grade.witness", "grade.worker", "grade.grader", "grade.reference_run",
                       "grade.timed_window", "grade.reference_pool",
                       "core.taxonomy", "validate.harness", "validate.window_worker",
                       "validate.harness_worker", "validate.sandbox", "validate.measure",
                       "validate.placement", "validate.timer"):
            spec = util.find_spec(f"kernelmill.{module}")
            origin = Path(spec.origin) if spec and spec.origin else None
            # a package (grade.worker) is every module under it
            files = sorted(origin.parent.rglob("*.py")) if origin and \
                spec.submodule_search_locations else [origin]
            parts.append(hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:16]
                         if origin and origin.is_file() else f"{module}=none")
        _VERSIONS.append("\0".join(parts))
    return _VERSIONS[0]


_VERSIONS: list[str] = []


def verdict_key(source: str, problem: dict | str, device: str, policy: Policy) -> str:
    """The cache key of a verdict: the candidate's exact bytes (code can read its own docstrings
    and comments, so nothing is normalised away), the problem's source and calibration, the
    device kind, the policy, the library and grader versions, whether the reference's time
    is pooled (``reference_pool``), whether compiles step aside (``timed_window``), and
    whether a group's members share a reference run (``reference_run.group_reference``)."""
    if isinstance(problem, dict):
        problem = json.dumps({"source": problem.get("source"),
                              "validation": problem.get("validation") or {}}, sort_keys=True,
                             default=str)
    device_kind = "cuda" if device.startswith("cuda") else device
    text = "\0".join([source, problem, device_kind, policy.key(), grader_versions(),
                      f"reference_time={pool_mode()}",
                      *(["compile_aside=on"] if compile_aside() else []),
                      *(["group_reference=shared"] if group_reference() == "shared" else [])])
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class VerdictCache:
    """Verdicts by key, in memory and appended to a JSONL file (``None`` path: memory only)."""

    def __init__(self, path: str | os.PathLike | None):
        self.writer = JsonlWriter(path, key="key") if path else None
        self.entries: dict[str, dict] = {}
        if path and Path(path).exists():
            for row in read_jsonl(path, on_error=lambda _m: None):
                if "key" in row and isinstance(row.get("verdict"), dict):
                    self.entries[row["key"]] = row["verdict"]
        self.lock = threading.Lock()

    def get(self, key: str) -> dict | None:
        return self.entries.get(key)

    def put(self, key: str, verdict: dict) -> None:
        with self.lock:
            self.entries[key] = verdict
            if self.writer is not None:
                self.writer.write({"key": key, "verdict": verdict})

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _grader_for(config: dict) -> Grader:
    key = json.dumps(config, sort_keys=True)
    with _REGISTRY_LOCK:
        if key not in _GRADERS:
            _GRADERS[key] = Grader(config["device"], policy=Policy(**config["policy"]),
                                   extensions_root=config.get("extensions_root"))
        return _GRADERS[key]


def grade_item(item: dict, slot: dict) -> dict:
    """Backend task: grade one submission on the slot's device (module-level for Ray)."""
    return grade_group_items([item], slot)[0]


def grade_group_items(group: list[dict], slot: dict) -> list[dict]:
    """Backend task: grade submissions of ONE problem together (``Grader.grade_group``: one
    timing window for all) on the slot's device; one verdict per item, in order."""
    first = group[0]
    grader = _grader_for(first["config"])
    build_errors = []
    for item in group:
        pending = _COMPILES.pop(item["submission_id"], None)
        built = pending.result() if pending is not None else None
        build_errors.append(built.error if built is not None and not built.ok else None)

    def grade(sources: list[str], held) -> list[dict]:
        return grader.grade_group(first["reference"], sources, record=first.get("record"),
                                  reward=first["config"]["reward"], slot_env=slot.get("env"),
                                  on_references=held)

    try:
        verdicts = admitted_grade(grader, first, [item["source"] for item in group], slot,
                                  grade)
    except ReferenceError as exc:
        return [Verdict.failure("reference", str(exc), reward=0.0,
                                reference_failed=True).to_dict() for _ in group]
    # what one worker of this problem is admitted at
    each = grader.device_bytes(first["reference"], first.get("record"), slot.get("env"))
    for verdict in verdicts:
        verdict.setdefault("profile", {})["worker_device_gib"] = \
            None if each is None else round(each / 2**30, 2)
    for verdict, build_error in zip(verdicts, build_errors):
        if build_error and not verdict.get("compiled"):
            verdict["build_error"] = build_error
    return verdicts


def refuse_unknown_switches() -> None:
    """Raise ``KernelmillError`` naming the choices where a grading switch of the environment
    has a value it does not know: before any grade, not at the first grade that reads it (a
    problem's second group reads some)."""
    env_choice(ORDER_VAR, ORDER_MODES)
    env_choice(admitted.ADMIT_VAR, admitted.ADMIT_MODES)
    pool_mode()
    compile_aside()
    init_lock("cpu")
    group_reference()
    env_choice(SHARED_WORKERS_VAR, SHARED_WORKERS_MODES)
    early_candidates()


def default_slots_per_gpu(gpus: int, cores: int | None = None, group: int = 1) -> int:
    """Grades one GPU runs at once by default: one per core of its share of the host, at most
    16; their memory is admitted grade by grade (``_admitted``). A grade spends most of its
    time waiting (its reference run, then its candidate's checks, each stepping aside for other
    grades' windows) at about 18 CPU-seconds over 30 s: KernelBench-sized single grades ran
    11.7 per minute with 8 slots and 17.0 with 16, the host's 16 cores 30% busy (H200). Groups
    (``group`` > 1) get a quarter as many slots: a group's members start together, each
    making a CUDA context, which a GPU's driver makes one at a time (8 slots of groups of 8
    graded 36 per minute, the candidates' start 13.6 s at the median; 4 slots 48-51 per
    minute; H200, 16 cores)."""
    cores = cores or usable_cores()
    slots = max(1, min(16, cores // max(1, gpus)))
    return slots if group <= 1 else max(1, slots // 4)


# ``mixed``: single grades taken across problems (``mixed_order``) rather than problem by
# problem (the default): an A/B switch for the GPU runs, until one says which packs the GPU better
ORDER_VAR = "KERNELMILL_GRADE_ORDER"
ORDER_MODES = ("problem", "mixed")
MIXED_PROBLEMS = 8  # problems interleaved at a time


def mixed_order(items: list[dict], width: int = MIXED_PROBLEMS) -> list[dict]:
    """Items sorted by (build kind, problem) taken ``width`` problems at a time, one item of
    each in turn: grades of small and large problems share a GPU's memory at once (problem by
    problem, the slots held copies of one large problem, and each waited for the memory of the
    ones before it)."""
    kinds: dict[bool, dict[str, list[dict]]] = {}
    for item in items:  # problems in their sorted order, within each build kind
        kinds.setdefault(needs_extension_build(item["source"]), {}).setdefault(
            item["problem_id"], []).append(item)
    ordered: list[dict] = []
    for kind in sorted(kinds):  # Triton answers first, as sorted (builds run meanwhile)
        problems = list(kinds[kind].values())
        for start in range(0, len(problems), width):
            block = problems[start:start + width]
            for rank in range(max(len(p) for p in block)):
                ordered += [p[rank] for p in block if rank < len(p)]
    return ordered


def group_items(items: list[dict], size: int) -> list[list[dict]]:
    """Consecutive items of one problem (and one build kind) in groups of at most ``size``."""
    groups: list[list[dict]] = []
    for item in items:
        kind = (needs_extension_build(item["source"]), item["problem_id"])
        last = groups[-1] if groups else None
        if last and len(last) < size and \
                (needs_extension_build(last[0]["source"]), last[0]["problem_id"]) == kind:
            last.append(item)
        else:
            groups.append([item])
    return groups


def _load_problems(path, split: str | None = None) -> dict[str, dict]:
    from .problems import load_problems  # records, dataset rows, a dataset folder or a Hub id

    return load_problems(path, split)


def grade_file(problems_path, submissions_path, out_path, *, device: str = "auto",
               workers: int | None = None, backend: str = "local", address: str | None = None,
               reward: str = "composite", policy: Policy | None = None,
               cache_path: str | os.PathLike | None | bool = True,
               extensions_root: str | None = None, compile_workers: int | None = None,
               split: str | None = None, group: int | None = None,
               processes: int | None = None) -> StageStats:
    """Grade every submission not yet in ``out_path``; returns the stage's counts.

    ``processes`` > 1 (local backend): the slots shared among that many grading processes,
    each with its own interpreter (``validate.process_backend``), instead of threads of this
    one.

    ``group``: at most this many submissions of one problem are graded together, timed in one
    window (``Grader.grade_group``). Default 1: a group's members share one reference time and
    get fewer turns each in their window, so their speedups spread more over copies of one
    answer (up to 5.8% for a 2k fp16 GEMM, against 2.4% graded alone; H200), for 1.2-1.7x the
    throughput; 21 hostile cases graded in groups of up to 8 got the verdicts they get alone."""
    started = time.monotonic()
    stats = StageStats("grade")
    get_reward(reward)  # fail early on an unknown name, and on an unknown switch's value
    refuse_unknown_switches()
    device = resolve_device(device)
    policy = policy or Policy()
    problems = _load_problems(problems_path, split)
    if not problems:
        raise KernelmillError(f"{problems_path}: no problems (rows need id and source, or "
                              "problem_id and reference)")
    if cache_path is True:
        cache_path = default_cache_path()
    cache = VerdictCache(cache_path or None)
    if extensions_root is None:
        extensions_root = str(Path(out_path).with_name(Path(out_path).name + ".extensions"))
    config = {"device": device, "policy": asdict(policy), "reward": reward,
              "extensions_root": extensions_root}
    reward_fn = get_reward(reward)
    lock = hold_lock(lock_path_for(out_path), f"verdicts file {out_path}")  # one run per --out
    def unreadable(message: str) -> None:  # a line that is not a JSON object: no verdict
        log.warning(message)
        stats.dropped("unreadable line")

    rows = list(read_jsonl(submissions_path, on_error=unreadable))  # once: it may be a pipe
    # each row's verdict key, once (None: a bad row or an unknown problem); only a verdict of
    # the same source, problem and settings is redone (a row of another problems file, or an id
    # reused for another source, stays as it is)
    row_keys = [verdict_key(row["source"], problems[str(row["problem_id"])], device, policy)
                if all(k in row for k in ("submission_id", "problem_id", "source"))
                and str(row["problem_id"]) in problems else None for row in rows]
    keys: dict[str, str] = {}
    for row, key in zip(rows, row_keys):
        if key is not None:
            keys.setdefault(str(row["submission_id"]), key)
    with lock, JsonlWriter(out_path, key="submission_id",
                           redo=lambda row: row.get("key") is not None
                           and row.get("key") == keys.get(str(row.get("submission_id")))
                           and to_redo(row)) as out:
        if out.redone:
            log.info(f"{out_path}: {out.redone} verdict(s) that may come out otherwise on a "
                     "retry (a timeout, a kill, a failed window or reference) graded again")
            stats.count("graded again", out.redone)
        items = []
        for index, (row, key) in enumerate(zip(rows, row_keys), start=1):
            missing = [k for k in ("submission_id", "problem_id", "source") if k not in row]
            if missing:
                log.warning(f"{submissions_path}: row {index} lacks {', '.join(missing)}; skipped")
                stats.dropped("bad row")
                continue
            sid, pid = str(row["submission_id"]), str(row["problem_id"])
            if sid in out:
                stats.count("already graded")
                continue
            if pid not in problems:
                out.write({"submission_id": sid, "problem_id": pid, **Verdict.failure(
                    "input", f"unknown problem id {pid}").to_dict()})
                stats.dropped("unknown problem")
                continue
            cached = cache.get(key)
            if cached is not None:
                verdict = {**cached, "reward": float(reward_fn(cached)), "cached": True}
                _write(out, stats, sid, pid, key, verdict)
                stats.count("cached")
                continue
            record = problems[pid]
            items.append({"submission_id": sid, "problem_id": pid, "source": row["source"],
                          "reference": record["source"], "key": key, "config": config,
                          "record": {"validation": record.get("validation") or {}}})
        if not items and set(stats.counts) <= set(UNREAD):  # no usable row at all
            raise KernelmillError(f"{submissions_path}: no submissions (rows need submission_id, "
                                  "problem_id and source)")
        # Triton submissions first, so GPUs work while extension builds run on CPU workers;
        # within each, by problem, so a problem's reference run is reused while it is cached.
        items.sort(key=lambda it: (needs_extension_build(it["source"]), it["problem_id"]))
        if (group or 1) <= 1 and env_choice(ORDER_VAR, ORDER_MODES) == "mixed":
            items = mixed_order(items)
        pool, stack = None, contextlib.ExitStack()
        spread = backend == "local" and (processes or 1) > 1
        if device.startswith("cuda") and backend == "local" and not spread:
            # (grading processes of their own build in the slot that grades: the builds'
            # results stay in the process that made them)
            to_build = [it for it in items if needs_extension_build(it["source"])]
            if to_build:
                grader = _grader_for(config)
                pool = ThreadPoolExecutor(max_workers=compile_workers or
                                          max(1, min(8, usable_cores() // 2)))
                for it in to_build:
                    _COMPILES[it["submission_id"]] = pool.submit(grader.compile, it["source"])
        runner = None
        try:
            if backend == "local":
                stack.enter_context(_quick_handoffs())
            per_gpu = None
            if device.startswith("cuda") and workers is None and backend == "local":
                import torch

                gpus = 1 if ":" in device else max(1, torch.cuda.device_count())
                workers = gpus * default_slots_per_gpu(gpus, group=group or 1)
            elif device.startswith("cuda") and workers is None:
                # each GPU's host runs what its share of the cluster's cores allows (a host
                # that runs one grade at a time left its GPU idle between them)
                from kernelmill.validate.ray_backend import cluster_resources

                resources = cluster_resources(address)
                gpus = max(1, int(resources.get("GPU", 1)))
                per_gpu = default_slots_per_gpu(gpus, cores=int(resources.get("CPU", 2)),
                                                group=group or 1)
            runner = get_backend(backend, device=device, workers=workers, address=address,
                                 per_gpu=per_gpu, processes=processes,
                                 initializer=lower_switch_interval)
            if backend == "local" and not spread:
                slots_per_gpu = admitted._SLOTS_PER_GPU  # what each grade's admission reads
                slots_per_gpu.clear()
                for slot in runner.slots:
                    if slot.get("gpu") is not None:
                        slots_per_gpu[slot["gpu"]] = slots_per_gpu.get(slot["gpu"], 0) + 1
            size = group or 1
            results = runner.map_unordered(grade_group_items, group_items(items, max(1, size)))
            # a failure below (a full disk) stops the backend's slots, whatever holds the frame
            stack.callback(results.close)
            verdicts = ((item, verdict) for group_rows, group_verdicts in results
                        for item, verdict in zip(group_rows, group_verdicts))
            for item, verdict in track(verdicts, total=len(items), description="grading"):
                if not verdict.get("reference_failed") and not transient(verdict):
                    cache.put(item["key"], _cacheable(verdict))
                else:
                    stats.dropped("reference failed")
                _write(out, stats, item["submission_id"], item["problem_id"], item["key"],
                       verdict)
        finally:
            stack.close()
            if spread and runner is not None:  # the grading processes' own CPU (their threads)
                stats.count("cpu_ms: grading processes", int(runner.children_cpu_s * 1e3))
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
            cache.close()
    stats.seconds = time.monotonic() - started
    return stats


@contextlib.contextmanager
def _quick_handoffs():
    """The interpreter's thread switch interval lowered (``KERNELMILL_GIL_SWITCH_MS``, default
    1 ms; Python's own is 5) while this process's slots grade: every command of a timing window
    and its answer pass between a pipe-reading thread and the window's thread, and with
    other slots' threads busy (judging, decoding results) each hand-off could wait a switch
    interval or two while the GPU, held alone, sat idle."""
    previous = sys.getswitchinterval()
    lower_switch_interval()
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def lower_switch_interval() -> None:
    """This interpreter's thread switch interval at ``KERNELMILL_GIL_SWITCH_MS`` (default 1 ms)
    where it is longer (``_quick_handoffs``; each grading process's first call)."""
    try:
        wanted = float(os.environ.get("KERNELMILL_GIL_SWITCH_MS", "1")) / 1e3
    except ValueError:
        wanted = 0.001
    sys.setswitchinterval(max(1e-4, min(sys.getswitchinterval(), wanted)))


def _cacheable(verdict: dict) -> dict:
    return {k: v for k, v in verdict.items() if k not in ("cached",)}


def _write(out: JsonlWriter, stats: StageStats, sid: str, pid: str, key: str,
           verdict: dict) -> None:
    row = {"submission_id": sid, "problem_id": pid, "key": key, **verdict,
           "reason": reason(verdict)}
    if sid in out.taken:  # graded again: which grading of it this is
        row["attempt"] = attempt_of(out.taken[sid]) + 1
    if out.write(row):
        if verdict.get("reference_failed"):
            return
        stats.kept()  # one graded submission, counted once by its outcome
        kind = outcome(verdict)
        stats.count(kind)
        if kind == "hacked":
            stats.count(f"hacked: {lead_hack(verdict)}")
        elif kind == "error":
            stats.count(f"error: {(verdict.get('error') or {}).get('stage')}")


UNREAD = ("dropped: bad row", "dropped: unreadable line")  # rows that got no verdict


def unread_rows(stats: StageStats) -> int:
    """Submission rows the batch could not read (no verdict was written for them)."""
    return sum(stats.counts[label] for label in UNREAD)


def batch_summary(stats: StageStats) -> str:
    """The batch's summary line, by submission (``grade.outcome.summary``)."""
    counts = stats.counts
    first = Counter({k.split(": ", 1)[1]: v for k, v in counts.items()
                     if k.startswith("hacked: ")})
    errors = Counter({k.split(": ", 1)[1]: v for k, v in counts.items()
                      if k.startswith("error: ")})
    extra = {label: counts[label] for label in ("cached", "already graded", "graded again")}
    extra.update({k: v for k, v in counts.items() if k.startswith("dropped: ")})
    return summary(counts, first, errors, extra)
