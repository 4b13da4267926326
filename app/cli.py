"""The ``kernelmill`` command: one subcommand per stage, plus ``build`` and ``grade``.

Each stage module exposes ``register(subparsers)``; the list below is the only place that names
them. Errors a user can fix print as one line (``kernelmill: error: ...``) with exit status 2.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from kernelmill.core.errors import KernelmillError

COMMAND_MODULES = (
    "kernelmill.app.interop_cli",  # import, export
    "kernelmill.synth.cli",  # synth
    "kernelmill.app.build",  # build
    "kernelmill.validate.cli",  # validate
    "kernelmill.curate.dedup",  # dedup
    "kernelmill.curate.cluster",  # cluster
    "kernelmill.splits.cli",  # split, publish
    "kernelmill.grade.cli",  # grade
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelmill",
        description="Build validated, deduplicated, contamination-free GPU-kernel problem sets "
                    "and grade kernel submissions against them.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
