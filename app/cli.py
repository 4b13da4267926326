"""The ``kernelmill`` command: one subcommand per stage, plus ``build`` and ``grade``.

Each stage module exposes ``register(subparsers)``; the list below is the only place that names
them. Errors a user can fix print as one line (``kernelmill: error: ...``) with exit status 2.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import logging
import sys
from pathlib import Path

from kernelmill.core.errors import KernelmillError
from kernelmill.core.step import Step, add_options, config_from_args, start_or_resume

from .stages import stages

# Commands that are not pipeline stages; every stage comes from the registry (app/stages.py).
COMMAND_MODULES = (
    "kernelmill.app.build",  # build
    "kernelmill.app.interop_cli",  # export
    "kernelmill.grade.cli",  # grade
    "kernelmill.grade.service.cli",  # serve
)


def _run_stage(step: Step, args: argparse.Namespace) -> int:
    config = config_from_args(step.config, args)
    inputs = args.inputs if isinstance(args.inputs, list) else \
        [] if args.inputs is None else [args.inputs]
    step.check(config)
    note = start_or_resume(step, Path(args.out), config)
    if note:
        print(f"kernelmill: {note}", file=sys.stderr)
    stats = step.run([Path(p) for p in inputs], Path(args.out), config)  # checked above
    print(stats.summary())
    reasons = stats.drop_reasons()
    if reasons:
        width = max(len(r) for r in reasons)
        for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
            print(f"  dropped {reason:<{width}}  {n}")
    print(f"{step.name}: wrote {args.out} in {stats.seconds:.1f}s")
    return 0


def register_stage(subparsers: argparse._SubParsersAction, step: Step) -> None:
    """``kernelmill <stage> INPUT... --out OUT`` plus one flag per config field."""
    p = subparsers.add_parser(step.name, help=step.help, description=step.description or None)
    if step.input_nargs != "0":
        p.add_argument("inputs", nargs=step.input_nargs, metavar="INPUT", help=step.input_help)
    else:
        p.set_defaults(inputs=None)
    p.add_argument("--out", required=True, help=step.out_help)
    add_options(p, step.config)
    p.set_defaults(func=functools.partial(_run_stage, step))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelmill",
        description="Build validated, deduplicated, contamination-free GPU-kernel problem sets "
                    "and grade kernel submissions against them.")
    parser.add_argument("--version", action="version", version=f"kernelmill {_version()}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for step in stages():
        register_stage(subparsers, step)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kernelmill")
    except PackageNotFoundError:
        return "unknown"


def _parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parse_args``, except that an unknown flag of a subcommand prints that subcommand's usage
    (argparse would print the top-level one)."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        command = next((a.choices.get(args.command) for a in parser._actions
                        if isinstance(a, argparse._SubParsersAction)), None)
        (command or parser).error(f"unrecognized arguments: {' '.join(extras)}")
    return args


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = _parse(parser, argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="kernelmill: %(message)s", stream=sys.stderr)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KernelmillError as exc:
        if args.debug:
            raise
        print(f"kernelmill: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kernelmill: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 — one line for the user, traceback with --debug
        if args.debug:
            raise
        print(f"kernelmill: error: {type(exc).__name__}: {exc} (rerun with --debug for the "
              "traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
