"""The fault matrix of issue 15: every fault and bad-input case, what happened, on this machine.

    python benchmarks/fault_matrix.py [--json OUT.json]

Runs the fault suite (the tests named below, real processes and files on the CPU: kill -9,
file-size limits, concurrent runs, damaged intermediates, a zygote killed with SIGKILL, two
large problems on a small host-memory budget) and prints one row per case: the area,
the test that exercises it and its outcome. A case's outcome is the test's: it passes only when
the run ended with nothing lost, duplicated or silently altered, a one-line message naming the
file, and an exit status that says whether the job was done.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = (
    ("bad input", "tests/core/test_bad_input.py"),
    ("bad input", "tests/core/test_stage_inputs.py"),
    ("bad input", "tests/grade/test_source_scan.py"),
    ("disk full", "tests/core/test_disk_full.py"),
    ("locks", "tests/core/test_lock.py"),
    ("locks, cache", "tests/grade/test_batch_faults.py"),
    ("up to date", "tests/core/test_fingerprint.py"),
    ("up to date, locks", "tests/app/test_build_faults.py"),
    ("stale output", "tests/curate/test_rewrite.py"),
    ("reference", "tests/grade/test_reference_faults.py"),
    ("processes", "tests/validate/test_process_faults.py"),
    ("host memory", "tests/validate/test_host_memory.py"),
)


def run_suite() -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        f"--junitxml={report}", *(path for _, path in SUITE)], cwd=ROOT)
        tree = ET.parse(report)
    area_of = {Path(path).stem: area for area, path in SUITE}
    rows = []
    for case in tree.iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)[-1]
        failed = case.find("failure") is not None or case.find("error") is not None
        skipped = case.find("skipped") is not None
        rows.append({"area": area_of.get(module, module), "case": case.get("name"),
                     "outcome": "FAILED" if failed else "skipped" if skipped else "ok",
                     "seconds": round(float(case.get("time", 0)), 1)})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    rows = run_suite()
    width = max(len(r["case"]) for r in rows)
    print(f"\n{'area':18} {'case':{width}} {'outcome':8} {'s':>6}")
    for r in rows:
        print(f"{r['area']:18} {r['case']:{width}} {r['outcome']:8} {r['seconds']:6.1f}")
    bad = sum(r["outcome"] == "FAILED" for r in rows)
    print(f"\n{len(rows)} cases, {len(rows) - bad} behaved, {bad} did not")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
