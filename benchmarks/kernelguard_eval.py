"""kernelguard as a static pre-filter: what it says about every honest and hostile submission we hold.

    pip install kernelguard            # (or: pip download kernelguard --no-deps; pip install *.whl)
    python benchmarks/kernelguard_eval.py [--json OUT.json] [--profile default|strict]

kernelguard (PyPI, GPU MODE's rule-based hack detector) reads a source and classifies it
(``hacked``: a rule that auto-filters matched; ``suspicious`` / ``low_confidence``: support
signals; ``valid``: none). A pre-filter may reject only what it calls ``hacked``, and only if it
calls no honest kernel so. The sets:

- honest: tests/hostile/honest_* and every tests/hostile case expected ``certified``; the honest
  and CUDA fixtures of tests/fixtures; the answers of ``benchmarks/grade_fidelity.py`` and every
  generated answer of ``benchmarks/grade_throughput.py`` (its builders, so the sets stay in step);
- hostile: every other case of tests/hostile (and its known gaps) and the ``hack_*`` fixtures;
- fault: the ``crash_*`` fixtures (broken, not hostile);
- reference (``--kernelbench DIR``): KernelBench's problem files (PyTorch programs, not answers;
  honest code that answers often copy).

One row per submission: set, expected verdict, kernelguard's classification and rules, and our
own static scan (``grade.static``) for comparison; then a summary and the adoption rule's answer.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = ROOT / "tests" / "hostile"
FIXTURES = ROOT / "tests" / "fixtures"


def _expect(text: str) -> str:
    found = re.search(r"^# expect: (\S+)", text, re.MULTILINE)
    return found.group(1) if found else "?"


def submissions() -> list[tuple[str, str, str, str]]:
    """(name, set, expected, source) for every submission we hold, each source once."""
    rows: dict[str, tuple[str, str, str, str]] = {}

    def add(name: str, kind: str, expect: str, source: str) -> None:
        if all(source != row[3] for row in rows.values()):
            rows.setdefault(name, (name, kind, expect, source))

    for path in sorted([*HOSTILE.glob("*.py"), *(HOSTILE / "known_gaps").glob("*.py")]):
        if path.name.startswith(("ref_", "test_")):
            continue
        text = path.read_text()
        expect = _expect(text)
        kind = "honest" if expect == "certified" else "hostile"
        add(f"hostile/{path.stem}", kind, expect, text)
    for path in sorted((FIXTURES / "honest").glob("*.py")):
        if not path.name.startswith("ref_"):
            add(f"honest/{path.stem}", "honest", "certified", path.read_text())
    for path in sorted((FIXTURES / "submissions").glob("*.py")):
        if path.name.startswith("ref_"):
            continue
        text = path.read_text()
        kind = "fault" if path.name.startswith("crash_") else \
            "hostile" if path.name.startswith("hack_") else "honest"
        add(f"submissions/{path.stem}", kind, _expect(text) if kind != "honest" else
            "certified", text)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from grade_fidelity import SET
    from grade_sets import build_inputs

    for name, answer, _sizes in SET:
        add(f"fidelity/{name}", "honest", "certified", answer.read_text())
    with tempfile.TemporaryDirectory() as folder:
        _problems, subs, _n = build_inputs(Path(folder))
        for line in subs.read_text().splitlines():
            row = json.loads(line)
            name = row["submission_id"]
            kind = "fault" if name.startswith("crash_") else \
                "hostile" if name.startswith("hack_") else "honest"
            add(f"throughput/{name}", kind, "certified" if kind == "honest" else
                _expect(row["source"]), row["source"])
    return list(rows.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the rows here too")
    parser.add_argument("--profile", default=None, help="kernelguard profile (default: its own)")
    parser.add_argument("--kernelbench", help="a KernelBench checkout's level folders' parent "
                        "(e.g. ../shared/benchmarks/kernelbench): its problems as a fourth set")
    args = parser.parse_args()
    try:
        import kernelguard
    except ImportError:
        print("kernelguard is not installed: pip install kernelguard")
        return 1
    if args.profile:
        kernelguard.configure_runtime(profile=args.profile)
    from kernelmill.grade import static

    chosen = submissions()
    if args.kernelbench:
        for path in sorted(Path(args.kernelbench).glob("level*/*.py")):
            chosen.append((f"kernelbench/{path.parent.name}/{path.stem}", "reference", "-",
                           path.read_text()))
    rows = []
    for name, kind, expect, source in chosen:
        result = kernelguard.analyze_code(source, compute_structural_hash=False)
        rules = sorted({m.get("pattern") or m.get("rule") or m.get("name") or "?"
                        for m in result["matched_patterns"]})
        rows.append({"name": name, "set": kind, "expect": expect,
                     "kernelguard": result["classification"],
                     "filter": bool(result["should_filter"]), "rules": rules,
                     "static": any(not f.startswith(static.KERNELGUARD_PREFIX)
                                   for f in static.scan(source))})
    listed = [r for r in rows if r["set"] != "reference" or r["filter"] or r["static"]]
    width = min(60, max(len(r["name"]) for r in listed))
    print(f"{'submission':<{width}}  {'set':<7} {'expected':<22} {'kernelguard':<15} "
          f"{'static':<6} rules")
    for r in listed:  # a clean reference problem is counted below, not listed
        print(f"{r['name']:<{width}}  {r['set']:<7} {r['expect']:<22} "
              f"{r['kernelguard'] + (' *' if r['filter'] else ''):<15} "
              f"{'flag' if r['static'] else '-':<6} {', '.join(r['rules'])[:80]}")
    print("\n(* = kernelguard would filter it; static = grade.static.scan's own rules have "
          "findings; clean reference problems are not listed)")
    for kind in ("honest", "hostile", "fault", "reference"):
        chosen = [r for r in rows if r["set"] == kind]
        classes = Counter(r["kernelguard"] for r in chosen)
        print(f"{kind:<8} {len(chosen):>3}: filtered {sum(r['filter'] for r in chosen):>3}, "
              f"static-flagged {sum(r['static'] for r in chosen):>3}; kernelguard "
              f"{dict(sorted(classes.items()))}")
    honest_hits = [r["name"] for r in rows if r["set"] in ("honest", "reference") and r["filter"]]
    hostile = [r for r in rows if r["set"] == "hostile"]
    only_kg = [r["name"] for r in hostile if r["filter"] and not r["static"]]
    print(f"honest kernels and reference problems kernelguard filters: {honest_hits or 'none'}")
    print(f"hostile cases kernelguard filters that the static scan does not: {only_kg or 'none'}")
    print("adopt as a pre-filter:", "no (it filters honest kernels)" if honest_hits else
          "yes (it filters no honest kernel)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
