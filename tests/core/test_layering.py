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
    (contract,) = [c for c in _contracts() if c["type"] == "forbidden"
                   and c["name"].startswith("worker-side modules")]
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


def test_every_module_a_worker_loads_is_under_the_contract():
    """What runs inside a worker is what its task modules import: every kernelmill module they
    load (package ``__init__`` files aside) must be one the forbidden contract checks."""
    imports = "".join(f"import {m}\n" for m in WORKER["source_modules"])
    code = (f"import sys, json\n{imports}"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('kernelmill.'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    packages = {m for m in loaded if m.count(".") == 1}
    sources = set(WORKER["source_modules"])
    # a source module that is a package covers its submodules (import-linter's as_packages)
    uncovered = {m for m in loaded - packages
                 if not any(m == s or m.startswith(s + ".") for s in sources)}
    assert not uncovered, uncovered


def test_worker_tasks_live_in_contract_modules():
    """The task targets the parents hand to workers (``"module:function"``) are contract modules."""
    import re

    targets = set()
    for path in [*(ROOT / "validate").glob("*.py"), *(ROOT / "grade").glob("*.py")]:
        targets |= set(re.findall(r'"(kernelmill\.[a-z_.]+):[a-z_]+"', path.read_text()))
    assert targets and targets <= set(WORKER["source_modules"]), targets


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


def test_every_package_folder_is_installed():
    """setuptools installs the packages pyproject.toml lists, no more: every folder with an
    ``__init__.py`` under a stage folder is listed, with its folder (a missing one installs a
    kernelmill that fails on import)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    tools = config["tool"]["setuptools"]
    folders = {}
    for init in ROOT.glob("*/**/__init__.py"):
        folder = init.parent.relative_to(ROOT)
        if folder.parts[0] in ("tests", "build", "benchmarks", "scripts") or \
                folder.parts[0].startswith("."):
            continue
        folders["kernelmill." + ".".join(folder.parts)] = folder.as_posix()
    assert set(tools["packages"]) >= set(folders), set(folders) - set(tools["packages"])
    assert {k: tools["package-dir"].get(k) for k in folders} == folders
