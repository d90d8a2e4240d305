"""A command line that explains itself (issue 47, item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim import cli
from sim.commands.list import LISTS
from sim.commands.plot import kinds_epilog
from sim.names import close_match
from sim.plots.kinds import KIND_LINES, KINDS

ROOT = Path(__file__).resolve().parents[2]


def test_the_top_level_help_speaks_to_users(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "parses, calls the library" not in out
    assert "simulated cluster" in out and "python -m sim run experiments/quickstart.toml" in out


def test_list_names_every_category():
    help_text = cli.COMMANDS["list"][1]
    assert all(name in help_text for name in LISTS)


def test_plot_kinds_are_each_described_in_the_help():
    assert set(KIND_LINES) == set(KINDS)
    epilog = kinds_epilog()
    assert all(f"  {kind} " in epilog for kind in KINDS)


def test_a_bad_set_value_names_the_override(capsys):
    config = ROOT / "experiments" / "quickstart.toml"
    assert cli.main(["run", str(config), "--set", "cluster.workers=abc"]) == 2
    err = capsys.readouterr().err
    assert "--set cluster.workers=abc" in err and err.count("\n") == 1


def test_did_you_mean_only_for_a_typo(tmp_path, capsys):
    (tmp_path / "syntax.toml").write_text("")
    assert cli.main(["run", str(tmp_path / "missing.toml")]) == 2
    assert "did you mean" not in capsys.readouterr().err
    assert close_match("quikstart", ["quickstart", "scaling"]) == "quickstart"
    assert close_match("missing.toml", ["syntax.toml"]) is None
