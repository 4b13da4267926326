"""``kernelmill --version``, and a mistyped flag of a subcommand answered with that subcommand's
usage (argparse alone prints the top-level usage)."""
from importlib.metadata import version

import pytest
from kernelmill.app.cli import main


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"kernelmill {version('kernelmill')}"


@pytest.mark.parametrize("argv, usage", [
    (["grade", "--refrence", "r.py"], "usage: kernelmill grade"),
    (["publish", "split", "--out", "ds", "--nmae", "x"], "usage: kernelmill publish"),
    (["--bogus"], "usage: kernelmill [-h]"),
])
def test_unknown_flag_prints_the_subcommands_usage(argv, usage, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage)
    assert f"unrecognized arguments: {argv[-2] if argv[0] != '--bogus' else '--bogus'}" in err
