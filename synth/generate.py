"""The synth stage: seeds + op catalog (+ an LLM) -> problems.jsonl.

Each attempt draws from its own ``random.Random(f"{seed}:{attempt}")`` and does one of

- compose a new problem from the catalog (synth/composer.py, printed by synth/emit.py);
- mutate a seed or an earlier problem with one of synth/mutators.py's codemods;
- ask the LLM for a problem of some category, few-shot from seeds of that category.

Every source passes synth/checks.py (static check; for composed and mutated sources also the full
size meta-device trace and the degeneracy rules) before it is written. Records carry
``provenance = {seed, operations, generator, parent}``: ``seed`` is the family root (the seed
record's id for mutants of seeds, the structural signature hash of a composition for composed
problems and their mutants), so a split can keep whole families on one side.

The run is deterministic for a seed and resumable: rerunning the same command regenerates the same
sequence, and the writer skips what the file already holds.
"""
from __future__ import annotations

import logging
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelmill.core.errors import KernelmillError, ProblemError
from kernelmill.core.problem import CATEGORIES, check_source, read_source
from kernelmill.core.progress import track
from kernelmill.core.record import Record
from kernelmill.core.stats import StageStats
from kernelmill.core.step import Step, option
from kernelmill.core.store import JsonlWriter
from kernelmill.data import SEEDS_DIR

from .checks import Rejected, vet_source
from .composer import Composer, CompositionError
from .emit import emit_source
from .llm import LLMConfig, LLMProposer
from .mutators import Mutator, Refusal, all_mutators

log = logging.getLogger("kernelmill")

MAX_ATTEMPTS_PER_PROBLEM = 6
POOL_SIZE = 400  # recent accepted problems that mutators may pick as parents


@dataclass
class SynthConfig:
    """How the attempts are shared between generators."""

    mutate_rate: float = 0.4      # share of attempts that mutate (when there are seeds)
    seed_parent_rate: float = 0.5  # of those, share whose parent is a seed (else an earlier problem)


def load_seeds(seeds_dir: str | Path) -> list[Record]:
    """Seed problems as records (family root = their own id); bad files are skipped with a line."""
    seeds_dir = Path(seeds_dir)
    if not seeds_dir.is_dir():
        raise KernelmillError(f"{seeds_dir}: no such seeds folder")
    records = []
    for path in sorted(seeds_dir.glob("*.py")):
        if path.name.startswith("_"):
            continue
        try:
            problem = check_source(read_source(path), str(path))
        except ProblemError as exc:  # names the file and line, bad bytes included
            log.warning(f"skipping seed {exc}")
            continue
        records.append(Record.from_source(problem.source, name=problem.name,
                                          category=problem.category, level=problem.level,
                                          provenance={"generator": "seed", "operations": []}))
    return records


_CATEGORY_LINE = re.compile(r"(?im)^(\s*category\s*:\s*)([\w-]+)")
_LEVEL_LINE = re.compile(r"(?im)^(\s*level\s*:\s*)(\d+)")


def retag(source: str, *, category: str | None = None, level: int | None = None) -> str:
    """Rewrite the ``category:`` / ``level:`` lines of the module docstring."""
    start = source.find('"""')
    end = source.find('"""', start + 3) if start >= 0 else -1
    if start < 0 or end < 0:
        return source
    doc = source[start:end]
    if category:
        doc = _CATEGORY_LINE.sub(lambda m: m.group(1) + category, doc, count=1)
    if level:
        doc = _LEVEL_LINE.sub(lambda m: m.group(1) + str(level), doc, count=1)
    return source[:start] + doc + source[end:]


def describe(operation: dict[str, Any], catalog=None) -> str:
    """A short phrase for a mutation, appended to the problem's description line."""
    from .catalog import default_catalog
    catalog = catalog or default_catalog()

    def title(name: str) -> str:
        return catalog[name].title if name in catalog else name

    op = operation["op"]
    if op == "swap_op":
        return f"{title(operation['from'])} replaced by {title(operation['to'])}"
    if op == "insert_epilogue":
        return f"followed by {title(operation['name'])}"
    if op == "remove_epilogue":
        return f"without the {title(operation['name'])}"
    if op == "dtype":
        return f"in {operation['to']}"
    if op == "reduction_dim":
        return f"over dim {operation['to']} instead of {operation['from']}"
    if op == "conv_pool_params":
        return f"{operation['layer']} kernel size {operation['kernel_size']}"
    if op == "input_distribution":
        return f"inputs drawn {operation['dist']}"
    if op == "resize":
        return f"sizes scaled by {operation['factor']:g}"
    return op


def redescribe(source: str, phrase: str) -> str:
    """Append ``phrase`` to the first line of the module docstring ("... Variant: phrase.")."""
    start = source.find('"""')
    if start < 0 or source[:start].strip():
        return source
    line_end = source.find("\n", start)
    close = source.find('"""', start + 3)
    end = min(e for e in (line_end, close) if e >= 0) if max(line_end, close) >= 0 else -1
    if end < 0:
        return source
    first = source[start + 3:end].rstrip()
    if not first:
        return source
    if "Variant: " in first:
        new = f"{first.rstrip('.')}; {phrase}."
    else:
        new = f"{first.rstrip('.')}. Variant: {phrase}."
    return source[:start + 3] + new + source[end:]


def _short_name(parent: Record, operations: list[dict[str, Any]]) -> str:
    base = parent.name.split("~")[0]
    ops = [o["op"] for o in operations if o.get("op") not in ("compose", "epilogue", "loss")][-3:]
    return f"{base}~{'-'.join(ops)}" if ops else base


class Synthesizer:
    """Generates records one attempt at a time; see the module docstring."""

    def __init__(self, seeds: list[Record], *, seed: int = 0, llm: LLMProposer | None = None,
                 llm_fraction: float = 0.1, config: SynthConfig | None = None,
                 composer: Composer | None = None, mutators: list[Mutator] | None = None):
        self.seeds = seeds
        self.seed = seed
        self.llm = llm
        self.llm_fraction = llm_fraction
        self.config = config or SynthConfig()
        self.composer = composer or Composer()
        self.mutators = mutators or all_mutators(self.composer.catalog)
        self.pool: list[Record] = []
        self.llm_failures = 0
        self.by_category: dict[str, list[Record]] = {}
        for record in seeds:
            self.by_category.setdefault(record.category, []).append(record)

    def remember(self, record: Record) -> None:
        self.pool.append(record)
        if len(self.pool) > POOL_SIZE:
            self.pool.pop(0)

    def attempt(self, index: int, stats: StageStats) -> Record | None:
        rng = random.Random(f"{self.seed}:{index}")
        roll = rng.random()
        try:
            if self.llm is not None and roll < self.llm_fraction:
                return self.from_llm(rng, stats)
            if self.seeds and rng.random() < self.config.mutate_rate:
                return self.from_mutation(rng, stats)
            return self.from_composer(rng)
        except Rejected as exc:
            stats.dropped(exc.label)
        except CompositionError as exc:
            stats.count(f"redrawn: {str(exc).split(' after ')[0]}")
        return None

    def from_composer(self, rng: random.Random) -> Record:
        comp = self.composer.draw(rng)
        source, name = emit_source(comp, self.composer)
        problem, _ = vet_source(source, name=name)
        return Record.from_source(source, name=name, category=problem.category,
                                  level=problem.level, provenance={
                                      "seed": comp.family, "operations": comp.operations(),
                                      "generator": "composer", "parent": None})

    def from_mutation(self, rng: random.Random, stats: StageStats) -> Record | None:
        use_seed = not self.pool or rng.random() < self.config.seed_parent_rate
        parents = self.seeds if use_seed else self.pool
        parent = parents[rng.randrange(len(parents))]
        order = list(self.mutators)
        rng.shuffle(order)
        for mutator in order[:3]:
            try:
                mutation = mutator.mutate(parent.source, rng)
            except Refusal:
                stats.count(f"refused: {mutator.name}")
                continue
            source = redescribe(mutation.source, describe(mutation.operation,
                                                          self.composer.catalog))
            category, level = parent.category, parent.level
            if mutation.operation["op"] == "insert_epilogue" and parent.category != "fused":
                category, level = "fused", max(2, parent.level)
                source = retag(source, category=category, level=level)
            problem, _ = vet_source(source, trace=False, name=parent.name)
            operations = list(parent.provenance.get("operations") or []) + [mutation.operation]
            return Record.from_source(source, name=_short_name(parent, operations),
                                      category=problem.category, level=problem.level,
                                      provenance={"seed": parent.family, "operations": operations,
                                                  "generator": "mutator", "parent": parent.id})
        stats.dropped("every mutator refused")
        return None

    def from_llm(self, rng: random.Random, stats: StageStats) -> Record | None:
        categories = sorted(self.by_category) or [c for c in CATEGORIES if c != "other"]
        category = categories[rng.randrange(len(categories))]
        pool = self.by_category.get(category, [])
        examples = rng.sample(pool, min(len(pool), self.llm.config.n_examples)) if pool else []
        try:
            source = self.llm.propose(category, [e.source for e in examples])
        except ValueError as exc:
            raise Rejected("llm: no code", str(exc)) from None
        except KernelmillError as exc:
            self.llm_failures += 1
            if self.llm_failures >= 5:
                log.warning(f"LLM proposals disabled after 5 failures; last: {exc}")
                self.llm = None
            raise Rejected("llm: endpoint error", str(exc)) from None
        problem, _ = vet_source(source, trace=False)
        if problem.category != category and problem.category not in CATEGORIES:
            raise Rejected("llm: static check", f"unknown category {problem.category}")
        record = Record.from_source(source, name=problem.name if problem.name != "problem" else
                                    f"llm_{category}", category=problem.category,
                                    level=problem.level, provenance={
                                        "operations": [{"op": "llm", "model": self.llm.config.model,
                                                        "category": category,
                                                        "examples": [e.id for e in examples]}],
                                        "generator": "llm", "parent": None})
        return record


def load_mined(path: str | Path | None) -> list[Record]:
    """Records of ``kernelmill mine`` used as extra seeds (none when the file is absent)."""
    if not path or not Path(path).exists():
        return []
    from kernelmill.core.store import read_records

    return list(read_records(path))


def synthesize(seeds_dir: str | Path, out_path: str | Path, *, n: int, seed: int = 0,
               llm: LLMConfig | LLMProposer | dict | None = None,
               mined: str | Path | None = None) -> StageStats:
    """Write ``n`` new problems to ``out_path`` (appending, resumable); counts by reason."""
    stats = StageStats("synth")
    start = time.monotonic()
    if n <= 0:
        return stats
    seeds = load_seeds(seeds_dir)
    stats.count("seeds", len(seeds))
    extra = load_mined(mined)
    if extra:
        seeds += extra
        stats.count("mined seeds", len(extra))
    proposer = None
    if llm is not None:
        proposer = llm if isinstance(llm, LLMProposer) else LLMProposer(
            llm if isinstance(llm, LLMConfig) else LLMConfig(**llm))
    fraction = proposer.config.fraction if proposer is not None else 0.0
    synth = Synthesizer(seeds, seed=seed, llm=proposer, llm_fraction=fraction)
    with JsonlWriter(out_path) as writer:
        before = set(writer.seen)
        done = 0
        attempts = iter(range(n * MAX_ATTEMPTS_PER_PROBLEM))
        for _ in track(range(n), total=n, description="synth"):
            record = None
            for index in attempts:
                record = synth.attempt(index, stats)
                if record is None:
                    continue
                if record.id in before:
                    stats.count("resumed")
                    synth.remember(record)
                    break
                if writer.write(record):
                    stats.kept()
                    stats.count(f"generator: {record.provenance['generator']}")
                    synth.remember(record)
                    break
                stats.dropped("duplicate")
                record = None
            if record is None:
                break
            done += 1
    if done < n:
        log.warning(f"synth: stopped after {n * MAX_ATTEMPTS_PER_PROBLEM} attempts with {done} of "
                    f"{n} problems")
    stats.seconds = time.monotonic() - start
    return stats


@dataclass
class SynthOptions:
    """Knobs of the synth stage."""

    seeds: str | None = option(None, "folder of seed problems (*.py; default: the shipped seeds)")
    n: int = option(1000, "number of problems to write")
    seed: int = option(0, "random seed (the run is deterministic)", build="=")
    llm: bool = option(False, "also ask an LLM (OpenAI-compatible endpoint) for problems")
    llm_base_url: str | None = option(None, "OpenAI-compatible base URL (env "
                                      "KERNELMILL_LLM_BASE_URL)")
    llm_model: str | None = option(None, "model name (env KERNELMILL_LLM_MODEL)")
    llm_api_key: str | None = option(None, "API key (env OPENAI_API_KEY)")
    llm_fraction: float = option(0.1, "share of attempts that ask the LLM")
    llm_examples: int = option(2, "few-shot examples per request")
    llm_options: dict[str, Any] = option(help="", default_factory=dict)  # [llm] table of a build
    mined: str | None = option(None, "records of `kernelmill mine` to mutate as extra seeds",
                               path=True)

    def llm_config(self) -> LLMConfig | None:
        if not self.llm:
            return None
        values = {"base_url": self.llm_base_url, "model": self.llm_model,
                  "api_key": self.llm_api_key, "fraction": self.llm_fraction,
                  "n_examples": self.llm_examples}
        return LLMConfig(**{**values, **self.llm_options})


def _run(inputs: list[Path], out: Path, config: SynthOptions) -> StageStats:
    seeds = inputs[0] if inputs else Path(config.seeds) if config.seeds else SEEDS_DIR
    if config.n == 0:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.touch()
        return StageStats("synth")
    return synthesize(seeds, out, n=config.n, seed=config.seed, llm=config.llm_config(),
                      mined=config.mined)


STEP = Step(
    name="synth", title="synthesize", config=SynthOptions, run=_run,
    inputs=("@seeds",), output="synth.jsonl", resumable=True, input_nargs="0",
    out_help="records file to append to (JSONL)",
    requires=lambda config: {"openai": "pip install openai"} if config.llm else {},
    build_values=lambda build: {"n": build.n, "llm": bool(build.config.llm),
                                "llm_options": dict(build.config.llm),
                                "mined": str(build.path("mined.jsonl")) if build.config.mine
                                else None},
    help="make new problems from seeds, the op catalog and (optionally) an LLM",
    description="Compose problems from the op catalog and mutate seeds with libcst codemods "
                "(resize, dtype, op swaps, epilogues, reduction dims, conv/pool geometry, input "
                "distributions); with --llm, also ask an OpenAI-compatible endpoint. "
                "Deterministic for a --seed; rerun the same command to resume.")
