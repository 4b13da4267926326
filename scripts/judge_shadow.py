"""Run pytest with every ``judge()`` call of the grader shadowed by the judge of another commit.

Each verdict is made twice from the same worker results: by this tree's judge, and by
``grade/judge.py`` as it was at ``--rev`` (loaded into this tree's ``kernelmill.grade``, on a
deep copy of the candidate's result: the old judge wrote into it). Any difference in the
verdict (every field but ``findings``, and ``hack_details``' order) is appended to ``--out``.
Written to show that the judge's move to checks (issue 44) changed no verdict:

    python scripts/judge_shadow.py --rev d683d64 --out /tmp/shadow -- -q \
        tests/hostile/test_hostile.py::test_hostile_suite_on_cpu
"""
import argparse
import copy
import importlib.util
import json
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", help="the commit whose grade/judge.py shadows")
    parser.add_argument("--old", help="that judge's file instead (where there is no git)")
    parser.add_argument("--out", required=True, help="a folder for the old judge and the diffs")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    old_source = out / "old_judge.py"
    old_source.write_text(Path(args.old).read_text() if args.old else subprocess.run(
        ["git", "show", f"{args.rev}:grade/judge.py"], cwd=ROOT, check=True, capture_output=True,
        text=True).stdout)

    import kernelmill.grade.judge as new
    from kernelmill.grade import grader

    spec = importlib.util.spec_from_file_location("kernelmill.grade._shadow_judge", old_source)
    old = importlib.util.module_from_spec(spec)
    old.__package__ = "kernelmill.grade"
    sys.modules[spec.name] = old
    spec.loader.exec_module(old)
    lock, counts = threading.Lock(), {"judged": 0, "differ": 0}

    def plain(verdict: dict) -> dict:
        return json.loads(json.dumps({k: v for k, v in verdict.items() if k != "findings"},
                                     default=repr))

    def shadow(reference, ref_run, cand_run, **kw):
        snapshot = copy.deepcopy(cand_run)
        verdict = new.judge(reference, ref_run, cand_run, **kw)
        try:
            a, b = plain(old.judge(reference, ref_run, snapshot, **kw)), plain(verdict)
            same = a == b and list(a.get("hack_details") or {}) == \
                list(b.get("hack_details") or {})
            diff = None if same else {k: (a.get(k), b.get(k)) for k in {*a, *b}
                                      if a.get(k) != b.get(k)} or "hack_details order"
        except Exception as exc:  # noqa: BLE001 — the old judge failing is a difference too
            same, diff = False, repr(exc)
        with lock:
            counts["judged"] += 1
            counts["differ"] += not same
            if not same:
                with (out / "mismatches.jsonl").open("a") as handle:
                    handle.write(json.dumps({"diff": diff}, default=repr) + "\n")
            (out / "count.json").write_text(json.dumps(counts))
        return verdict

    grader.judge = shadow
    import pytest

    code = pytest.main([a for a in args.pytest_args if a != "--"])
    print(f"judge_shadow: {counts['judged']} verdicts judged twice, {counts['differ']} differ")
    return int(code) or (1 if counts["differ"] else 0)


if __name__ == "__main__":
    sys.exit(main())
