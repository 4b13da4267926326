"""Mining's static side on the fixture package: discovery, the libcst index, candidates,
gathering into one self-contained source, first guesses, sizing plans, categories. No worker."""
from __future__ import annotations

import ast

import pytest
from conftest import FIXTURES
from kernelmill.synth.mine.candidates import Candidate, find_candidates
from kernelmill.synth.mine.gather import Gatherer, GatherError
from kernelmill.synth.mine.index import Definition, ModuleIndex, PackageIndex
from kernelmill.synth.mine.render import categorize
from kernelmill.synth.mine.sources import SourceError, discover, is_permissive
from kernelmill.synth.mine.spec import guess_class, guess_function
from kernelmill.synth.resize import size_plans

PACKAGE = FIXTURES / "minefix"


@pytest.fixture(scope="module")
def index() -> PackageIndex:
    return PackageIndex(discover(str(PACKAGE)))


def test_discover_reads_a_folder_with_its_license_and_refuses_the_uninstalled():
    source = discover(str(PACKAGE))
    assert source.package == "minefix" and source.kind == "folder"
    assert source.license == "MIT License" and source.permissive
    assert {p.name for p in source.files} >= {"blocks.py", "layers.py", "broken.py"}
    with pytest.raises(SourceError, match="not installed"):
        discover("kernelmill_no_such_package_xyz")
    assert not is_permissive("GPL-3.0") and is_permissive("Apache-2.0") and \
        not is_permissive(None)


def test_names_resolve_across_files_through_re_exports(index):
    found = index.resolve("minefix", "GatedMLP")
    assert isinstance(found, Definition) and found.module == "minefix.blocks"
    assert found.line == 24
    assert index.resolve_dotted("minefix.blocks", "layers.DEFAULT_EPS").module == "minefix.layers"


def test_candidates_modules_with_forward_tensor_functions_and_parse_errors(index):
    items = list(find_candidates(index))
    names = {c.name for c in items if isinstance(c, Candidate)}
    assert {"ConvBlock", "GatedMLP", "ConfigBlock", "RMSNorm", "Projection", "smooth_l1",
            "rms", "Spin"} <= names
    assert "_private_helper" not in names and "TinyConfig" not in names
    errors = [m for m in items if isinstance(m, ModuleIndex)]
    assert [m.name for m in errors] == ["minefix.broken"] and "parse error" in errors[0].error


def test_gathered_code_is_self_contained(index):
    gathered = Gatherer(index).gather(index.resolve("minefix", "GatedMLP"))
    tree = ast.parse(gathered.code)
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    assert {"GatedMLP", "RMSNorm", "rms", "tanh_gelu"} <= defined
    assert "DEFAULT_EPS = 1e-6" in gathered.code and "GELU_SCALE" in gathered.code
    assert "minefix" not in gathered.code and "from ." not in gathered.code
    assert "layers.RMSNorm" not in gathered.code  # the chain became the gathered name
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) \
                else [node.module]
            assert all(n.split(".")[0] in ("torch", "math", "typing", "__future__")
                       for n in names), names


def test_a_missing_third_party_dependency_is_a_gather_rejection(index):
    with pytest.raises(GatherError) as info:
        Gatherer(index).gather(index.resolve("minefix.needs_dep", "UsesMissingLib"))
    assert info.value.label == "missing dependency" and "fancy_missing_lib" in info.value.detail


def test_guesses_read_signatures_and_shrink_config_defaults(index):
    guess = guess_class(index, index.resolve("minefix", "ConfigBlock"))
    assert guess.config["hidden_size"] == "64" and guess.config["intermediate_size"] == "128"
    assert guess.init == [{"name": "config", "kw": False, "options": ["MinedConfig(**CONFIG)"]}]
    assert guess.inputs[0]["name"] == "hidden_states" and guess.inputs[0]["ranks"][0] == "3d"
    conv = guess_class(index, index.resolve("minefix", "ConvBlock"))
    assert [p["name"] for p in conv.init] == ["in_channels", "out_channels"]
    assert conv.inputs[0]["ranks"][0] == "4d"
    loss = guess_function(index.resolve("minefix.losses", "smooth_l1"))
    assert [(i["name"], i["kind"]) for i in loss.inputs] == [("input", "float"),
                                                             ("target", "target")]


def test_size_plans_are_resize_plans():
    source = ("import torch\nimport torch.nn as nn\nBATCH = 16\nSEQ_LEN = 64\n"
              "class Model(nn.Module):\n    def forward(self, x):\n        return x\n"
              "def get_inputs():\n    return [torch.randn(BATCH, SEQ_LEN, 32)]\n"
              "def get_init_inputs():\n    return []\n")
    plans = dict(size_plans(source, (0.5, 1.0, 4.0)))
    assert plans[1.0] == {"BATCH": 16, "SEQ_LEN": 64}
    assert plans[4.0] == {"BATCH": 64, "SEQ_LEN": 256}
    assert plans[0.5]["BATCH"] == 8


def test_categories_come_from_the_ops_the_forward_ran():
    assert categorize(["convolution", "_native_batch_norm_legit_no_training", "relu"],
                      "ConvBlock", "")[0] == "fused"
    assert categorize(["pow", "mean", "add", "rsqrt", "mul"], "RMSNorm", "")[0] == \
        "normalization"
    assert categorize(["addmm"], "Projection", "") == ("matmul", 1)
    assert categorize(["sub", "abs", "where", "mean"], "smooth_l1_loss", "")[0] == "loss"
    assert categorize([], "MaxPoolThing", "")[0] == "pooling"


def test_the_build_takes_mine_sources_and_synth_mutates_mined_records(tmp_path, seeds_dir):
    from kernelmill.app.config import BuildConfig, load_config
    from kernelmill.core.record import Record
    from kernelmill.core.store import JsonlWriter
    from kernelmill.synth.generate import synthesize

    assert BuildConfig().mine == [] and BuildConfig().mine_licenses == "any"
    toml = tmp_path / "build.toml"
    toml.write_text('mine = ["torchvision", "some/folder"]\nmine_licenses = "permissive"\n')
    config = load_config(toml)
    assert config.mine == ["torchvision", "some/folder"] and config.mine_licenses == "permissive"
    mined = tmp_path / "mined.jsonl"
    source = (seeds_dir / "gram_matrix.py").read_text()
    with JsonlWriter(mined) as writer:
        writer.write(Record.from_source(source, name="mined_gram", category="matmul",
                                        provenance={"generator": "mine"}))
    stats = synthesize(seeds_dir, tmp_path / "synth.jsonl", n=2, seed=0, mined=mined)
    assert stats.counts["mined seeds"] == 1


def test_environment_questions_are_answered_for_a_torch_only_problem(index, monkeypatch):
    """Version, availability and environment-variable checks are answered while gathering
    (the installed torch, no optional package, no variable set), so packaging, numpy and the
    optional library never reach the problem, and the default branch is the one kept."""
    import libcst as cst
    from kernelmill.synth.mine import environment

    monkeypatch.setattr(environment, "torch_version", lambda: ((2, 7), True))  # 2.7.0.dev
    def truth(text):
        return environment.truth(cst.parse_expression(text))

    assert truth('is_torch_greater_or_equal("2.7", accept_dev=True)') is True
    assert truth('is_torch_greater_or_equal("2.7")') is False  # a dev build is below 2.7.0
    assert truth('utils.is_torch_less_or_equal("2.6.1")') is False
    assert truth("is_torch_available() and not is_flash_attn_2_available()") is True
    assert truth("is_torch_xpu_available()") is False
    assert truth("is_torch_cuda_available()") is None  # not answered: left to the code
    assert truth("self.is_fancy_available()") is None  # a method, not a helper
    assert truth("'TIMM_FUSED_ATTN' in os.environ") is False
    assert truth("os.environ.get('X', 1)") is True and truth("os.getenv('X')") is False
    monkeypatch.undo()

    gathered = Gatherer(index).gather(index.resolve("minefix.compat", "VersionGated"))
    tree = ast.parse(gathered.code)
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names} | {n.module.split(".")[0] for n in ast.walk(tree)
                                     if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"torch", "__future__"}, gathered.code
    assert "_NEW_TORCH = True" in gathered.code and "_FUTURE_TORCH = False" in gathered.code
    assert "_SLOW = 0" in gathered.code and "os.environ" not in gathered.code
    assert "fast_op = None" in gathered.code
    assert "isinstance(x, torch.Tensor) and not False" in gathered.code
    assert "is_torch_greater_or_equal" not in gathered.code and "version" not in gathered.code


def test_a_helper_called_before_a_method_of_its_result_is_gathered(index):
    gathered = Gatherer(index).gather(index.resolve("minefix.compat", "SpecGated"))
    assert "def _centered(x):" in gathered.code and "class GateSpec:" in gathered.code
    assert "from dataclasses import dataclass" in gathered.code


def test_version_comparisons_and_registry_entries_from_missing_packages(index):
    """``version.parse(torch.__version__)...`` comparisons become their value for the installed
    torch (packaging never reaches the problem); a registry loses the entry whose value
    comes from a missing package and keeps the rest."""
    code = Gatherer(index).gather(index.resolve("minefix.compat", "RegistryNorm")).code
    assert "_GAIN = 2.0" in code and "_GAIN = 1.0" not in code and "version" not in code
    assert "_NORMS = dict(layer=nn.LayerNorm)" in code and "fancy" not in code.lower()


def _run_with_torch_only(code: str, build: str) -> object:
    """``code`` executed in a fresh namespace (torch only), then ``build``'s value."""
    namespace: dict = {}
    exec(compile(code + "\n\nRESULT = " + build + "\n", "<mined>", "exec"),  # noqa: S102
         namespace)
    return namespace["RESULT"]


def test_a_base_class_from_a_missing_package_becomes_a_torch_only_stand_in(index):
    """``TinyEncoder``'s base chain ends in a base whose saving needs an absent package: the
    chain is kept, that base is the stand-in, and the gathered code runs with torch alone."""
    import torch

    gatherer = Gatherer(index)
    gathered = gatherer.gather(index.resolve("minefix.pretrained", "TinyEncoder"))
    code = gathered.code
    assert "hub_missing_lib" not in code and "class PretrainedBase" not in code
    assert "class TinyPreTrainedModel(MinedBase):" in code and "upload" not in code
    assert [d.name for d in gathered.definitions] == ["TinyPreTrainedModel", "TinyEncoder"]
    config = ("type('Config', (), {'hidden_size': 8, 'intermediate_size': 16})()")
    model = _run_with_torch_only(code, f"TinyEncoder({config})")
    x = torch.randn(2, 3, 8)
    assert model.config.hidden_size == 8 and model.dtype == torch.float32
    out = model(x)
    assert torch.allclose(out, model.down(torch.relu(model.up(x))) + x)
    # the base alone is still no problem: its own closure needs the package
    assert gatherer.closure_error(index.resolve("minefix.pretrained", "PretrainedBase")
                                  ).label == "missing dependency"
    # a mixin from the missing package beside a torch layer is dropped
    layer = gatherer.gather(index.resolve("minefix.pretrained", "HubLinear"))
    assert "class HubLinear(nn.Linear):" in layer.code and "MinedBase" not in layer.code
    # both recorded: the problems are not the package's modules there
    assert gathered.standin_bases == {"minefix.pretrained.TinyPreTrainedModel":
                                      ["PretrainedBase"]}, gathered.standin_bases
    assert list(layer.dropped_bases) == ["minefix.pretrained.HubLinear"] and \
        not layer.standin_bases


def test_a_lazy_import_of_the_package_is_gathered_and_one_of_a_missing_package_is_not(index):
    import torch

    gatherer = Gatherer(index)
    code = gatherer.gather(index.resolve("minefix.pretrained", "LazyNorm")).code
    assert "from .layers" not in code and "import rms" not in code
    assert "def rms(x: torch.Tensor, eps: float = DEFAULT_EPS)" in code
    model = _run_with_torch_only(code, "LazyNorm(4)")
    x = torch.randn(3, 4)
    assert torch.allclose(model(x), x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
                          * 1.5)
    # a function-body import of a third-party package raises where it runs, as where the
    # package is not installed (installed or not: a problem runs with torch alone)
    code = gatherer.gather(index.resolve("minefix.needs_dep", "ImportsInForward")).code
    assert "import another_missing_lib" not in code
    model = _run_with_torch_only(code, "ImportsInForward()")
    with pytest.raises(ModuleNotFoundError, match="another_missing_lib"):
        model(x)


def test_a_function_body_import_of_a_name_the_module_binds_otherwise_is_left_to_fail(tmp_path):
    # ``forward`` imports ``act`` from one module while its own module binds ``act`` to
    # another: gathered code has one ``act``, so taking the import would run the other one
    # (relu for tanh) and pass any smoke run. Left as written, it fails where it runs.
    package = tmp_path / "shadowpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "slow.py").write_text("import torch\n\n\ndef act(x):\n    return torch.relu(x)\n")
    (package / "fast.py").write_text("import torch\n\n\ndef act(x):\n    return torch.tanh(x)\n")
    (package / "mods.py").write_text(
        "import torch\nfrom torch import nn\nfrom .slow import act\n\n\n"
        "class Shadow(nn.Module):\n    def forward(self, x):\n        from .fast import act\n"
        "        return act(x)\n")
    index = PackageIndex(discover(str(package)))
    code = Gatherer(index).gather(index.resolve("shadowpkg.mods", "Shadow")).code
    assert "from .fast import act" in code, code
    namespace = {"__name__": "mined_problem"}
    exec(compile(code, "mined_problem", "exec"), namespace)  # noqa: S102 — the mined code
    with pytest.raises(ImportError):
        namespace["Shadow"]()(__import__("torch").ones(2))


def test_a_candidate_gathers_the_same_code_whatever_was_gathered_before_it(tmp_path):
    # lazy imports are taken smallest closure first: sizes known for every one of them, not
    # only for those an earlier gathering happened to size
    package = tmp_path / "lazyorder"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "helpers.py").write_text(
        "def small(x):\n    return x + 1\n\n\ndef _b1(x):\n    return x * 3\n\n\n"
        "def _b2(x):\n    return _b1(x) - 1\n\n\ndef big(x):\n    return _b2(x) * 2\n")
    (package / "mods.py").write_text(
        "from torch import nn\n\n\nclass Warm(nn.Module):\n    def forward(self, x):\n"
        "        from .helpers import big\n        from .helpers import small\n"
        "        return big(x) + small(x)\n\n\nclass Target(nn.Module):\n"
        "    def forward(self, x):\n        from .helpers import small\n"
        "        from .helpers import big\n        return small(x) + big(x)\n")
    index = PackageIndex(discover(str(package)))
    target = index.resolve("lazyorder.mods", "Target")
    fresh = Gatherer(index).gather(target).code
    warmed = Gatherer(index)
    warmed.gather(index.resolve("lazyorder.mods", "Warm"))
    again = Gatherer(index)
    again.gather(target)
    assert warmed.gather(target).code == fresh == again.gather(target).code
    assert "def small" in fresh and "def big" in fresh


def test_a_tuple_of_tensors_is_one_input_and_an_optional_one_waits(index):
    """``tuple[torch.Tensor, torch.Tensor] | None = None`` (rotary ``position_embeddings``) is
    an optional tuple input, tried once the forward fails without it; an optional tuple of
    carried state (``past_key_value``) is not made; a required ``Tuple[...]`` is an input."""
    attention = guess_class(index, index.resolve("minefix.rotary", "RotaryAttention"))
    assert [(i["name"], i["kind"], i.get("count"), i.get("optional"))
            for i in attention.inputs] == [("hidden_states", "float", None, None),
                                           ("position_embeddings", "tuple", 2, True)]
    mix = guess_class(index, index.resolve("minefix.rotary", "RotaryMix"))
    assert [(i["name"], i["kind"], i.get("count")) for i in mix.inputs] == [
        ("x", "float", None), ("freqs", "tuple", 2)]


def test_methods_a_package_adds_to_logging_logger_come_with_a_stand_in(index):
    """The package's logging helper adds ``warning_once`` to ``logging.Logger`` when imported;
    a problem never imports it, so its loggers are ``MinedLogger``s that have the method, and
    the standard library's class is left alone."""
    import logging

    assert index.module("minefix.utils.logging").logger_methods == ["warning_once",
                                                                     "info_once"]
    code = Gatherer(index).gather(index.resolve("minefix.rotary", "RotaryAttention")).code
    assert "class MinedLogger(logging.Logger):" in code and "MinedLogger.get(" in code
    assert "logging.Logger.warning_once" not in code and "getLogger" not in code
    # transformers, once imported by another test of the run, patches the class itself: what
    # is checked is that running the problem leaves the class as it found it
    before = {name: logging.Logger.__dict__.get(name) for name in ("warning_once", "info_once")}
    ns: dict = {"__name__": "mined"}
    exec(compile(code, "<mined>", "exec"), ns)  # noqa: S102 — the fixture's own code
    assert type(ns["logger"]).__name__ == "MinedLogger"
    assert isinstance(ns["logger"], logging.Logger)
    assert {"warning_once", "info_once"} <= set(type(ns["logger"]).__dict__)  # its own methods
    ns["logger"].warning_once("once")
    ns["logger"].info_once("quiet")
    assert {name: logging.Logger.__dict__.get(name) for name in before} == before
