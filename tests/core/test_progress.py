"""Progress off a terminal keeps ticking while no item finishes, naming what runs (issue 49)."""
from __future__ import annotations

import time

from kernelmill.core.progress import track


def _slow(n: int, seconds: float):
    for i in range(n):
        time.sleep(seconds)
        yield i


def test_progress_ticks_and_names_what_runs_while_an_item_is_slow(capsys):
    got = list(track(_slow(1, 1.0), total=1, description="validate", every_s=0.2,
                     status=lambda: "einsum_bmm_softshrink 1s"))
    assert got == [0]
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("validate")]
    assert len(lines) >= 2  # several lines before the only item came back
    assert lines[0].startswith("validate: 0/1 (")
    assert lines[0].endswith("; running: einsum_bmm_softshrink 1s")


def test_progress_ticks_without_a_status_too(capsys):
    list(track(_slow(1, 1.0), total=1, description="synth", every_s=0.2))
    lines = capsys.readouterr().err.splitlines()
    assert any(line.startswith("synth: 0/1 (") for line in lines)
