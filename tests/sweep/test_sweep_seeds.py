"""Issue 33: ``--seeds N`` (or a longer run.seeds) on a finished sweep extends it: the runs
already done are reused byte for byte and only the new seeds run; a different sweep is still
refused, and nothing in its directory changes."""

from __future__ import annotations

import csv
import json
import tomllib
from pathlib import Path

import pytest

from sim.cli import main

KINDS = '[sweep]\n"strategy.kind" = ["bsp", "asp"]\n'


@pytest.fixture
def config(tmp_path: Path, write_tiny_sweep) -> Path:
    return write_tiny_sweep(tmp_path / "exp.toml", KINDS)


def sweep_cli(config: Path, out: Path, *extra: str) -> int:
    return main(["sweep", str(config), "--out", str(out), "--no-plots", "--jobs", "1", *extra])


def read_results(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return [{k: v for k, v in row.items() if k != "wall_s"} for row in csv.DictReader(f)]


def files(out: Path) -> dict[str, bytes]:
    """Every file under ``out`` (but the lock) -> its bytes."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def runs(out: Path) -> dict[str, bytes]:
    return {k: v for k, v in files(out).items() if k.startswith("runs/")}


def test_extending_1_to_3_seeds_reuses_the_runs_and_equals_a_fresh_3_seed_sweep(
        tmp_path, capsys, config):
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    assert sweep_cli(config, out, "--seeds", "1") == 0
    before = runs(out)
    assert sorted({k.split("/")[1] for k in before}) == ["kind=asp_seed=0", "kind=bsp_seed=0"]
    capsys.readouterr()
    assert sweep_cli(config, out, "--seeds", "3") == 0
    printed = capsys.readouterr()
    assert "6 runs (4 ran, 2 already done, 0 failed)" in printed.out, printed.err
    after = runs(out)
    assert {k: after[k] for k in before} == before  # reused, byte for byte
    assert sweep_cli(config, fresh, "--seeds", "3") == 0
    assert read_results(out / "results.csv") == read_results(fresh / "results.csv")
    assert [r["run.seed"] for r in read_results(out / "results.csv")] == \
        ["0", "1", "2", "0", "1", "2"]
    assert sorted(runs(fresh)) == sorted(after)  # the same run directories and files
    assert tomllib.loads((out / "sweep.toml").read_text())["run"]["seeds"] == [0, 1, 2]
    assert json.loads((out / "sweep.json").read_text())["points"] == \
        json.loads((fresh / "sweep.json").read_text())["points"]
    # the same command again: nothing to do
    capsys.readouterr()
    assert sweep_cli(config, out, "--seeds", "3") == 0
    assert "(0 ran, 6 already done, 0 failed)" in capsys.readouterr().out
    # the saved definition reruns the extended sweep
    assert sweep_cli(out / "sweep.toml", out) == 0
    assert "(0 ran, 6 already done, 0 failed)" in capsys.readouterr().out
    assert runs(out) == after


def test_run_seeds_listing_more_seeds_extends_too(tmp_path, capsys, config):
    out = tmp_path / "out"
    assert sweep_cli(config, out, "--set", "run.seeds=[0]") == 0
    before = runs(out)
    capsys.readouterr()
    assert sweep_cli(config, out, "--set", "run.seeds=[0, 1]") == 0
    assert "(2 ran, 2 already done, 0 failed)" in capsys.readouterr().out
    assert {k: v for k, v in runs(out).items() if k in before} == before
    assert len(read_results(out / "results.csv")) == 4


def test_seeds_on_a_sweep_run_without_seeds_as_the_readme_says(tmp_path, capsys, config):
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    assert sweep_cli(config, out) == 0  # kind=bsp, kind=asp: run.seed 0
    before = runs(out)
    capsys.readouterr()
    assert sweep_cli(config, out, "--seeds", "2") == 0
    assert "4 runs (2 ran, 2 already done, 0 failed)" in capsys.readouterr().out
    after = runs(out)
    assert {k: after[k] for k in before} == before  # kept as they were
    for kind in ("bsp", "asp"):  # the same config: copied, not run again
        old = {k.split("/", 2)[2]: v for k, v in before.items() if f"/kind={kind}/" in k}
        new = {k.split("/", 2)[2]: v for k, v in after.items() if f"/kind={kind}_seed=0/" in k}
        assert new == old
    assert sweep_cli(config, fresh, "--seeds", "2") == 0
    assert read_results(out / "results.csv") == read_results(fresh / "results.csv")


def test_fewer_seeds_report_the_subset_and_keep_the_other_runs(tmp_path, capsys, config):
    out = tmp_path / "out"
    assert sweep_cli(config, out, "--seeds", "3") == 0
    three = read_results(out / "results.csv")
    before = runs(out)
    capsys.readouterr()
    assert sweep_cli(config, out, "--seeds", "2") == 0
    assert "4 runs (0 ran, 4 already done, 0 failed)" in capsys.readouterr().out
    assert read_results(out / "results.csv") == [r for r in three if r["run.seed"] != "2"]
    assert runs(out) == before  # the third seed's runs stay on disk
    kept = json.loads((out / "sweep.json").read_text())["kept"]
    assert [p["name"] for p in kept] == ["kind=bsp_seed=2", "kind=asp_seed=2"]
    assert sweep_cli(config, out, "--seeds", "3") == 0  # and are reused when asked again
    assert "6 runs (0 ran, 6 already done, 0 failed)" in capsys.readouterr().out
    assert read_results(out / "results.csv") == three
    assert runs(out) == before


@pytest.mark.parametrize(("extra", "message"), [
    (["--seeds", "3", "--set", "sweep.strategy.kind=[\"bsp\", \"ssp\"]"],
     "holds a different sweep (its point 2 is kind=asp_seed=0, here kind=bsp_seed=1)"),
    (["--seeds", "3", "--set", "sweep.cluster.workers=[2, 4]"], "holds a different sweep"),
    (["--seeds", "3", "--set", "run.iterations=11"],
     "same grid but run kind=bsp_seed=0 has a different config"),
    (["--set", "run.iterations=11"], "same grid but none of its runs has the config"),
    (["--seeds", "2", "--set", "run.seed=5"], "same grid but none of its runs has the config"),
])
def test_a_different_sweep_is_still_refused_and_nothing_changes(tmp_path, capsys, config,
                                                                 extra, message):
    out = tmp_path / "out"
    assert sweep_cli(config, out, "--seeds", "1") == 0
    before = files(out)
    capsys.readouterr()
    assert sweep_cli(config, out, *extra) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert files(out) == before
