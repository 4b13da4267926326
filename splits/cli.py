"""``kernelmill split`` and ``kernelmill publish``."""
from __future__ import annotations

import argparse
import os


def _cmd_split(args: argparse.Namespace) -> int:
    from .split import split_file

    stats = split_file(args.input, args.out, eval_fraction=args.eval_fraction,
                       against=args.against, seed=args.seed,
                       keep_contaminated=args.keep_contaminated, threshold=args.threshold)
    print(stats.summary())
    print(f"wrote {args.out}/train.jsonl, eval.jsonl, contamination.json, contamination.md")
    return 0


def _cmd_publish(args: argparse.Namespace) -> int:
    from .publish import publish_dataset

    token = args.token or os.environ.get("HF_TOKEN")
    stats = publish_dataset(args.dir, args.out, push_to_hub=args.push_to_hub, token=token,
                            pretty_name=args.name)
    print(stats.summary())
    where = f" and pushed to https://huggingface.co/datasets/{args.push_to_hub}" \
        if args.push_to_hub else ""
    print(f"dataset written to {args.out}{where}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "split", help="group-aware stratified train/eval split with decontamination",
        description="Assign whole families (provenance root + structural/near/behaviour groups) "
                    "to train or eval, stratified by category and difficulty; drop (or mark) "
                    "problems that match a reference benchmark.")
    p.add_argument("input", help="records file (JSONL), ideally deduplicated and clustered")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--eval-fraction", type=float, default=0.2,
                   help="share of problems in eval (0.2)")
    p.add_argument("--against", action="append", default=[], metavar="BENCH",
                   help="reference benchmark: folder of KernelBench files or records file "
                        "(repeatable)")
    p.add_argument("--keep-contaminated", action="store_true",
                   help="keep contaminated problems, marked, instead of dropping them")
    p.add_argument("--threshold", type=float, default=0.8,
                   help="near-duplicate Jaccard threshold (0.8)")
    p.add_argument("--seed", type=int, default=0, help="seed of the assignment (0)")
    p.set_defaults(func=_cmd_split)

    p = subparsers.add_parser(
        "publish", help="write a Hugging Face dataset folder (parquet + card), optionally push",
        description="Write DATASET/data/{split}-00000-of-00001.parquet and a README.md dataset "
                    "card from a split folder; --push-to-hub uploads it.")
    p.add_argument("dir", help="split folder (train.jsonl, eval.jsonl, contamination.json)")
    p.add_argument("--out", required=True, help="dataset folder to write")
    p.add_argument("--push-to-hub", metavar="REPO_ID", help="upload to this dataset repo")
    p.add_argument("--token", help="Hugging Face token (default: $HF_TOKEN or the login)")
    p.add_argument("--name", help="dataset name in the card (default: repo id or folder name)")
    p.set_defaults(func=_cmd_publish)
