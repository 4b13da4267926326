"""The mine stage: SOURCE... -> mined.jsonl, problems from real PyTorch code.

For each source (synth/mine/sources.py) every candidate (``nn.Module`` with a forward, tensor
function) is gathered into one self-contained source with libcst (synth/mine/gather.py), its
constructor arguments and inputs are guessed (synth/mine/spec.py) and then probed and repaired
in this package's confined workers (``mine_worker.probe_batch``: a batch of candidates per
worker, a time limit per candidate, an address-space limit per worker; a batch whose worker
dies or hangs is rerun one candidate per worker, so the culprit alone is rejected). Probed
candidates are written at base sizes, sized on the meta device along synth/resize.py's plans
(``mine_sizing.size_batch``) to the largest size whose estimated eager time stays under
``max_ms``, checked statically and written as records.

It sits in validate/ because probing runs in the harness's workers (validate is above synth
in the layers); everything static lives in synth/mine/.

Every candidate that is not written is one row of ``OUT.rejected.jsonl`` with its reason
(not installed, parse error, missing dependency, unresolved name, probe timeout, probe OOM,
nondeterministic, ...). A rerun skips every candidate already in either file.
"""
from __future__ import annotations

import gc
import hashlib
import logging
import threading
import time
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelmill.core.errors import ProblemError
from kernelmill.core.problem import check_source
from kernelmill.core.progress import track
from kernelmill.core.record import Record
from kernelmill.core.stats import StageStats
from kernelmill.core.step import Step, option
from kernelmill.core.store import JsonlWriter, read_jsonl
from kernelmill.synth.mine.candidates import Candidate, find_candidates
from kernelmill.synth.mine.environment import torch_version_text
from kernelmill.synth.mine.gather import Gatherer, GatherError
from kernelmill.synth.mine.index import ModuleIndex, PackageIndex
from kernelmill.synth.mine.render import categorize, ladder, probe_job, render
from kernelmill.synth.mine.sources import Source, SourceError, discover
from kernelmill.synth.mine.spec import guess_class, guess_function

log = logging.getLogger("kernelmill")

PROBE = "kernelmill.validate.mine_worker:probe_batch"
SIZE = "kernelmill.validate.mine_sizing:size_batch"
MAX_TENSOR_NUMEL = 2 ** 28     # synth/composer.py's caps on a problem's memory
MAX_HELD_BYTES = 6 * 2 ** 30
TABLE_COLUMNS = ("found", "resolved", "probed", "sized", "in band", "static ok", "written",
                 "rejected")


@dataclass
class MineOptions:
    """Knobs of the mine stage."""

    sources: list[str] = option(  # noqa: RUF009 — option() is the field declaration
        help="sources to mine when none is given on the command line (the build's `mine` "
             "list)", build="mine", default_factory=list)
    licenses: str = option("any", "which sources to mine by license: any, or permissive "
                           "(Apache, MIT, BSD, ...)", build="mine_licenses",
                           choices=("any", "permissive"))
    functions: bool = option(True, "also mine public tensor functions (losses, ops)")
    limit: int = option(0, "process at most this many candidates per source, in file order; "
                        "the rest are only counted (0: all)")
    job_s: float = option(10.0, "time limit of one candidate's probe (s)")
    min_ms: float = option(0.4, "sizing: smallest estimated eager time aimed at (ms; "
                           "validate's band is 0.1-1000); a problem that stays below it at the "
                           "largest size tried is kept, with sizing.in_band false")
    max_ms: float = option(10.0, "sizing: largest estimated eager time allowed (ms)")
    batch: int = option(16, "candidates per probing worker", result=False)
    workers: int = option(2, "probing workers at once", result=False)
    memory_gib: float = option(6.0, "address-space limit of each probing worker (GiB)",
                               result=False)


@dataclass
class _Pending:
    candidate: Candidate
    source: Source
    gathered: Any
    guess: Any
    job: dict
    probe: dict | None = None
    base: str | None = None


def rejected_path(out: Path) -> Path:
    return out.with_name(out.name.removesuffix(".jsonl") + ".rejected.jsonl")


def _run_batches(target: str, jobs: list[dict], config: MineOptions, extra: dict) -> list[dict]:
    """Each job's result, batch by batch in parallel workers; a batch whose worker failed is
    rerun one job per worker, and a job whose own worker fails is rejected with why."""
    from .harness import run_in_worker

    limits = {"address_space": int(config.memory_gib * 2 ** 30)}

    def run(batch: list[dict]) -> list[dict]:
        timeout = 30.0 + config.job_s * len(batch) * (2 if target == SIZE else 1)
        result = run_in_worker(target, {"jobs": batch, "job_s": config.job_s, **extra},
                               timeout_s=timeout, device="cpu", limits=limits, warm=True)
        if result.ok:
            return list(result.value["results"])
        if len(batch) > 1:
            return [r for job in batch for r in run([job])]
        error = result.error or {}
        message = str(error.get("message", ""))
        reason = "probe timeout" if result.timed_out else "probe OOM" if any(
            m in message.lower() for m in ("memory", "killed", "sigkill", "bad_alloc")) \
            else "probe crashed"
        return [{"key": batch[0]["key"], "ok": False, "reason": reason,
                 "detail": message[:300], "steps": []}]

    size = max(1, config.batch)
    batches = [jobs[i:i + size] for i in range(0, len(jobs), size)]
    with ThreadPoolExecutor(max(1, config.workers)) as pool:
        return [r for results in pool.map(run, batches) for r in results]


def _choose(steps: list[dict], plans: list[tuple[float, dict]], config: MineOptions
            ) -> tuple[float | None, dict | None]:
    """The largest ladder step whose estimate is at most ``max_ms`` and fits the memory caps
    (the smallest measured step when every one is larger)."""
    best = None
    for (factor, _), step in zip(plans, steps):
        if not step.get("ok"):
            if best is None:
                continue  # too small for the model at this step: try the next
            break
        fits = step["largest"] <= MAX_TENSOR_NUMEL and \
            step["io_bytes"] + step["params_bytes"] <= MAX_HELD_BYTES
        if step["est_ms"] <= config.max_ms and fits:
            best = (factor, step)
        elif best is not None:
            break
    first = next(((f, s) for (f, _), s in zip(plans, steps) if s.get("ok")), None)
    if best is None and first is not None:
        return first
    return best if best is not None else (None, None)


class Miner:
    """One run of the stage: writers, counts and the per-source table."""

    def __init__(self, out: Path, config: MineOptions):
        self.config = config
        self.out = out
        self.stats = StageStats("mine")
        self.table: dict[str, Counter] = {}
        # chunks of ``batch`` candidates are probed, sized and rendered in ``workers``
        # background threads (one worker process each at a time) while this thread gathers
        # the next ones: a slow probe holds one thread, not the gathering or the other chunks.
        # Their records are written here, in submission order, so a run writes the same file
        # whichever chunk finishes first. Counts are shared: both sides take this lock.
        self.lock = threading.RLock()
        self.background = ThreadPoolExecutor(max(1, config.workers))
        self.in_flight: deque[Future] = deque()
        self.max_in_flight = 2 * max(1, config.workers) + 1
        self.records = JsonlWriter(out)
        self.rejects = JsonlWriter(rejected_path(out), key="key")
        self.done = set(self.rejects.seen)
        for row in read_jsonl(out, on_error=lambda _m: None) if out.exists() else ():
            key = ((row.get("provenance") or {}).get("mined") or {}).get("key")
            if key:
                self.done.add(key)

    def submit(self, pending: list[_Pending], row: Counter) -> None:
        """Probe, size and render ``pending`` in the background; write what finished."""
        if pending:
            self.in_flight.append(self.background.submit(self.finish, pending, row))
        self.drain(self.max_in_flight)

    def drain(self, keep: int = 0) -> None:
        """Write the finished chunks at the head of the queue, in order, waiting for the head
        while more than ``keep`` are in flight (re-raises what a chunk raised)."""
        while self.in_flight and (self.in_flight[0].done() or len(self.in_flight) > keep):
            self._write_head()

    def _write_head(self) -> None:
        """Write the outcomes of the chunk at the head of the queue (waiting for it)."""
        for outcome in self.in_flight.popleft().result():
            self.emit(outcome)

    def close(self) -> None:
        try:
            self.drain()
        finally:
            self.abort()

    def abort(self) -> None:
        """Stop after an error or an interrupt: chunks not started are dropped, the ones
        running end (their workers have time limits), and of the finished ones those before
        the first unfinished are written; a resumed run does the rest."""
        for future in self.in_flight:
            future.cancel()
        self.background.shutdown(wait=True)
        try:
            while self.in_flight and not self.in_flight[0].cancelled():
                self._write_head()
        except Exception as exc:  # noqa: BLE001 — the error being raised is the run's
            log.warning("mine: a chunk failed while stopping: %s", exc)
        finally:
            self.in_flight.clear()
            self.records.close()
            self.rejects.close()

    def reject(self, row: Counter, key: str, reason: str, detail: str, **where: Any) -> None:
        with self.lock:
            self._reject(row, key, reason, detail, **where)

    def _reject(self, row: Counter, key: str, reason: str, detail: str, **where: Any) -> None:
        row["rejected"] += 1
        row[f"rejected: {reason}"] += 1
        self.stats.dropped(reason)
        self.rejects.write({"key": key, "reason": reason, "detail": detail[:400], **where})

    def mine_source(self, spec: str) -> None:
        # a source's parsed modules and gathered definitions live until its run ends, and the
        # collector's full passes walked all of them again and again (indexing transformers'
        # 2,900 files: 28 s of collections against 6 s of parsing): what is alive as each
        # candidate starts is frozen, out of the collector's passes, until the source is done
        try:
            self._mine_source(spec)
        finally:
            gc.unfreeze()

    def _mine_source(self, spec: str) -> None:
        row = self.table.setdefault(spec, Counter())
        try:
            source = discover(spec)
        except SourceError as exc:
            self.reject(row, f"{spec}:", "not installed", str(exc), package=spec)
            return
        if self.config.licenses == "permissive" and not source.permissive:
            self.reject(row, f"{source.package}:", "license", f"{source.license!r} is not "
                        "a permissive license (--licenses permissive)", package=source.package)
            return
        index = PackageIndex(source)
        gatherer = Gatherer(index)
        pending: list[_Pending] = []
        seen = 0
        items = find_candidates(index, functions=self.config.functions)
        for item in track(items, total=None, description=f"mine {spec}"):
            gc.collect(1)  # the young generations: cycles the last candidate left are freed
            gc.freeze()
            if isinstance(item, ModuleIndex):
                key = f"{source.spec}:{item.name}"
                if key not in self.done:
                    self.reject(row, key, "parse error", item.error or "", package=source.package,
                                file=str(item.path))
                continue
            with self.lock:
                row["found"] += 1
                self.stats.count("found")
            if self.config.limit and seen >= self.config.limit:
                with self.lock:
                    row["not processed (limit)"] += 1  # counted as found, never probed
                continue
            seen += 1
            if item.key in self.done:
                with self.lock:
                    row["resumed"] += 1
                    self.stats.count("resumed")
                continue
            where = {"package": source.package, "file": str(item.definition.path),
                     "line": item.definition.line, "qualname": item.definition.key}
            try:
                gathered = gatherer.gather(item.definition)
                guess = guess_class(index, item.definition) if item.kind == "class" \
                    else guess_function(item.definition)
            except GatherError as exc:
                self.reject(row, item.key, exc.label, exc.detail, **where)
                continue
            except Exception as exc:  # noqa: BLE001 — one candidate's rejection, never the run's
                self.reject(row, item.key, "gather failed", f"{type(exc).__name__}: {exc}",
                            **where)
                continue
            with self.lock:
                row["resolved"] += 1
            job = probe_job(item.key, gathered, guess, item.kind)
            pending.append(_Pending(item, source, gathered, guess, job))
            if len(pending) >= self.config.batch:
                self.submit(pending, row)
                pending = []
        self.submit(pending, row)
        self.drain()

    def finish(self, pending: list[_Pending], row: Counter) -> list[tuple]:
        """Probe, size and render one chunk (a background thread); its outcomes, for
        ``emit`` in order: ``("reject", row, key, reason, detail, where)`` and
        ``("record", row, record, key, where)``."""
        outcomes: list[tuple] = []
        started = time.monotonic()
        results = {r["key"]: r for r in _run_batches(PROBE, [p.job for p in pending],
                                                     self.config, {})}
        with self.lock:
            self.stats.count("seconds: probe", round(time.monotonic() - started))
        sized_jobs, plans_of, probed = [], {}, []
        for p in pending:
            where = self._where(p)
            result = results.get(p.candidate.key) or {"ok": False, "reason": "probe crashed",
                                                      "detail": "no result"}
            if not result.get("ok"):
                outcomes.append(("reject", row, p.candidate.key, result["reason"],
                                 result.get("detail", ""),
                                 {"seconds": result.get("seconds"), **where}))
                continue
            with self.lock:
                row["probed"] += 1
            p.probe = result
            try:
                p.base = render(p.gathered, p.guess, result, p.candidate.kind, self._meta(p))
                plans = ladder(p.base)
            except Exception as exc:  # noqa: BLE001 — one candidate's rejection, not the run's
                outcomes.append(("reject", row, p.candidate.key, "render failed",
                                 f"{type(exc).__name__}: {exc}", where))
                continue
            plans_of[p.candidate.key] = plans
            probed.append(p)
            sized_jobs.append({"key": p.candidate.key, "source": p.base,
                               "ladder": [values for _, values in plans] or [{}]})
        started = time.monotonic()
        sizes = {r["key"]: r for r in _run_batches(SIZE, sized_jobs, self.config,
                                                   {"stop_ms": self.config.max_ms})}
        with self.lock:
            self.stats.count("seconds: size", round(time.monotonic() - started))
        for p in probed:
            try:
                outcomes.append(self.outcome(p, sizes.get(p.candidate.key) or {},
                                             plans_of[p.candidate.key], row))
            except Exception as exc:  # noqa: BLE001 — one candidate's rejection
                outcomes.append(("reject", row, p.candidate.key, "render failed",
                                 f"{type(exc).__name__}: {exc}", self._where(p)))
        return outcomes

    def emit(self, outcome: tuple) -> None:
        """Write one outcome of ``finish`` (this thread only: the files' order is the
        candidates')."""
        with self.lock:
            if outcome[0] == "reject":
                _, row, key, reason, detail, where = outcome
                self._reject(row, key, reason, detail, **where)
                return
            _, row, record, key, where = outcome
            if self.records.write(record):
                row["written"] += 1
                self.stats.kept()
                self.stats.count(f"category: {record.category}")
            else:
                self._reject(row, key, "duplicate source", f"same source as record {record.id}",
                             **where)

    def _meta(self, p: _Pending) -> dict[str, Any]:
        d = p.candidate.definition
        return {"name": d.name, "package": p.source.package, "version": p.source.version,
                "module": d.module, "line": d.line, "qualname": d.key}

    def _where(self, p: _Pending) -> dict[str, Any]:
        d = p.candidate.definition
        return {"package": p.source.package, "file": str(d.path), "line": d.line,
                "qualname": d.key}

    def outcome(self, p: _Pending, sized: dict, plans: list, row: Counter) -> tuple:
        """The record of a probed and sized candidate, or why it is rejected."""
        steps = sized.get("steps") or []
        factor, chosen = _choose(steps, plans, self.config) if plans else (None, None)
        if chosen is None and steps and steps[0].get("ok"):
            chosen = steps[0]  # nothing to scale: the base size, measured
        ops = (chosen or {}).get("op_names") or []
        category, level = categorize(ops, p.candidate.name, p.gathered.code)
        sizes = dict(plans).get(factor) if factor is not None else None
        source = render(p.gathered, p.guess, p.probe, p.candidate.kind, self._meta(p),
                        category, level, sizes=sizes)
        est = (chosen or {}).get("est_ms")
        in_band = est is not None and self.config.min_ms <= est <= self.config.max_ms
        if chosen is not None:
            with self.lock:
                row["sized"] += 1
                row["in band"] += int(in_band)
        try:
            problem = check_source(source, name=p.candidate.name)
        except ProblemError as exc:
            return ("reject", row, p.candidate.key, "static check", exc.reason, self._where(p))
        with self.lock:
            row["static ok"] += 1
        d = p.candidate.definition
        mined = {"key": p.candidate.key, "kind": p.candidate.kind, "source": p.source.spec,
                 "package": p.source.package,
                 "version": p.source.version, "license": p.source.license,
                 # the torch its environment questions (version checks) were answered for
                 "answered_for_torch": torch_version_text(),
                 "source_kind": p.source.kind, "qualname": d.key,
                 "file": str(d.path.relative_to(p.source.root)) if d.path.is_relative_to(
                     p.source.root) else str(d.path), "line": d.line,
                 "content_sha256": hashlib.sha256(
                     p.gathered.code.encode("utf-8")).hexdigest()[:16],
                 "definitions": len(p.gathered.definitions), "imports": p.gathered.externals,
                 # the package's bases it runs without: its problem is not the package's
                 # module there (a stand-in base initializes no weights of its own)
                 "standin_bases": p.gathered.standin_bases,
                 "dropped_bases": p.gathered.dropped_bases,
                 "sizing": {"factor": factor, "est_ms": est, "in_band": in_band,
                            "flops": (chosen or {}).get("flops"),
                            "bytes": (chosen or {}).get("bytes"),
                            "error": None if chosen else (steps[0].get("error") if steps else
                                                          sized.get("error"))},
                 "probe": {k: p.probe.get(k) for k in ("template", "width", "out_shape",
                                                       "n_params", "config_added",
                                                       "running_stats", "config_set")}}
        record = Record.from_source(source, name=p.candidate.name, category=problem.category,
                                    level=problem.level,
                                    provenance={"generator": "mine", "operations": [],
                                                "parent": None, "mined": mined})
        return ("record", row, record, p.candidate.key, self._where(p))


def print_table(table: dict[str, Counter]) -> None:
    from rich.console import Console
    from rich.table import Table

    view = Table(title="kernelmill mine", title_justify="left")
    view.add_column("source")
    for column in TABLE_COLUMNS:
        view.add_column(column, justify="right")
    view.add_column("rejected by reason")
    for spec, row in table.items():
        reasons = ", ".join(f"{k.removeprefix('rejected: ')} {v}" for k, v in
                            sorted(row.items(), key=lambda kv: -kv[1])
                            if k.startswith("rejected: "))
        view.add_row(spec, *(str(row.get(c, 0)) for c in TABLE_COLUMNS), reasons)
    Console(stderr=True).print(view)


def mine(sources: list[str], out: Path, config: MineOptions | None = None,
         *, show_table: bool = True) -> tuple[StageStats, dict[str, Counter]]:
    """Mine ``sources`` into ``out`` (appending, resumable); (counts, per-source table)."""
    config = config or MineOptions()
    start = time.monotonic()
    miner = Miner(out, config)
    try:
        for spec in sources:
            miner.mine_source(spec)
    except BaseException:
        miner.abort()
        raise
    miner.close()
    miner.stats.seconds = time.monotonic() - start
    if show_table and miner.table:
        print_table(miner.table)
    return miner.stats, miner.table


def _run(inputs: list[Path], out: Path, config: MineOptions) -> StageStats:
    sources = [str(p) for p in inputs] or list(config.sources)
    if not sources:  # a build without `mine = [...]`: an empty output, nothing else
        out.parent.mkdir(parents=True, exist_ok=True)
        out.touch()
        return StageStats("mine")
    stats, _ = mine(sources, out, config)
    return stats


STEP = Step(
    name="mine", title="mine real PyTorch code", config=MineOptions, run=_run,
    inputs=(), output="mined.jsonl", resumable=True, input_nargs="*",
    input_help="SOURCE: an installed package (torchvision, timm, transformers, torch.nn), a "
               "folder of Python files or a git checkout",
    out_help="records file to append to (JSONL); rejections go beside it "
             "(OUT.rejected.jsonl)",
    help="mine nn.Modules and tensor functions of real PyTorch code into problems",
    description="Read each SOURCE with libcst (never importing it), gather every nn.Module "
                "and tensor function with what it reaches into one self-contained "
                "KernelBench-format problem, infer and repair its constructor arguments and "
                "inputs in confined workers, size it to the runtime band and write it with "
                "its provenance. Rerun the same command to resume.")
