"""Every command hint the dataset card, the report and the build's summary print names options
that exist (issue 49, item 5): each `--flag` is accepted by the `kernelmill SUBCOMMAND` named
before it on the same line, and a flag that names no command is a hint nobody can follow. Also:
one build folder name everywhere."""
from __future__ import annotations

import argparse
import html
import re
from pathlib import Path

from kernelmill.app.build import next_steps
from kernelmill.app.cli import build_parser, main
from kernelmill.app.config import BuildConfig, parse_toml
from kernelmill.app.report import write_report
from kernelmill.core.interop import problem_files, record_from_file
from kernelmill.core.record import Record
from kernelmill.core.store import JsonlWriter
from kernelmill.data import DATA_DIR
from kernelmill.splits.publish import publish_dataset
from kernelmill.validate.runner import INDUCTOR_OFF_ON_CPU

ROOT = Path(__file__).resolve().parents[2]
COMMAND = re.compile(r"\bkernelmill ([a-z][a-z-]*)")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def bad_hints(text: str) -> list[str]:
    """Lines whose `--flag` is not an option of the command named before it on the line."""
    parsers = subcommands()
    bad = []
    for line in text.splitlines():
        commands = [(m.start(), m.group(1)) for m in COMMAND.finditer(line)]
        for flag in FLAG.finditer(line):
            named = [name for at, name in commands if at < flag.start()]
            if not named:
                bad.append(f"{flag.group()} names no command: {line.strip()}")
            elif named[-1] not in parsers:
                bad.append(f"no command `kernelmill {named[-1]}`: {line.strip()}")
            elif flag.group() not in parsers[named[-1]]._option_string_actions:
                bad.append(f"`kernelmill {named[-1]}` has no {flag.group()}: {line.strip()}")
    return bad


def html_text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def cpu_validation(i: int) -> dict:
    return {"device": "cpu", "torch": "2.13.0", "dtype": "float32", "passed": True,
            "eager_ms": 1.0 + i, "atol": 1e-4, "rtol": 1e-4, "resized": 0.25,
            "difficulty": {"score": 0.1, "tier": "easy"},
            "checks": {"deterministic": {"passed": True, "value": 0, "detail": "bitwise"},
                       "inductor": {"passed": None, "value": None,
                                    "detail": INDUCTOR_OFF_ON_CPU}}}


def test_the_checker_catches_the_old_hint():
    assert bad_hints("| `inductor` | 0 | 0 | 3 | skipped on cpu (enable with --inductor) |")
    assert bad_hints("kernelmill build --out runs/demo --inductor")
    assert not bad_hints("kernelmill validate problems.jsonl --out v.jsonl --inductor")


def test_card_report_and_summary_hints_name_options_that_exist(tmp_path, seeds_dir):
    build = tmp_path / "build"
    records = [Record.from_dict({**record_from_file(p).to_dict(),
                                 "validation": cpu_validation(i), "cluster": i % 2})
               for i, p in enumerate(problem_files(seeds_dir)[:8])]
    curated = build / "curated.jsonl"
    build.mkdir()
    with JsonlWriter(curated) as writer:
        for record in records:
            writer.write(record)
    assert main(["split", str(curated), "--out", str(build / "splits"), "--against",
                 str(seeds_dir), "--keep-contaminated"]) == 0
    publish_dataset(build / "splits", build / "dataset")
    card = (build / "dataset" / "README.md").read_text(encoding="utf-8")
    report = html_text(write_report(build).read_text(encoding="utf-8"))
    assert "kernelmill validate --inductor" in card and "kernelmill validate --inductor" in report
    summary = "\n".join(next_steps(build / "dataset", build / "report.html"))
    for name, text in (("card", card), ("report", report), ("summary", summary)):
        assert bad_hints(text) == [], name


def test_one_build_folder_name_everywhere():
    default = BuildConfig().out
    assert parse_toml(DATA_DIR / "build.toml")["out"] == default == "runs/demo"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"--out {default}" in readme
    # every dataset, split or report path the README names lives in that one folder
    named = set(re.findall(r"[\w./-]+/(?=dataset\b|splits/\w+\.jsonl|report\.html)", readme))
    assert named == {f"{default}/"}, named


def test_readme_install_lines_work_from_a_clone():
    """kernelmill is not on PyPI: an install line names the clone (`-e '.[extra]'`) and only
    extras that pyproject.toml declares (issue 49, item 6)."""
    import tomllib

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    lines = [m.group(0) for m in re.finditer(r"pip install [^`\n&)]*", readme)]
    assert lines
    for line in lines:
        assert "kernelmill" not in line, line
    named = re.findall(r"pip install -e '\.\[([\w,]+)\]'", readme)
    assert {"dev", "trl"} <= set(named)
    assert all(extra in extras for group in named for extra in group.split(",")), named
