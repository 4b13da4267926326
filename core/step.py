"""A stage declares itself once: a ``Step`` with its name, its config dataclass and ``run``.

The CLI and the build know stages only through the ordered registry of ``"module:STEP"`` strings
in ``kernelmill.app.stages``. A step's knobs are the fields of its config dataclass, each declared
once with ``option(default, help)``; the CLI flags, their ``--help`` defaults and the build's TOML
keys are generated from those fields, so they cannot drift apart.

A field's ``build`` name says which key of the build config feeds it (``dedup_threshold`` feeds
the dedup step's ``threshold``); a field without one is not a build knob (``shared`` fields such
as ``seed`` and ``device`` take the build key of the same name).
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import json
import os
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import KernelmillError
from .stats import StageStats


def option(default: Any = None, help: str = "", *, build: str | None = None,
           choices: Sequence[Any] | None = None, flag: str | None = None,
           result: bool = True, path: bool = False,
           default_factory: Callable[[], Any] | None = None) -> Any:
    """A config field with its help text. ``build`` names the build-config key that feeds it
    (``"="`` for the same name); ``result=False`` marks a knob that does not change the output
    (workers, addresses), so changing it does not redo a finished stage; ``path=True`` marks
    files whose content the output depends on."""
    metadata = {"help": help, "build": build, "choices": choices, "flag": flag,
                "result": result, "path": path}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def _base_type(annotation: Any) -> tuple[type, bool]:
    """(the scalar or container type of a field, whether it may be None)."""
    if isinstance(annotation, str):
        annotation = eval(annotation, {"typing": typing, "Any": Any}, {})  # noqa: S307 — ours
    optional = False
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        optional = type(None) in args
        annotation = next(a for a in args if a is not type(None))
    origin = typing.get_origin(annotation) or annotation
    return origin, optional


def field_type(f: dataclasses.Field) -> tuple[type, bool]:
    return _base_type(f.type)


def default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


def add_options(parser: argparse.ArgumentParser, config_cls: type,
                skip: Sequence[str] = ()) -> None:
    """One flag per field of ``config_cls``: ``--eval-fraction``, with its documented default."""
    for f in dataclasses.fields(config_cls):
        if f.name in skip or not f.metadata.get("help"):
            continue
        kind, _ = field_type(f)
        flag = f.metadata.get("flag") or "--" + f.name.replace("_", "-")
        default = default_of(f)
        shown = "" if default in (None, [], {}) else f" (default {default})"
        text = f"{f.metadata['help']}{shown}"
        if kind is bool:
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction,
                                default=None, help=text)
        elif kind is list:
            parser.add_argument(flag, dest=f.name, action="append", default=None, help=text)
        elif kind is dict:
            continue  # tables come from a TOML file only
        else:
            parser.add_argument(flag, dest=f.name, type=kind, default=None, help=text,
                                choices=f.metadata.get("choices"))


def config_from_args(config_cls: type, args: argparse.Namespace, **extra: Any) -> Any:
    """The config whose fields are the flags typed (unset flags keep the field default)."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(config_cls)
              if getattr(args, f.name, None) is not None}
    values.update({k: v for k, v in extra.items() if v is not None})
    return config_cls(**values)


def build_key(f: dataclasses.Field) -> str | None:
    key = f.metadata.get("build")
    return f.name if key == "=" else key


@dataclass(frozen=True)
class Step:
    """One stage of the pipeline.

    ``run(inputs, out, config)`` reads the ``inputs`` paths, writes ``out`` and returns the
    ``StageStats`` of what it kept and dropped and why. ``inputs``/``output`` are the file names
    it reads and writes inside a build folder. ``resumable`` steps append to their output and skip
    finished records; the others write a clean output. ``requires(config)`` names optional modules
    a run with that config needs, with the command that installs each. In a build, a config field
    takes the build key its ``option`` names, then ``build_values(build)`` (values only the build
    knows, such as the number of problems for its device). The input ``"@seeds"`` is the build's
    seeds folder.
    """

    name: str
    title: str
    help: str
    config: type
    run: Callable[[list[Path], Path, Any], StageStats]
    inputs: tuple[str, ...] = ()
    output: str = ""
    input_help: str | None = "records file (JSONL)"
    input_nargs: str | None = None  # None: one positional; "+": one or more; "0": none
    out_help: str = "output records file (JSONL)"
    resumable: bool = False
    requires: Callable[[Any], dict[str, str]] = lambda config: {}
    description: str = ""
    build_values: Callable[[Any], dict[str, Any]] = lambda build: {}  # values the build sets

    def check(self, config: Any) -> None:
        """Raise a one-line error naming what to install when ``config`` needs a missing module."""
        for module, hint in self.requires(config).items():
            if _missing(module):
                raise KernelmillError(f"stage {self.name} needs {module}: {hint}")

    def __call__(self, inputs: Sequence[str | Path], out: str | Path, config: Any = None
                 ) -> StageStats:
        config = self.config() if config is None else config
        self.check(config)
        return self.run([Path(p) for p in inputs], Path(out), config)


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # a parent package missing, or a module blocked as None
        return True


_SECRET_FIELDS = ("api_key", "llm_api_key", "token")


def result_options(config: Any) -> dict[str, Any]:
    """The options that shape a step's output: not where or how fast it runs, never secrets."""
    params = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
              if f.metadata.get("result", True) and f.name not in _SECRET_FIELDS}
    if isinstance(params.get("llm_options"), dict):
        params["llm_options"] = {k: v for k, v in params["llm_options"].items()
                                 if k not in _SECRET_FIELDS}
    return json.loads(json.dumps(params, sort_keys=True, default=str))


def options_path(out: Path) -> Path:
    """Where a resumable stage run outside a build records the options its output was made with."""
    return out.with_name(f".{out.name}.options.json")


def start_or_resume(step: Step, out: Path, config: Any) -> str:
    """Before a resumable step appends to ``out``: resume when ``out`` was made with the same
    options, else set the old output aside (``OUT.previous``) and start clean. Returns what was
    done, in one line, or "" for a fresh output."""
    if not step.resumable:
        return ""
    wanted = result_options(config)
    recorded_at = options_path(out)
    message = ""
    if out.exists():
        try:
            recorded = json.loads(recorded_at.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            recorded = None
        if recorded == wanted:
            message = f"{out}: resuming (made with the same options)"
        else:
            aside = out.with_name(out.name + ".previous")
            os.replace(out, aside)
            changed = sorted(k for k in wanted if (recorded or {}).get(k) != wanted[k]) \
                if recorded is not None else []
            why = f"options changed ({', '.join(changed)})" if changed else \
                "no record of the options it was made with"
            message = f"{out}: {why}; starting clean, the old output is kept as {aside}"
    out.parent.mkdir(parents=True, exist_ok=True)
    recorded_at.write_text(json.dumps(wanted, sort_keys=True) + "\n", encoding="utf-8")
    return message


def load_step(spec: str) -> Step:
    """``"kernelmill.curate.dedup:STEP"`` -> the Step object."""
    module, _, name = spec.partition(":")
    step = getattr(importlib.import_module(module), name or "STEP")
    if not isinstance(step, Step):
        raise TypeError(f"{spec} is not a Step")
    return step
