"""The mine stage end to end on the fixture package: problems that run with torch alone,
provenance, one rejection with its reason per bad input, resumability; torchvision when its
files are present. One mining run is shared by the module (probing runs in harness workers)."""
from __future__ import annotations

import ast
import importlib.util
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import FIXTURES
from kernelmill.core.problem import check_source
from kernelmill.core.store import read_jsonl, read_records
from kernelmill.synth.resize import ResizeError, shrink_for_cpu
from kernelmill.validate.mining import MineOptions, mine, rejected_path

PACKAGE = FIXTURES / "minefix"
CONFIG = MineOptions(job_s=3.0, workers=2, batch=8)

pytestmark = pytest.mark.slow  # one shared mining run: ~20 s on 2 cores


@pytest.fixture(scope="module")
def mined(tmp_path_factory):
    out = tmp_path_factory.mktemp("mine") / "mined.jsonl"
    stats, table = mine([str(PACKAGE), "kernelmill_no_such_package_xyz"], out, CONFIG,
                        show_table=False)
    records = list(read_records(out))
    rejected = list(read_jsonl(rejected_path(out)))
    return {"out": out, "stats": stats, "table": table, "records": records,
            "rejected": rejected}


def _imported(source: str) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots.add((node.module or "").split(".")[0] if not node.level else ".")
    return roots


def _by_name(mined):
    return {r.name: r for r in mined["records"]}


def test_mining_the_fixture_writes_its_modules_and_functions(mined):
    names = set(_by_name(mined))
    assert {"ConvBlock", "GatedMLP", "ConfigBlock", "RMSNorm", "Projection", "smooth_l1",
            "VersionGated", "SpecGated"} <= names
    # a base from a missing package (a torch-only stand-in), a lazy relative import, a mixin
    # from a missing package beside a torch layer
    assert {"TinyEncoder", "LazyNorm", "HubLinear"} <= names
    assert "class MinedBase(nn.Module):" in _by_name(mined)["TinyEncoder"].source
    assert _by_name(mined)["TinyEncoder"].provenance["mined"]["standin_bases"]
    for record in mined["records"]:
        problem = check_source(record.source, name=record.name)
        assert problem.category == record.category
        assert _imported(record.source) <= {"torch", "math", "typing", "dataclasses", "logging",
                                            "__future__"}
    row = mined["table"][str(PACKAGE)]
    assert row["found"] >= 13 and row["written"] == len(mined["records"])
    assert row["written"] + row["rejected"] == row["found"] + 1  # + the unparsable module


def test_every_bad_input_is_one_rejection_with_its_reason(mined):
    reasons = {r["qualname"] if "qualname" in r else r["key"]: r["reason"]
               for r in mined["rejected"]}
    assert reasons["minefix.needs_dep.UsesMissingLib"] == "missing dependency"
    assert reasons["minefix.needs_dep.ImportsInForward"] == "missing dependency"
    # a helper importing a missing package on a path forward does not take: no rejection
    assert "minefix.needs_dep.OptionalBackend" not in reasons
    optional = _by_name(mined)["OptionalBackend"].source
    assert "raise ModuleNotFoundError(\"No module named 'another_missing_lib'\")" in optional
    assert _imported(optional) <= {"torch", "__future__"}
    # a registry entry whose code needs a missing package is left out, with that code
    dispatching = _by_name(mined)["Dispatching"].source
    assert '"plain": _plain' in dispatching and "_vendor" not in dispatching
    assert "ModuleNotFoundError" not in dispatching
    assert reasons["minefix.hang.Spin"] == "probe timeout"
    assert reasons["minefix.hang.Hog"] == "probe OOM"
    giant = next(r for r in mined["rejected"] if r.get("qualname") == "minefix.hang.Giant")
    assert giant["reason"] == "too large" and "4,295,032,832 parameter" in giant["detail"]
    assert giant["seconds"] < 5  # counted on the meta device, never allocated
    assert reasons["minefix.blocks.NoisyBlock"] == "nondeterministic"
    assert reasons[f"{PACKAGE}:minefix.broken"] == "parse error"
    assert reasons["kernelmill_no_such_package_xyz:"] == "not installed"
    for row in mined["rejected"]:
        assert row["package"] and row["detail"]
        if row["reason"] not in ("not installed",):
            assert row["file"].endswith(".py")


def test_provenance_of_every_record(mined):
    record = _by_name(mined)["GatedMLP"]
    prov = record.provenance
    assert prov["generator"] == "mine" and prov["seed"] == record.id
    m = prov["mined"]
    assert m["package"] == "minefix" and m["license"] == "MIT License"
    assert m["qualname"] == "minefix.blocks.GatedMLP" and m["file"] == "blocks.py"
    assert m["line"] == 24 and len(m["content_sha256"]) == 16 and m["kind"] == "class"
    # the torch the version checks in gathered code were answered for
    from importlib.metadata import version

    assert m["answered_for_torch"] == version("torch")
    assert m["sizing"]["factor"] is not None and m["sizing"]["est_ms"] <= CONFIG.max_ms
    assert m["sizing"]["in_band"] is (CONFIG.min_ms <= m["sizing"]["est_ms"])
    assert _by_name(mined)["ConfigBlock"].source.count("MinedConfig(**CONFIG)") == 1


def test_mined_sources_run_with_only_torch(mined, tmp_path):
    """Each source, shrunk, runs in a fresh isolated interpreter (no PYTHONPATH, no cwd on the
    path) that never imports the fixture package nor kernelmill."""
    folder = tmp_path / "sources"
    folder.mkdir()
    for i, record in enumerate(mined["records"]):
        try:
            source = shrink_for_cpu(record.source).source
        except ResizeError:
            source = record.source
        (folder / f"p{i}.py").write_text(source)
    script = textwrap.dedent(f"""
        import pathlib, sys, torch, types
        for path in sorted(pathlib.Path({str(folder)!r}).glob("*.py")):
            module = types.ModuleType("mined")  # registered, as the validator loads a problem
            sys.modules["mined"] = module
            exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
            ns = module.__dict__
            model = ns["Model"](*ns["get_init_inputs"]())
            with torch.no_grad():
                out = model(*ns["get_inputs"]())
            assert isinstance(out, torch.Tensor) and torch.isfinite(out).all(), path
        bad = [m for m in sys.modules if m.split(".")[0] in ("minefix", "kernelmill")]
        assert not bad, bad
        print("ran", len(list(pathlib.Path({str(folder)!r}).glob("*.py"))))
    """)
    proc = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == f"ran {len(mined['records'])}"


def test_a_killed_run_resumes_without_loss_or_duplicates(mined, tmp_path):
    out = tmp_path / "mined.jsonl"
    lines = mined["out"].read_bytes().splitlines(keepends=True)
    out.write_bytes(b"".join(lines[:3]) + lines[3][:50])  # killed while writing the 4th
    rejected = rejected_path(mined["out"]).read_bytes().splitlines(keepends=True)
    rejected_path(out).write_bytes(b"".join(r for r in rejected if b"hang.Spin" in r))
    _, table = mine([str(PACKAGE)], out, CONFIG, show_table=False)
    assert table[str(PACKAGE)]["resumed"] == 4  # 3 records + the hanging module, not redone
    ids = [r.id for r in read_records(out)]
    assert len(ids) == len(set(ids))
    assert sorted(ids) == sorted(r.id for r in mined["records"])
    keys = [r["key"] for r in read_jsonl(rejected_path(out))]
    assert len(keys) == len(set(keys))
    assert set(keys) == {r["key"] for r in mined["rejected"]
                         if not r["key"].startswith("kernelmill_no_such")}


def test_permissive_filter_rejects_an_unlicensed_folder(tmp_path):
    folder = tmp_path / "nolicense"
    shutil.copytree(PACKAGE, folder, ignore=shutil.ignore_patterns("LICENSE", "__pycache__"))
    out = tmp_path / "m.jsonl"
    _, table = mine([str(folder)], out, MineOptions(licenses="permissive"), show_table=False)
    assert table[str(folder)]["rejected: license"] == 1 and not out.exists() or \
        not out.read_text()


def _torchvision_files() -> Path | None:
    spec = importlib.util.find_spec("torchvision")  # finds, never imports
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@pytest.mark.skipif(_torchvision_files() is None, reason="torchvision's files are not installed")
def test_torchvision_is_mined_from_its_files(tmp_path):
    out = tmp_path / "tv.jsonl"
    _, table = mine(["torchvision.ops"], out, MineOptions(limit=12, job_s=5.0),
                    show_table=False)
    row = table["torchvision.ops"]
    assert row["found"] - row["not processed (limit)"] == 12 and row["written"] >= 1, dict(row)
    for record in read_records(out):
        assert "torchvision" not in _imported(record.source) and "." not in \
            _imported(record.source)
        assert record.provenance["mined"]["package"] == "torchvision"
        assert record.provenance["mined"]["source"] == "torchvision.ops"
        assert json.dumps(record.to_dict())


def _build(source: str):
    import torch

    ns: dict = {"__name__": "mined"}
    exec(compile(source, "<mined>", "exec"), ns)  # noqa: S102 — the fixture's own problem
    torch.manual_seed(0)
    return ns["Model"](*ns["get_init_inputs"]()), ns


def test_batchnorm_running_statistics_are_drawn_so_it_is_no_dead_branch(mined):
    """Eval-mode BatchNorm with the default running statistics (mean 0, variance 1) is an
    identity the validator's no_dead_branches flags; a mined problem draws them, seeded."""
    import torch
    from kernelmill.validate.realcode import submodule_bypass

    record = _by_name(mined)["ConvBlock"]
    assert record.provenance["mined"]["probe"]["running_stats"] == 1
    assert "_mined_running_stats(self.mined)" in record.source
    assert "_mined_running_stats" not in _by_name(mined)["GatedMLP"].source  # no BN there
    source = shrink_for_cpu(record.source).source
    model, ns = _build(source)
    again, _ = _build(source)
    bn = model.mined.bn
    assert bn.running_mean.abs().min() > 0 and (bn.running_var - 1).abs().max() > 0.05
    assert torch.equal(bn.running_mean, again.mined.bn.running_mean)  # deterministic
    assert torch.equal(bn.running_var, again.mined.bn.running_var)

    class GeneratorsDrawOnTheirDevice(torch.overrides.TorchFunctionMode):
        """As CUDA does: a draw on the default device with another device's generator fails
        (the meta device, standing in for the GPU here, would let it pass)."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            gen = kwargs.get("generator")
            if gen is not None and kwargs.get("device") is None and \
                    torch.get_default_device().type != gen.device.type:
                raise RuntimeError(f"Expected a '{torch.get_default_device().type}' device "
                                   f"type for generator but found '{gen.device.type}'")
            return func(*args, **kwargs)

    # as the validator builds on a GPU: under a device context
    with torch.device("meta"), GeneratorsDrawOnTheirDevice():
        placed, _ = _build(source)
    assert {t.device.type for t in placed.state_dict().values()} == {"meta"}
    torch.manual_seed(1)
    inputs = ns["get_inputs"]()
    with torch.no_grad():
        ref = [model(*[x.clone() for x in inputs])]
    found = submodule_bypass(model, inputs, ref, 7, 1e-4, 3)
    assert not any(label.startswith("mined.bn ") for label in found["dead"]), found
    bn.reset_running_stats()  # the default statistics: the check must see the dead branch
    with torch.no_grad():
        ref = [model(*[x.clone() for x in inputs])]
    found = submodule_bypass(model, inputs, ref, 7, 1e-4, 3)
    assert any(label.startswith("mined.bn ") for label in found["dead"]), found


def test_a_config_field_left_none_gets_a_size_by_its_name(mined):
    """TinyConfig's ``head_dim = None`` (packages derive it later): the probe's first
    construction fails on it, so sized fields left None get sizes, and the source keeps them."""
    record = _by_name(mined)["HeadsBlock"]
    assert record.provenance["mined"]["probe"]["config_set"] == {"head_dim": "16"}
    assert "'head_dim': 16," in record.source
    model, _ = _build(shrink_for_cpu(record.source).source)
    assert model.mined.head_dim == 16 and model.mined.heads == 4


def test_a_candidate_is_counted_on_the_meta_device_before_it_is_built():
    """Parameters past the limit are found with nothing allocated; a lazy module (no sizes
    before its first forward) and a constructor drawing from Python's random are built as
    they are, that draw unrepeated."""
    import random

    from kernelmill.validate import mine_worker as W
    from torch import nn

    class Wide(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(1 << 15, 1 << 14)

    class Lazy(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.LazyLinear(8)
            self.gate = random.random()

    probe = W._Probe({"dims": {}, "init": []})
    with pytest.raises(W.TooLarge, match="536,887,296 parameter"):
        probe._fits(Wide, [])
    assert W.classify(W.TooLarge("x")) == "too large"
    state = random.getstate()
    probe._fits(Lazy, [])
    assert random.getstate() == state


def test_tuple_inputs_index_ranges_and_forward_config_fields_are_probed(mined):
    """A ``(cos, sin)`` pair at the module's head width (optional: passed by keyword), a
    pair whose last dimension the error gives, a tensor the forward unpacks made a tuple,
    indices drawn below a small table's size, a config field only the forward reads: each
    problem takes its tuples as separate tensors and runs."""
    by_name = _by_name(mined)
    sources = {name: by_name[name].source for name in (
        "RotaryAttention", "RotaryMix", "ScaledRotary", "ExpertMix", "ConfigOutputs")}
    assert "position_embeddings=(position_embeddings_0, position_embeddings_1)" in \
        sources["RotaryAttention"]
    assert "position_embeddings_1 = torch.randn(BATCH, SEQ_LEN, 16)" in \
        sources["RotaryAttention"]  # head_dim: 64 // 4
    assert "self.mined(x, (freqs_0, freqs_1))" in sources["RotaryMix"]
    assert "freqs_0 = torch.randn(BATCH, SEQ_LEN, 4)" in sources["RotaryMix"]
    assert "(freqs_0, freqs_1, freqs_2)" in sources["ScaledRotary"]
    assert "torch.randint(0, 2, (BATCH, SEQ_LEN))" in sources["ExpertMix"]
    probe = by_name["ConfigOutputs"].provenance["mined"]["probe"]
    assert "'output_router_logits': None," in sources["ConfigOutputs"], probe
    for name, source in sources.items():
        try:
            source = shrink_for_cpu(source).source
        except ResizeError:
            pass
        model, ns = _build(source)
        out = model(*ns["get_inputs"]())
        assert out.isfinite().all(), name
