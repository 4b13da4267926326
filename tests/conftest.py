import os
import sys
from pathlib import Path

import pytest

# Triton must see this before it is first imported anywhere in the test process.
os.environ.setdefault("TRITON_INTERPRET", "1")
# A check that reads a worker fact its group does not declare fails (``grade.facts``).
os.environ.setdefault("KERNELMILL_STRICT_FACTS", "1")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture
def seeds_dir() -> Path:
    return ROOT / "data" / "seeds"


@pytest.fixture(autouse=True)
def _isolated_hf_home(tmp_path_factory, monkeypatch):
    """Hugging Face caches go to a temp folder: tests never touch the user's cache."""
    home = tmp_path_factory.getbasetemp() / "hf_home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _builtins_print_kept():
    """Each test leaves ``builtins.print`` as it found it. Ray's driver swaps it for its own
    (``ray.experimental.tqdm_ray.safe_print``) when a worker dies and back at shutdown. The
    grader's patch check compares against the print seen when the worker package was first
    imported in this process, so a swap left by one test reads as a patch in a later one."""
    import builtins

    before = builtins.print
    yield
    builtins.print = before


def run_cli(*args: str) -> "subprocess.CompletedProcess":
    import subprocess

    return subprocess.run([sys.executable, "-m", "kernelmill.app.cli", *args],
                          capture_output=True, text=True, timeout=600)
