"""The layering the import contracts promise, checked at run time as well as statically.

Worker-side modules run inside a GPU worker on a bare image: importing one in a fresh interpreter
must not load any of the pipeline's heavier dependencies. The module list is the one the
import-linter contract in pyproject.toml names, so the two cannot drift apart.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover — Python 3.10
    tomllib = pytest.importorskip("tomli")


def _contracts() -> list[dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return config["tool"]["importlinter"]["contracts"]


def _worker_contract() -> dict:
    (contract,) = [c for c in _contracts() if c["type"] == "forbidden"]
    return contract


WORKER = _worker_contract()


@pytest.mark.parametrize("module", WORKER["source_modules"])
def test_worker_module_imports_nothing_forbidden(module):
    code = (f"import sys, json; import {module}; "
            f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert module.split(".")[0] in loaded
    assert not loaded & set(WORKER["forbidden_modules"]), loaded & set(WORKER["forbidden_modules"])


def test_layers_name_every_stage_folder():
    """Every folder that is a package of its own sits in the layers contract."""
    (layers,) = [c for c in _contracts() if c["type"] == "layers"]
    named = {name.strip() for layer in layers["layers"] for name in layer.split("|")}
    packages = {f"kernelmill.{d.name}" for d in ROOT.iterdir()
                if (d / "__init__.py").exists() and d.name not in ("data", "tests")}
    assert packages == named


def test_core_imports_no_stage():
    code = ("import sys, pkgutil, importlib, kernelmill.core as c\n"
            "for m in pkgutil.iter_modules(c.__path__): importlib.import_module('kernelmill.core.' + m.name)\n"
            "print(sorted({n.split('.')[1] for n in sys.modules if n.startswith('kernelmill.')}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "['core']"
