"""Stages declare themselves once: the registry, the generated flags and the build keys agree."""
from __future__ import annotations

import dataclasses

import pytest

from kernelmill.app.cli import build_parser
from kernelmill.app.config import DEFAULT_CONFIG, BuildConfig, parse_toml
from kernelmill.app.stages import STAGES, stages
from kernelmill.core.errors import KernelmillError
from kernelmill.core.step import Step, build_key, default_of


def test_registry_names_each_stage_once_in_data_flow_order():
    names = [step.name for step in stages()]
    assert len(STAGES) == len(names) == len(set(names))
    assert names == ["import", "mine", "synth", "concat", "validate", "filter", "dedup", "cluster",
                     "split", "publish"]
    outputs = {step.output for step in stages()}
    for step in stages():  # every build input is the seeds folder or an earlier stage's output
        for name in step.inputs:
            assert name == "@seeds" or name in outputs, (step.name, name)


@pytest.mark.parametrize("step", stages(), ids=lambda s: s.name)
def test_build_keys_exist_with_the_same_default(step: Step):
    build_fields = {f.name: f for f in dataclasses.fields(BuildConfig)}
    for f in dataclasses.fields(step.config):
        key = build_key(f)
        if key is None:
            continue
        assert key in build_fields, f"{step.name}.{f.name} names unknown build key {key!r}"
        assert default_of(f) == default_of(build_fields[key]), (step.name, f.name)


def test_shipped_config_is_the_dataclass_defaults():
    shipped = parse_toml(DEFAULT_CONFIG)
    defaults = BuildConfig()
    for key, value in shipped.items():
        assert getattr(defaults, key) == value, key


@pytest.mark.parametrize("step", stages(), ids=lambda s: s.name)
def test_every_stage_is_a_subcommand_with_its_config_flags(step: Step, capsys):
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args([step.name, "--help"])
    text = capsys.readouterr().out
    for f in dataclasses.fields(step.config):
        if f.metadata.get("help") and "dict" not in str(f.type):
            assert "--" + f.name.replace("_", "-") in text, (step.name, f.name)


def test_build_help_shows_the_real_defaults(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["build", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    defaults = BuildConfig()
    assert f"(default {defaults.n_cpu})" in text and f"(default {defaults.n_gpu})" in text


def test_a_missing_optional_module_is_one_line_with_the_install_hint(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)
    validate = next(s for s in stages() if s.name == "validate")
    with pytest.raises(KernelmillError, match=r"stage validate needs ray: pip install"):
        validate.check(validate.config(backend="ray"))
    validate.check(validate.config(backend="local"))  # the local backend needs no extra
