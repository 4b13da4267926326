"""The build's knobs: one dataclass whose fields are ``kernelmill build``'s flags.

Values come from three places, later ones winning: the defaults below (the same as the shipped
``data/build.toml``, which documents each one), a TOML file given with ``--config``, and the flags
typed on the command line. An unknown key or a value of the wrong type is a one-line error that
names the file and the line.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelmill.data import DATA_DIR

from kernelmill.core.errors import KernelmillError
from kernelmill.core.step import field_type, option
from kernelmill.splits.contamination import DEFAULT_AGAINST
from kernelmill.synth.llm import LLMConfig
from kernelmill.validate.runner import ValidateConfig

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover — Python 3.10
    try:
        import tomli as tomllib  # type: ignore[no-redef]
    except ModuleNotFoundError:
        tomllib = None  # type: ignore[assignment]

DEFAULT_CONFIG = DATA_DIR / "build.toml"


@dataclass
class BuildConfig:
    """Every knob of ``kernelmill build``; see ``data/build.toml`` for what each one does."""

    out: str = option("runs/demo", "build folder; rerunning with the same folder resumes")
    n: int | None = option(None, "problems to synthesize (default: n_cpu or n_gpu by device)")
    n_cpu: int = option(16, "problems to synthesize when validation runs on the CPU")
    n_gpu: int = option(960, "problems to synthesize when validation runs on a GPU (with the "
                        "seeds, over 1,000 problems)")
    device: str = option("auto", "where validation runs: auto, cpu, cuda or cuda:N")
    seed: int = option(0, "seed of every sampling stage (synthesis, clustering, the split)")
    backend: str = option("local", "where validation runs: local worker processes, or Ray "
                          "(needs `pip install -e '.[ray]'`)", choices=("local", "ray"))
    address: str | None = option(None, "Ray cluster address (--backend ray; default: start a "
                                 "local one)")
    workers: int | None = option(None, "parallel validation workers (default: one per GPU x "
                                 "workers per GPU, 2 on CPU)")
    seeds_dir: str | None = option(None, "folder of seed problems (default: the shipped seeds)")
    mine: list[str] = option(help="sources to mine before synthesis (`kernelmill mine`): "
                             "installed packages, folders or git checkouts; their problems join "
                             "the build and seed the mutators (repeatable; default: none)",
                             default_factory=list)
    mine_licenses: str = option("any", "which mined sources to keep by license: any, or "
                                "permissive", choices=("any", "permissive"))
    seeds_glob: str = option("*.py", "which files of the seeds folder to use")
    seeds_limit: int = option(0, "use only the first N seed files (by name); 0: all")
    eval_fraction: float = option(0.2, "share of problem families that go to eval")
    dedup_threshold: float = option(0.8, "MinHash Jaccard at which two problems are near "
                                    "duplicates")
    clusters: int = option(0, "k of the clustering; 0: chosen from the number of problems")
    against: list[str] = option(help="benchmark to decontaminate against: a folder of "
                                "KernelBench-format files, a records file, a fingerprint file "
                                "or builtin:NAME (shipped fingerprints; repeatable; given ones "
                                "replace the default)",
                                default_factory=lambda: list(DEFAULT_AGAINST))
    keep_contaminated: bool = option(False, "keep contaminated problems, marked, instead of "
                                     "dropping them")
    contamination_threshold: float = option(0.8, "near-duplicate Jaccard threshold of "
                                            "decontamination")
    report: bool = option(True, "write report.html and figures/*.png at the end")
    validate: dict[str, Any] = option(help="validator options (TOML table [validate])",
                                      default_factory=dict)
    llm: dict[str, Any] = option(help="LLM proposals in synthesis (TOML table [llm]); {}: none",
                                 default_factory=dict)

    def n_for(self, device: str) -> int:
        if self.n is not None:
            return self.n
        return self.n_gpu if device.startswith("cuda") else self.n_cpu

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def check(self, where: str = "config") -> BuildConfig:
        """Raise a one-line KernelmillError for values no stage could use."""
        problems = []
        if self.n is not None and self.n < 0:
            problems.append("n must be >= 0")
        if self.backend not in ("local", "ray"):
            problems.append(f"backend must be 'local' or 'ray', got {self.backend!r}")
        if not 0.0 < self.eval_fraction < 1.0:
            problems.append(f"eval_fraction must be between 0 and 1, got {self.eval_fraction}")
        for name in ("dedup_threshold", "contamination_threshold"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                problems.append(f"{name} must be in (0, 1], got {value}")
        for name in ("n_cpu", "n_gpu", "seeds_limit", "clusters"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0")
        if self.workers is not None and self.workers < 1:
            problems.append("workers must be >= 1")
        if problems:
            raise KernelmillError(f"{where}: " + "; ".join(problems))
        if self.validate:
            try:
                ValidateConfig.coerce(dict(self.validate))
            except (KernelmillError, TypeError) as exc:
                raise KernelmillError(f"{where}: [validate]: {exc}") from None
        if self.llm:
            try:
                LLMConfig(**self.llm)
            except TypeError as exc:
                raise KernelmillError(f"{where}: [llm]: {exc}") from None
        return self


FIELDS = {f.name: f for f in dataclasses.fields(BuildConfig)}



def _toml_types(f: dataclasses.Field) -> tuple[type, ...]:
    """What a TOML value of a field may be (TOML has no null: leave a key out for None)."""
    kind, _ = field_type(f)
    return (float, int) if kind is float else (kind,)


_TYPES: dict[str, tuple[type, ...]] = {name: _toml_types(f) for name, f in FIELDS.items()}



def _line_of(text: str, key: str) -> int | None:
    pattern = re.compile(rf"^\s*(\[\s*{re.escape(key)}\s*\]|{re.escape(key)}\s*=)")
    for lineno, line in enumerate(text.splitlines(), start=1):
        if pattern.match(line):
            return lineno
    return None


def _where(path: Path, text: str, key: str) -> str:
    line = _line_of(text, key)
    return f"{path}:{line}" if line else str(path)


def _type_name(types: tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
             list: "a list", dict: "a table"}
    return names[types[0]]


def parse_toml(path: str | Path) -> dict[str, Any]:
    """Read ``path`` into a dict of BuildConfig fields; one-line errors with file:line."""
    path = Path(path)
    if tomllib is None:  # pragma: no cover — Python 3.10 without tomli
        raise KernelmillError("reading a TOML config needs Python 3.11 or `pip install tomli`")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise KernelmillError(f"{path}: cannot read config ({exc.strerror or exc})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = re.search(r"\(at line (\d+), column \d+\)", message)
        if match:
            message = message[:match.start()].strip()
            raise KernelmillError(f"{path}:{match.group(1)}: invalid TOML: {message}") from None
        raise KernelmillError(f"{path}: invalid TOML: {message}") from None
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in FIELDS:
            raise KernelmillError(f"{_where(path, text, key)}: unknown key {key!r} in build "
                                  f"config (known: {', '.join(FIELDS)})")
        types = _TYPES[key]
        if isinstance(value, bool) and bool not in types or not isinstance(value, types):
            raise KernelmillError(f"{_where(path, text, key)}: {key} must be "
                                  f"{_type_name(types)}, got {value!r}")
        if key == "mine" and not all(isinstance(v, str) for v in value):
            raise KernelmillError(f"{_where(path, text, key)}: mine must be a list of sources")
        if key == "against" and not all(isinstance(v, str) for v in value):
            raise KernelmillError(f"{_where(path, text, key)}: against must be a list of paths")
        if types[0] is float:
            value = float(value)
        values[key] = value
    return values


def load_config(path: str | Path | None = None, **overrides: Any) -> BuildConfig:
    """Defaults, then the TOML file at ``path``, then ``overrides`` that are not None."""
    values = parse_toml(path) if path is not None else {}
    for key, value in overrides.items():
        if key not in FIELDS:
            raise KernelmillError(f"unknown build option {key!r}")
        if value is not None:
            values[key] = value
    config = BuildConfig(**values)
    return config.check(str(path) if path is not None else "build options")
