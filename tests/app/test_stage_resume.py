"""A per-record stage run on its own resumes its --out only when the options are the same;
changed options start clean and say so, keeping the old output aside."""
from __future__ import annotations

import shutil

from conftest import ROOT, run_cli

from kernelmill.core.store import read_jsonl


def _seeds(tmp_path, n):
    folder = tmp_path / "seeds"
    folder.mkdir(exist_ok=True)
    for path in sorted((ROOT / "data" / "seeds").glob("*.py"))[:n]:
        shutil.copy2(path, folder / path.name)
    return folder


def test_same_options_resume_changed_options_start_clean(tmp_path):
    out = tmp_path / "problems.jsonl"
    folder = _seeds(tmp_path, 2)
    first = run_cli("import", str(folder), "--out", str(out), "--generator", "seed")
    assert first.returncode == 0, first.stderr
    assert "starting clean" not in first.stderr

    _seeds(tmp_path, 3)  # one more file, same options: appended to the same output
    again = run_cli("import", str(folder), "--out", str(out), "--generator", "seed")
    assert again.returncode == 0 and "resuming" in again.stderr
    rows = list(read_jsonl(out))
    assert len(rows) == 3 and {r["provenance"]["generator"] for r in rows} == {"seed"}

    changed = run_cli("import", str(folder), "--out", str(out), "--generator", "import")
    assert changed.returncode == 0
    assert "options changed (generator)" in changed.stderr and "starting clean" in changed.stderr
    assert {r["provenance"]["generator"] for r in read_jsonl(out)} == {"import"}
    kept = out.with_name(out.name + ".previous")
    assert len(list(read_jsonl(kept))) == 3  # nothing lost: the old output is set aside
