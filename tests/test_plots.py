"""Plots from saved result files: every figure kind, labels, determinism, bad input, the CLI."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from sim import cli, plots
from sim.errors import UserError
from sim.plots.gantt import window_end
from sim.plots.labels import context, style_indices
from sim.plots.scaling import line_stats, scaling_lines
from sim.results import number

ROOT = Path(__file__).resolve().parent.parent
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_tiny_run(out: Path, **overrides: object) -> dict:
    """A tiny simulated run written the way ``sim run`` writes it; its summary."""
    from sim.config import validate
    from sim.record import write_run
    from sim.training.engine import simulate

    data: dict = {"cluster": {"workers": 3}, "workload": {"samples": 512},
                  "run": {"iterations": 24, "eval_every": 4}}
    for key, value in overrides.items():
        section, name = key.split(".")
        data.setdefault(section, {})[name] = value
    result = simulate(validate(data))
    write_run(out, {"config.toml": result.config_toml,
                    "summary.json": json.dumps(result.summary, indent=2) + "\n",
                    "metrics.csv": result.metrics_csv,
                    "trace.json": json.dumps(result.trace)})
    return result.summary


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three strategy runs and a fake sweep (fabric x workers x 2 seeds), on disk."""
    base = tmp_path_factory.mktemp("results")
    runs = {}
    for kind in ("bsp", "asp", "ssp"):
        runs[kind] = base / kind
        write_tiny_run(runs[kind], **{"strategy.kind": kind, "strategy.staleness": 1,
                                      "compute.distribution": "exponential"})
    sweep, rows = base / "sweep", []
    for fabric in ("ib-hdr", "eth-10g"):
        for workers in (1, 2, 4):
            for seed in (0, 1):
                name = f"fabric={fabric}_workers={workers}_seed={seed}"
                summary = write_tiny_run(sweep / "runs" / name, **{
                    "cluster.fabric": fabric, "cluster.workers": workers, "run.seed": seed,
                    "strategy.kind": "asp"})
                scalars = {k: v for k, v in summary.items() if not isinstance(v, list | dict)}
                rows.append({"run": name, "cluster.fabric": fabric, "cluster.workers": workers,
                             "run.seed": seed, **scalars})
    with open(sweep / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return {**runs, "sweep": sweep}


def assert_figures(paths: list[Path], stems: list[str]) -> None:
    """PNG and SVG for each stem: non-empty, valid, and nothing half-written beside them."""
    assert sorted(p.name for p in paths) == sorted(f"{s}.{e}" for s in stems
                                                   for e in ("png", "svg"))
    for path in paths:
        data = path.read_bytes()
        if path.suffix == ".png":
            assert data.startswith(PNG_MAGIC) and len(data) > 5000, path
        else:
            assert ET.fromstring(data).tag.endswith("svg"), path
        assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]


def strategy_runs(results: dict[str, Path]) -> list[Path]:
    return [results[k] for k in ("bsp", "asp", "ssp")]


# ---- each figure -------------------------------------------------------------------------

@pytest.mark.parametrize("plot, stem", [(plots.plot_loss_time, "loss-time"),
                                        (plots.plot_loss_updates, "loss-updates"),
                                        (plots.plot_staleness, "staleness"),
                                        (plots.plot_breakdown, "breakdown")])
def test_comparison_figures(results: dict[str, Path], tmp_path: Path, plot, stem: str) -> None:
    assert_figures(plot(strategy_runs(results), tmp_path), [stem])


def test_staleness_small_multiples_for_many_runs(results: dict[str, Path],
                                                 tmp_path: Path) -> None:
    assert_figures(plots.plot_staleness([results["sweep"]], tmp_path), ["staleness"])


def test_gantt_one_per_run_and_window(results: dict[str, Path], tmp_path: Path) -> None:
    paths = plots.plot_gantt([str(results["bsp"]), results["asp"]], tmp_path, max_slices=5)
    assert_figures(paths, ["gantt-bsp", "gantt-asp"])
    assert_figures(plots.plot_gantt([results["ssp"]], tmp_path / "w", window_s=1e-5), ["gantt-ssp"])
    slices = [(0, "compute", 0.0, 1.0), (1, "compute", 0.5, 1.0), (0, "comm", 1.0, 2.0),
              (0, "compute", 2.0, 3.0)]
    assert window_end(slices, 2) == 2.0  # worker 0's third slice starts at 2 s
    assert window_end(slices, 3) == 3.0  # everything fits: the whole run


def test_scaling_from_results_csv(results: dict[str, Path], tmp_path: Path) -> None:
    assert_figures(plots.plot_scaling(results["sweep"], tmp_path), ["scaling"])
    import sim.results as r

    rows = r.Sweep(results["sweep"]).rows
    lines = scaling_lines(rows, ["cluster.fabric"])
    assert list(lines) == ["cluster.fabric=ib-hdr", "cluster.fabric=eth-10g"]
    assert {w: len(v) for w, v in lines["cluster.fabric=ib-hdr"].items()} == \
        {1: 2, 2: 2, 4: 2}  # two seeds per point, averaged in the figure
    workers, mean, spread, speedup = line_stats({4: [30.0, 50.0], 2: [20.0]})
    assert workers.tolist() == [2, 4] and mean.tolist() == [20.0, 40.0]
    assert spread.tolist() == [[0.0, 10.0], [0.0, 10.0]] and speedup.tolist() == [1.0, 2.0]


def test_plot_sweep_writes_the_standard_figures(results: dict[str, Path]) -> None:
    paths = plots.plot_sweep(results["sweep"])
    assert {p.parent for p in paths} == {results["sweep"] / "plots"}
    assert_figures(paths, ["loss-time", "loss-updates", "breakdown", "staleness", "scaling"])


def test_plot_runs_all_kinds(results: dict[str, Path], tmp_path: Path) -> None:
    paths = plots.plot_runs(strategy_runs(results), tmp_path, "all")
    stems = ["loss-time", "loss-updates", "staleness", "breakdown",
             "gantt-bsp", "gantt-asp", "gantt-ssp"]  # no sweep: no scaling with "all"
    assert_figures(paths, stems)
    assert set(plots.KINDS) == {"loss-time", "loss-updates", "staleness", "gantt", "breakdown",
                                "scaling", "pipelining", "buckets"}


# ---- from saved results only, deterministic -------------------------------------------------

def test_plots_need_only_result_files(results: dict[str, Path], tmp_path: Path) -> None:
    """A copied sweep plots in a process where the simulator cannot even be imported."""
    copy = tmp_path / "copied"
    shutil.copytree(results["sweep"], copy, ignore=shutil.ignore_patterns("plots"))
    code = ("import sys\n"
            "for name in ('sim.training', 'sim.network', 'sim.kernels', 'sim.config'):\n"
            "    sys.modules[name] = None\n"
            "from sim.plots import plot_sweep\n"
            f"print(len(plot_sweep({str(copy)!r})))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "10"


def test_same_inputs_give_identical_bytes(results: dict[str, Path], tmp_path: Path) -> None:
    first = plots.plot_runs([results["sweep"]], tmp_path / "a", "loss-time,staleness,scaling")
    second = plots.plot_runs([results["sweep"]], tmp_path / "b", "loss-time,staleness,scaling")
    assert [p.name for p in first] == [p.name for p in second]
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name


# ---- labels -----------------------------------------------------------------------------------

def cfg(kind: str = "bsp", staleness: int = 2, seed: int = 0, workers: int = 4,
        **extra: object) -> dict:
    return {"cluster": {"workers": workers, "fabric": "ib-hdr"},
            "strategy": {"kind": kind, "staleness": staleness,
                         "elasticity": min(1.0, 0.9 / workers)},
            "workload": {"hidden": [64]}, "run": {"seed": seed, "seeds": []}, **extra}


def test_labels_name_exactly_the_differing_keys() -> None:
    configs = [cfg("bsp"), cfg("asp"), cfg("ssp", staleness=4)]
    assert plots.differing_keys(configs) == ["strategy.kind", "strategy.staleness"]
    assert plots.run_labels(configs) == ["strategy.kind=bsp, strategy.staleness=2",
                                   "strategy.kind=asp, strategy.staleness=2",
                                   "strategy.kind=ssp, strategy.staleness=4"]


def test_labels_seed_rules() -> None:
    only_seed = [cfg(seed=0), cfg(seed=1)]
    assert plots.run_labels(only_seed) == ["run.seed=0", "run.seed=1"]
    with_seed = [cfg("bsp", seed=0), cfg("bsp", seed=1), cfg("asp", seed=0)]
    assert plots.run_labels(with_seed) == ["strategy.kind=bsp"] * 2 + ["strategy.kind=asp"]
    assert plots.run_labels([cfg(), cfg()], ["a", "b"]) == ["a", "b"]  # nothing differs: names


def test_labels_skip_derived_defaults_and_the_grid() -> None:
    configs = [cfg(workers=2, sweep={"cluster.workers": [2, 4]}),
               cfg(workers=4, sweep={}, run={"seed": 0, "seeds": [0, 1]})]
    assert plots.run_labels(configs) == ["cluster.workers=2", "cluster.workers=4"]
    chosen = [cfg(workers=2), cfg(workers=4)]
    chosen[1]["strategy"]["elasticity"] = 0.5  # set by hand: a real difference
    assert plots.differing_keys(chosen) == ["cluster.workers", "strategy.elasticity"]


def test_labels_lists_missing_keys_and_context() -> None:
    a, b = cfg(), cfg()
    b["workload"]["hidden"] = [64, 32]
    b["compute"] = {"time_s": 0.5}
    assert plots.run_labels([a, b]) == ["workload.hidden=[64], compute.time_s=-",
                                  "workload.hidden=[64, 32], compute.time_s=0.5"]
    assert context([cfg("bsp"), cfg("asp")]) == "4 workers, ib-hdr"
    styles = style_indices([cfg("bsp", workers=2), cfg("asp", workers=2),
                            cfg("bsp", workers=4), cfg("asp", workers=4)])
    assert styles == [(0, 0), (0, 1), (1, 0), (1, 1)]  # colour: workers; dashes: strategy


def test_number_reads_csv_cells() -> None:
    assert number("0.5") == 0.5 and number("np.float64(2.5e-06)") == 2.5e-06
    assert number("") != number("")  # NaN


# ---- bad input -----------------------------------------------------------------------------

def test_bad_input_names_the_path(results: dict[str, Path], tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(UserError, match=re.escape(str(missing))):
        plots.plot_loss_time([missing], tmp_path / "out")
    with pytest.raises(UserError, match=re.escape(f"{tmp_path}: neither a run")):
        plots.plot_breakdown([tmp_path], tmp_path / "out")
    broken = tmp_path / "broken"
    shutil.copytree(results["bsp"], broken)
    (broken / "summary.json").write_text("{not json")
    with pytest.raises(UserError, match=re.escape(str(broken / "summary.json"))):
        plots.plot_breakdown([broken], tmp_path / "out")
    (broken / "trace.json").unlink()
    with pytest.raises(UserError, match=re.escape(str(broken / "trace.json"))):
        plots.plot_gantt([broken], tmp_path / "out")
    with pytest.raises(UserError, match="results.csv: cluster.workers is not swept"):
        no_workers = tmp_path / "sweep"
        no_workers.mkdir()
        (no_workers / "results.csv").write_text("run,cluster.fabric\nx,ib-hdr\n")
        plots.plot_scaling(no_workers, tmp_path / "out")
    with pytest.raises(UserError, match="--kind nope"):
        plots.plot_runs([results["bsp"]], tmp_path / "out", "loss-time,nope")
    with pytest.raises(UserError, match="--kind scaling"):
        plots.plot_runs([results["bsp"]], tmp_path / "out", "scaling")


# ---- the command line ------------------------------------------------------------------------

def test_cli_plot(results: dict[str, Path], tmp_path: Path,
                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "figs"
    argv = ["plot", str(results["bsp"]), str(results["asp"]), "--out", str(out),
            "--kind", "loss-time,breakdown"]
    assert cli.main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == ["breakdown.png", "breakdown.svg",
                                                     "loss-time.png", "loss-time.svg"]
    assert "loss-time.png" in capsys.readouterr().out
    assert cli.main(["plot", str(results["sweep"]), "--out", str(out), "--kind", "gantt",
                     "--window-s", "2e-5"]) == 0
    assert len(list(out.glob("gantt-*.png"))) == 12  # one per run of the sweep
    assert cli.main(["plot", str(results["bsp"]), "--kind", "gantt", "--window-s", "0"]) == 2
    assert "--window-s 0.0: expected a positive" in capsys.readouterr().err
    assert cli.main(["plot", str(tmp_path / "nowhere")]) == 2
    assert f"{tmp_path / 'nowhere'}: no such directory" in capsys.readouterr().err
    assert cli.main(["plot", str(results["bsp"]), "--kind", "pie"]) == 2
    assert "--kind pie: unknown plot kind" in capsys.readouterr().err
    assert not (results["bsp"] / "plots").exists()  # a bad kind fails before any work
