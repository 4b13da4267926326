"""``kernelmill synth``: compose, mutate (and optionally ask an LLM for) new problems."""
from __future__ import annotations

import argparse
import sys

from kernelmill.data import SEEDS_DIR


def _cmd_synth(args: argparse.Namespace) -> int:
    from .generate import synthesize
    from .llm import LLMConfig
    llm = None
    if args.llm:
        llm = LLMConfig(base_url=args.llm_base_url, model=args.llm_model, api_key=args.llm_api_key,
                        fraction=args.llm_fraction, n_examples=args.llm_examples)
    stats = synthesize(args.seeds, args.out, n=args.n, seed=args.seed, llm=llm)
    print(stats.summary(), file=sys.stderr)
    print(f"synth: {stats.n_kept} new problem(s) written to {args.out} in {stats.seconds:.1f}s",
          file=sys.stderr)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "synth", help="make new problems from seeds, the op catalog and (optionally) an LLM",
        description="Compose problems from the op catalog and mutate seeds with libcst codemods "
                    "(resize, dtype, op swaps, epilogues, reduction dims, conv/pool geometry, "
                    "input distributions); with --llm, also ask an OpenAI-compatible endpoint. "
                    "Deterministic for a --seed; rerun the same command to resume.")
    p.add_argument("--seeds", default=str(SEEDS_DIR), help="folder of seed problems (*.py)")
    p.add_argument("--n", type=int, default=1000, help="number of problems to write")
    p.add_argument("--seed", type=int, default=0, help="random seed (the run is deterministic)")
    p.add_argument("--out", default="problems.jsonl", help="records file to append to (JSONL)")
    p.add_argument("--llm", action="store_true", help="also ask an LLM for problems")
    p.add_argument("--llm-base-url", help="OpenAI-compatible base URL (env KERNELMILL_LLM_BASE_URL)")
    p.add_argument("--llm-model", help="model name (env KERNELMILL_LLM_MODEL)")
    p.add_argument("--llm-api-key", help="API key (env OPENAI_API_KEY)")
    p.add_argument("--llm-fraction", type=float, default=0.1,
                   help="share of attempts that ask the LLM (default 0.1)")
    p.add_argument("--llm-examples", type=int, default=2, help="few-shot examples per request")
    p.set_defaults(func=_cmd_synth)
