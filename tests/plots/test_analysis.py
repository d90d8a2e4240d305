"""sim.analysis: run and sweep directories as DataFrames, checked against the files on disk."""

from __future__ import annotations

import csv
import json
import math
import tempfile
import tomllib
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest

from sim import analysis
from sim.config import parse_override
from sim.errors import UserError
from sim.sweep import run_sweep

NAMES = ["kind=bsp-ps_seed=1", "kind=bsp-ps_seed=2", "kind=ssp_seed=1", "kind=ssp_seed=2"]


@pytest.fixture(scope="module")
def tiny(tiny_config_data) -> dict:
    """The shared tiny config (2 workers on a small Gaussian problem) with exponential
    compute times, 12 updates and an eval every 3, swept over bsp-ps and ssp (s = 1), two
    seeds each."""
    return tiny_config_data({"strategy.staleness": 1, "compute.distribution": "exponential",
                             "run.iterations": 12, "run.eval_every": 3, "run.seeds": [1, 2],
                             "sweep.strategy.kind": ["bsp-ps", "ssp"]})


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory, tiny: dict, write_toml) -> Path:
    """A 2 strategies x 2 seeds sweep, run in this process."""
    base = tmp_path_factory.mktemp("sweep")
    config = write_toml(base / "tiny.toml", tiny)
    report = run_sweep(config, base / "out", jobs=1, plots=False, progress=False)
    assert not report.failed
    return base / "out"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory, write_tiny_run) -> Path:
    """One asp run written the way ``sim run`` writes it."""
    out = tmp_path_factory.mktemp("run") / "asp"
    write_tiny_run(out, **{"strategy.kind": "asp"})
    return out


def summary(path: Path) -> dict:
    return json.loads((path / "summary.json").read_text())


def metrics(path: Path, kind: str) -> list[dict[str, str]]:
    with open(path / "metrics.csv", newline="") as f:
        return [row for row in csv.DictReader(f) if row["kind"] == kind]


# ---- load_results / load_runs --------------------------------------------------------------

def test_load_results_is_results_csv_with_typed_cells_and_run_paths(sweep_dir: Path) -> None:
    frame = analysis.load_results(sweep_dir)
    with open(sweep_dir / "results.csv", newline="") as f:
        raw = list(csv.DictReader(f))
    assert list(frame["run"]) == NAMES == [r["run"] for r in raw]
    assert list(frame.columns[:4]) == ["run", "path", "strategy.kind", "run.seed"]
    assert list(frame["path"]) == [str(sweep_dir / "runs" / n) for n in NAMES]
    assert list(frame["run.seed"]) == [1, 2, 1, 2]
    for row, name in zip(frame.itertuples(index=False), NAMES, strict=True):
        expected = summary(sweep_dir / "runs" / name)
        assert row.sim_time_s == expected["sim_time_s"]
        assert row.iterations == expected["iterations"] == 12
        assert row.final_loss == expected["final_loss"]
        assert row.diverged is False
    assert frame["staleness_max"].dtype == np.int64


def test_load_runs_of_a_run_holds_its_config_and_summary(run_dir: Path) -> None:
    frame = analysis.load_runs(run_dir)
    assert len(frame) == 1
    row = frame.iloc[0]
    expected = summary(run_dir)
    config = tomllib.loads((run_dir / "config.toml").read_text())
    assert (row["run"], row["path"], row["label"]) == ("asp", str(run_dir), "asp")
    assert row["strategy.kind"] == "asp" and row["cluster.workers"] == 3
    assert row["run.eval_every"] == 4 and row["workload.samples"] == 512
    assert row["workload.hidden"] == tuple(config["workload"]["hidden"])
    for key in ("sim_time_s", "iterations", "final_loss", "samples_per_s", "staleness_mean",
                "compute_s", "comm_s", "wait_s", "seed"):
        assert row[key] == expected[key], key
    assert "workers" not in frame.columns  # per-worker lists are left out
    assert row["samples_per_update"] == pytest.approx(
        expected["samples_per_s"] * expected["sim_time_s"] / expected["iterations"])
    assert row["samples_per_update"] == pytest.approx(32)  # asp: one gradient of batch 32


def test_load_runs_expands_sweeps_in_order_and_labels_strategies(sweep_dir: Path,
                                                                 run_dir: Path) -> None:
    frame = analysis.load_runs(sweep_dir, [run_dir])
    assert list(frame["run"]) == [*NAMES, "asp"]
    assert list(frame["label"]) == ["bsp-ps", "bsp-ps", "ssp s=1", "ssp s=1", "asp"]
    assert list(frame["run.seed"]) == [1, 2, 1, 2, 0]
    # bsp-ps: each update averages 2 workers' batches of 8; ssp: one gradient per update
    assert list(frame["samples_per_update"][:4]) == pytest.approx([16, 16, 8, 8])
    assert analysis.strategy_label({"strategy": {"kind": "backup", "backup": 4}}) == \
        "backup b=4"


# ---- curves --------------------------------------------------------------------------------

def test_eval_curves_are_the_metrics_rows(sweep_dir: Path) -> None:
    runs = analysis.load_runs(sweep_dir)
    frame = analysis.curves(runs)
    assert list(frame.columns) == ["path", "run", "label", "time_s", "iteration", "samples",
                                   "loss", "accuracy"]
    for name, per_update in zip(NAMES, [16, 16, 8, 8], strict=True):
        rows = metrics(sweep_dir / "runs" / name, "eval")
        curve = frame[frame["run"] == name]
        assert len(curve) == len(rows) == 5  # at 0, 3, 6, 9, 12 updates
        assert list(curve["iteration"]) == [0, 3, 6, 9, 12]
        assert list(curve["time_s"]) == [float(r["time_s"]) for r in rows]
        assert list(curve["loss"]) == [float(r["loss"]) for r in rows]
        assert list(curve["accuracy"]) == [float(r["accuracy"]) for r in rows]
        assert list(curve["samples"]) == pytest.approx([i * per_update for i in range(0, 13, 3)])
        assert curve["loss"].iloc[-1] == summary(sweep_dir / "runs" / name)["final_loss"]


def test_update_curves_and_extra_columns(run_dir: Path) -> None:
    frame = analysis.curves(run_dir, kind="update", columns=["strategy.kind", "cluster.workers"])
    rows = metrics(run_dir, "update")
    assert list(frame.columns) == ["path", "run", "strategy.kind", "cluster.workers", "time_s",
                                   "iteration", "samples", "worker", "clock", "version_read",
                                   "staleness", "clock_gap", "loss"]
    assert len(frame) == len(rows) == 24
    assert set(frame["strategy.kind"]) == {"asp"} and set(frame["cluster.workers"]) == {3}
    assert list(frame["iteration"]) == list(range(1, 25))
    assert list(frame["worker"]) == [float(r["worker"]) for r in rows]
    assert list(frame["staleness"]) == [float(r["staleness"]) for r in rows]
    assert frame["staleness"].mean() == pytest.approx(summary(run_dir)["staleness_mean"])


def test_curves_reject_a_bad_kind_or_table(run_dir: Path) -> None:
    with pytest.raises(UserError, match="kind must be"):
        analysis.curves(run_dir, kind="loss")
    with pytest.raises(UserError, match="missing columns: label"):
        analysis.curves(pd.DataFrame({"path": [str(run_dir)], "run": ["x"],
                                      "samples_per_update": [1.0]}))
    with pytest.raises(UserError, match="clock are also columns of the update rows"):
        analysis.curves(run_dir, kind="update", columns=["clock"])  # the summary's clock


# ---- efficiency ----------------------------------------------------------------------------

def test_samples_to_target_interpolates_between_evaluations() -> None:
    samples, loss = [0, 100, 200, 300], [1.0, 0.8, 0.4, 0.3]
    assert analysis.samples_to_target(samples, loss, 0.6) == pytest.approx(150)
    assert analysis.samples_to_target(samples, loss, 0.4) == pytest.approx(200)
    assert analysis.samples_to_target(samples, loss, 1.5) == 0
    assert math.isnan(analysis.samples_to_target(samples, loss, 0.1))
    with pytest.raises(UserError, match="4 samples but 3 losses"):
        analysis.samples_to_target(samples, loss[:3], 0.5)


def test_efficiency_sets_a_target_per_seed_and_tradeoff_averages(sweep_dir: Path) -> None:
    runs = analysis.load_runs(sweep_dir)
    points = analysis.efficiency(runs, slack=1.1)
    assert list(points["run"]) == NAMES
    evals = analysis.curves(runs)
    for seed in (1, 2):
        names = [n for n in NAMES if n.endswith(f"seed={seed}")]
        best = [evals[evals["run"] == n]["loss"].min() for n in names]
        target = 1.1 * max(best)
        chosen = points[points["run.seed"] == seed]
        assert list(chosen["target_loss"]) == pytest.approx([target, target])
        for name in names:
            curve = evals[evals["run"] == name]
            row = points[points["run"] == name].iloc[0]
            assert row["samples_to_target"] == pytest.approx(
                analysis.samples_to_target(curve["samples"], curve["loss"], target))
            assert 0 < row["samples_to_target"] <= curve["samples"].max()
            assert row["s_per_sample"] == pytest.approx(
                1 / summary(sweep_dir / "runs" / name)["samples_per_s"])

    means = analysis.tradeoff(points)
    assert list(means["label"]) == ["bsp-ps", "ssp s=1"]
    assert list(means["runs"]) == [2, 2]
    for label, group in points.groupby("label"):
        row = means[means["label"] == label].iloc[0]
        assert row["s_per_sample"] == pytest.approx(group["s_per_sample"].mean())
        assert row["samples_to_target"] == pytest.approx(group["samples_to_target"].mean())
        assert row["time_to_target_s"] == pytest.approx(
            row["s_per_sample"] * row["samples_to_target"])


def test_efficiency_with_a_fixed_target_and_bad_arguments(sweep_dir: Path) -> None:
    points = analysis.efficiency(sweep_dir, target=-1.0)  # never reached
    assert list(points["target_loss"]) == [-1.0] * 4
    assert points["samples_to_target"].isna().all()
    assert analysis.tradeoff(points)["samples_to_target"].isna().all()
    with pytest.raises(UserError, match="slack must be at least 1"):
        analysis.efficiency(sweep_dir, slack=0.9)
    with pytest.raises(UserError, match="missing columns: s_per_sample"):
        analysis.tradeoff(pd.DataFrame({"label": ["a"], "samples_to_target": [1.0]}))


# ---- select / table ------------------------------------------------------------------------

def test_select_and_table(sweep_dir: Path) -> None:
    rows = analysis.load_results(sweep_dir)
    ssp = analysis.select(rows, {"strategy.kind": "ssp"})
    assert list(ssp["run"]) == NAMES[2:]
    assert list(analysis.select(rows, {"run.seed": [2], "strategy.kind": ("ssp", "bsp-ps")})
                ["run"]) == [NAMES[1], NAMES[3]]
    grid = analysis.table(rows, "strategy.kind", "run.seed", "final_loss")
    assert list(grid.index) == ["bsp-ps", "ssp"] and list(grid.columns) == [1, 2]
    for name in NAMES:
        kind, seed = name.removeprefix("kind=").split("_seed=")
        assert grid.loc[kind, int(seed)] == summary(sweep_dir / "runs" / name)["final_loss"]
    partial = analysis.table(rows, "strategy.kind", "run.seed", "final_loss",
                             where={"run": NAMES[:3]})
    assert math.isnan(partial.loc["ssp", 2])
    with pytest.raises(UserError, match="rows share strategy.kind='bsp-ps'"):
        analysis.table(rows, "strategy.kind", "iterations", "final_loss")
    with pytest.raises(UserError, match="no column 'nope'"):
        analysis.select(rows, {"nope": 1})
    with pytest.raises(UserError, match="no column 'nope'"):
        analysis.table(rows, "strategy.kind", "run.seed", "nope")


def test_by_config_gives_the_mean_and_95_percent_interval_over_seeds(sweep_dir: Path) -> None:
    from sim.stats import mean_ci

    table = analysis.by_config(sweep_dir, values=("final_loss", "sim_time_s"))
    assert list(table.columns) == ["strategy.kind", "runs", "final_loss", "final_loss_ci",
                                   "final_loss_n", "sim_time_s", "sim_time_s_ci",
                                   "sim_time_s_n"]
    assert list(table["strategy.kind"]) == ["bsp-ps", "ssp"] and list(table["runs"]) == [2, 2]
    for kind, row in zip(("bsp-ps", "ssp"), table.itertuples(index=False), strict=True):
        losses = [summary(sweep_dir / "runs" / f"kind={kind}_seed={s}")["final_loss"]
                  for s in (1, 2)]
        ci = mean_ci(losses)
        assert (row.final_loss, row.final_loss_ci, row.final_loss_n) == \
            pytest.approx((ci.mean, ci.half_width, 2))
        assert ci.half_width == pytest.approx(12.706 * abs(losses[0] - losses[1]) / 2)
    runs = analysis.load_runs(sweep_dir)  # every config key: only the differing ones group
    assert list(analysis.by_config(runs)["strategy.kind"]) == ["bsp-ps", "ssp"]
    reached = analysis.by_config(sweep_dir)["time_to_target_s_n"]  # no target: none reached
    assert list(reached) == [0, 0]
    with pytest.raises(UserError, match="by_config: no column 'nope'"):
        analysis.by_config(sweep_dir, values=("nope",))


# ---- override / cached_sweep ---------------------------------------------------------------

def test_override_writes_toml_values() -> None:
    cases = {"run.iterations": 30, "compute.sigma": 1e-05, "strategy.sparse_comm": False,
             "cluster.fabric": 'eth-"10g"', "sweep.strategy.bucket_bytes": [1e4, 25e6],
             "sweep.cluster.workers": (1, np.int64(4))}
    for key, value in cases.items():
        text = analysis.override(key, value)
        assert text.startswith(f"{key}=")
        path, parsed = parse_override(text)
        assert path == key.split(".")
        assert parsed == (list(value) if isinstance(value, tuple) else value)
    assert analysis.override("sweep.cluster.workers", [1, 4]) == "sweep.cluster.workers=[1, 4]"
    with pytest.raises(UserError, match="cannot write None"):
        analysis.override("run.target_loss", None)


def test_cached_sweep_reuses_runs_for_the_same_overrides(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture,
                                                         tiny: dict, write_toml) -> None:
    config = write_toml(tmp_path / "tiny.toml", {**tiny, "run": {**tiny["run"], "seeds": []}})
    overrides = [analysis.override("run.iterations", 6)]
    out = tmp_path / "runs" / "tiny"
    first = analysis.cached_sweep(config, out, overrides, jobs=1)
    assert first.parent == tmp_path / "runs" and first.name.startswith("tiny-")
    assert "tiny: 2 runs, 0 reused" in capsys.readouterr().out
    assert analysis.cached_sweep(config, out, overrides, jobs=1) == first
    assert "tiny: 0 runs, 2 reused" in capsys.readouterr().out
    other = analysis.cached_sweep(config, out, [], quiet=True, jobs=1)
    assert other != first and capsys.readouterr().out == ""
    assert set(analysis.load_results(first)["iterations"]) == {6}
    assert set(analysis.load_results(other)["iterations"]) == {12}
    with pytest.raises(UserError, match="cluster.workers"):
        analysis.cached_sweep(config, tmp_path / "bad", ["cluster.workers=nope"], jobs=1)


# ---- bad paths -----------------------------------------------------------------------------

def test_bad_paths_raise_user_errors_naming_them(tmp_path: Path, run_dir: Path,
                                                 sweep_dir: Path) -> None:
    missing = tmp_path / "missing"
    for call in (analysis.load_results, analysis.load_runs, analysis.curves,
                 analysis.efficiency):
        with pytest.raises(UserError, match=str(missing)):
            call(missing)
    with pytest.raises(UserError, match=f"{run_dir}: not a sweep directory"):
        analysis.load_results(run_dir)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match=f"{empty}: neither a run directory"):
        analysis.load_runs(empty)
    with pytest.raises(UserError, match="no run directories given"):
        analysis.load_runs()

    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("config.toml", "summary.json"):
        (broken / name).write_text((run_dir / name).read_text())
    with pytest.raises(UserError, match=str(broken / "metrics.csv")):
        analysis.curves(broken)
    (broken / "summary.json").write_text("{not json")
    with pytest.raises(UserError, match=f"{broken / 'summary.json'}: not valid JSON"):
        analysis.load_runs(broken)


# ---- setup_notebook / show -----------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def test_setup_notebook_styles_figures_and_makes_the_results_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    from sim.plots.style import STYLE

    monkeypatch.setenv("SGD_LAB_RUNS", str(tmp_path / "results"))
    monkeypatch.setenv("SGD_LAB_QUICK", "1")
    with matplotlib.rc_context():  # the test leaves the style as it found it
        paths = analysis.setup_notebook("02-sync-async-ssp")
        assert matplotlib.rcParams["figure.dpi"] == 100
        assert matplotlib.rcParams["font.size"] == STYLE["font.size"]
        assert matplotlib.rcParams["axes.spines.top"] is False
    root, experiments, runs = paths
    assert root == ROOT == analysis.CHECKOUT and experiments == ROOT / "experiments"
    assert runs == tmp_path / "results" / "02-sync-async-ssp" and runs.is_dir()
    assert capsys.readouterr().out == f"results in {runs}  (quick form)\n"


def test_setup_notebook_picks_a_temporary_or_the_checkouts_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.delenv("SGD_LAB_RUNS", raising=False)
    monkeypatch.delenv("SGD_LAB_QUICK", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    checkout = tmp_path / "checkout"
    (checkout / "experiments").mkdir(parents=True)
    with matplotlib.rc_context():
        quick = analysis.setup_notebook("nb", quick=True, root=checkout)
        full = analysis.setup_notebook("nb", root=checkout)  # SGD_LAB_QUICK unset: full size
    assert quick.root == checkout and quick.experiments == checkout / "experiments"
    assert quick.runs.parent.parent == tmp_path / "tmp" and quick.runs.name == "nb"
    assert quick.runs.parent.name.startswith("sgd-lab-") and quick.runs.is_dir()
    assert full.runs == checkout / "runs" / "notebooks" / "nb" and full.runs.is_dir()
    assert capsys.readouterr().out.splitlines() == [
        f"results in {quick.runs}  (quick form)", f"results in {full.runs}"]


def test_setup_notebook_errors_name_what_is_wrong(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("", "..", "a/b"):
        with pytest.raises(UserError, match="name must be one path component"):
            analysis.setup_notebook(name)
    with pytest.raises(UserError, match=f"{tmp_path / 'experiments'}: missing"):
        analysis.setup_notebook("nb", root=tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("SGD_LAB_RUNS", str(blocker))
    with pytest.raises(UserError, match=f"{blocker / 'nb'}: cannot create"):
        analysis.setup_notebook("nb")


def test_show_displays_the_pngs_only(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("IPython")
    from matplotlib.figure import Figure

    png, svg = tmp_path / "f.png", tmp_path / "f.svg"
    Figure(figsize=(1, 1)).savefig(png)
    svg.write_text("<svg/>")
    assert analysis.show([svg, png]) == [png]
    assert capsys.readouterr().out.count("Image object") == 1  # display() outside a kernel
    assert analysis.show(str(png)) == [png]
    assert analysis.show([svg]) == []
    with pytest.raises(UserError, match=f"{tmp_path / 'gone.png'}: no such image"):
        analysis.show([tmp_path / "gone.png"])
