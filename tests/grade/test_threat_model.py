"""docs/THREAT_MODEL.md and the registry of checks name each other: every registered check
answers a threat row; every row names a registered check or a mechanism that exists, and tests
that exist. Also the verdict's ``findings`` and the hack codes' one list."""
import re
import subprocess
from pathlib import Path

import pytest
from kernelmill.core.record import Verdict
from kernelmill.grade.checks import CHECKS, HackCode, Layer
from kernelmill.grade.judge import amend

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "THREAT_MODEL.md"


def rows() -> dict[str, list[str]]:
    """threat id -> the table row's cells."""
    found = {}
    for line in DOC.read_text().splitlines():
        if re.match(r"^\| T-\d\d \|", line):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            assert cells[0] not in found, f"{cells[0]} twice"
            found[cells[0]] = cells
    assert found, "no threat rows"
    return found


def quoted(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def test_every_registered_check_answers_a_threat_row():
    threats = rows()
    for check in CHECKS.values():
        assert check.threat in threats, f"{check.name} names {check.threat}, not in the model"
        row = threats[check.threat]
        assert check.name in quoted(row[2]), f"{check.name} missing from {check.threat}'s row"


def test_every_row_names_a_mechanism_and_tests_that_exist():
    for threat, cells in rows().items():
        assert len(cells) == 6, f"{threat}: {len(cells)} cells"
        checks = [name for name in quoted(cells[2]) if name in CHECKS]
        unknown = [name for name in quoted(cells[2]) if name not in CHECKS]
        assert not unknown, f"{threat} names unregistered checks {unknown}"
        paths = [p for p in quoted(cells[3]) if "/" in p]
        existing = [p for p in paths if (ROOT / p).exists() or (ROOT / f"{p}.py").exists()]
        assert checks or existing, f"{threat} names no registered check or mechanism"
        assert existing == paths, f"{threat}: {sorted(set(paths) - set(existing))} do not exist"
        tests = quoted(cells[5])
        assert tests, f"{threat} names no test"
        for test in tests:
            path, _, name = test.partition("::")
            assert (ROOT / path).is_file(), f"{threat}: {path} does not exist"
            if name:
                text = (ROOT / path).read_text()
                assert re.search(rf"^def {re.escape(name)}\(", text, re.MULTILINE), \
                    f"{threat}: {path} defines no {name}"


def test_every_hack_code_is_emitted_by_a_check_and_documented():
    emitted = {check.code for check in CHECKS.values()}
    assert emitted == set(HackCode)
    text = DOC.read_text()
    for layer in Layer:
        assert f"`{layer.value}`" in text


def test_no_other_hack_code_is_written_in_grade():
    """Every string the grader's code writes into ``hacks`` is a ``HackCode`` (a code written
    directly, outside the registry, would escape the threat model)."""
    grade = ROOT / "grade"
    found = subprocess.run(["grep", "-rhoE", r"hack\(\"[a-z_]+\"", str(grade)],
                           check=False, capture_output=True, text=True).stdout.split()
    codes = {re.search(r'"([a-z_]+)"', item).group(1) for item in found}
    assert codes <= {code.value for code in HackCode}, codes - {c.value for c in HackCode}


def test_a_changed_guarded_file_is_a_finding():
    verdict = Verdict(compiled=True, correct=True, hacks=[]).to_dict()
    amend(verdict, "guarded_files_unchanged", ["/x/worker.py"])
    assert verdict["hacks"] == ["file_tamper"] and not verdict["correct"]
    assert verdict["hack_details"] == {"file_tamper": "changed: /x/worker.py"}
    assert verdict["findings"] == [{"code": "file_tamper", "check": "guarded_files_unchanged",
                                    "threat": "T-04", "layer": "process",
                                    "detail": "changed: /x/worker.py"}]
    assert amend(Verdict().to_dict(), "guarded_files_unchanged", [])["hacks"] == []


def test_a_verdict_row_without_findings_reads_back():
    old = {"compiled": True, "correct": False, "hacks": ["torch_compute"],
           "hack_details": {"torch_compute": "x"}}
    verdict = Verdict.from_dict(old)
    assert verdict.findings == [] and verdict.to_dict()["findings"] == []


@pytest.mark.parametrize("preset", ["strict", "library", "kernelbench"])
def test_presets_are_tables_of_switches(preset):
    from kernelmill.grade.policy import PRESET_SWITCHES, Policy

    policy = Policy(preset=preset)
    for name, value in PRESET_SWITCHES[preset].items():
        assert policy.switch(name) == value
    for check in CHECKS.values():
        if check.switch:
            policy.switch(check.switch)  # every switch a check names exists
