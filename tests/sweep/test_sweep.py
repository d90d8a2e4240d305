"""Sweeps: grid expansion and naming, results.csv, resuming after a kill, Dask, bad tables."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from sim.cli import main
from sim.errors import UserError
from sim.results import Sweep
from sim.sweep import MAX_NAME, flatten, format_value, grid, load_sweep, point_names, run_sweep
from sim.training.validator import validate

ROOT = Path(__file__).resolve().parents[2]

GRID = '[sweep]\n"cluster.fabric" = ["ib-hdr", "eth-10g"]\n"cluster.workers" = [2, 4]\n'
NAMES = ["fabric=ib-hdr_workers=2", "fabric=ib-hdr_workers=4",
         "fabric=eth-10g_workers=2", "fabric=eth-10g_workers=4"]


@pytest.fixture
def write_config(tmp_path: Path, write_tiny_sweep):
    """``write_config(sweep=GRID, iterations=10, name="exp.toml")``: the shared tiny sweep
    config in tmp_path."""
    def write(sweep: str = GRID, iterations: int = 10, name: str = "exp.toml") -> Path:
        return write_tiny_sweep(tmp_path / name, sweep, iterations)

    return write


def read_results(path: Path) -> list[dict[str, str]]:
    """results.csv rows without wall_s (the only column that differs between reruns)."""
    with open(path, newline="") as f:
        return [{k: v for k, v in row.items() if k != "wall_s"} for row in csv.DictReader(f)]


def sweep_cli(config: Path, out: Path, *extra: str) -> int:
    return main(["sweep", str(config), "--out", str(out), "--no-plots", *extra])


# ---- grid expansion and naming (units) --------------------------------------------------

def test_grid_is_the_product_in_key_order_times_seeds():
    points = grid({"a.x": [1, 2], "b.y": ["u", "v"]}, seeds=[7, 8])
    assert len(points) == 8
    assert points[0] == {"a.x": 1, "b.y": "u", "run.seed": 7}
    assert points[1] == {"a.x": 1, "b.y": "u", "run.seed": 8}
    assert points[-1] == {"a.x": 2, "b.y": "v", "run.seed": 8}
    assert grid({"a.x": [1, 2]}) == [{"a.x": 1}, {"a.x": 2}]
    assert grid({}, seeds=[0, 1]) == [{"run.seed": 0}, {"run.seed": 1}]


def test_names_are_readable_and_deterministic():
    points = grid({"cluster.fabric": ["eth-10g"], "cluster.workers": [8]}, seeds=[1])
    assert point_names(points) == ["fabric=eth-10g_workers=8_seed=1"]
    assert format_value([256, 128]) == "256-128" and format_value(True) == "true"
    assert format_value(0.05) == "0.05"
    # two swept keys with the same last part are named in full
    both = point_names(grid({"strategy.staleness": [1], "x.staleness": [2]}))
    assert both == ["strategy.staleness=1_x.staleness=2"]
    assert point_names(grid({"cluster.fabric": ["a/b c"]})) == ["fabric=a-b-c"]


def test_colliding_or_long_names_get_a_hash_suffix():
    points = grid({"cluster.fabric": ["a/b", "a b", "c"]})
    names = point_names(points)
    assert len(set(names)) == 3 and names[2] == "fabric=c"
    assert names[0].startswith("fabric=a-b_") and names[1].startswith("fabric=a-b_")
    assert names == point_names(points)  # deterministic
    upper, lower = point_names(grid({"cluster.fabric": ["IB", "ib"]}))  # case-insensitive disks
    assert upper.lower() != lower.lower()
    long = point_names(grid({"cluster.fabric": ["x" * 200, "x" * 199 + "y"]}))
    assert len(set(long)) == 2 and all(len(n) <= MAX_NAME for n in long)


def test_dotted_tables_overrides_and_derived_defaults(tmp_path, write_config):
    nested = write_config("[sweep]\ncluster.workers = [2, 8]\n"
                          '[strategy]\nkind = "easgd"\n')
    sweep = load_sweep(nested, ["run.seeds=[3, 4]", "sweep.workload.lr=[0.1, 0.2]"])
    assert sweep.keys == ["cluster.workers", "workload.lr", "run.seed"]
    assert len(sweep.points) == 8 and sweep.points[0].name == "workers=2_lr=0.1_seed=3"
    configs = [validate(p.data) for p in sweep.points]
    assert [c.run.seed for c in configs[:2]] == [3, 4]
    assert configs[0].sweep == {} and configs[0].run.seeds == []  # each run is one config
    # defaults derived from a swept key follow the point, not the base config
    assert configs[0].strategy.elasticity == pytest.approx(0.9 / 2)
    assert configs[-1].strategy.elasticity == pytest.approx(0.9 / 8)
    assert flatten({"a": {"b": [1]}, "c.d": [2]}) == {"a.b": [1], "c.d": [2]}


# ---- end to end --------------------------------------------------------------------------

def test_sweep_writes_every_run_and_a_tidy_results_csv(tmp_path, capsys, write_config):
    out = tmp_path / "sweep"
    assert sweep_cli(write_config(), out, "--jobs", "2") == 0
    printed = capsys.readouterr().out
    assert all(name in printed for name in NAMES) and str(out / "results.csv") in printed
    runs = sorted(p.name for p in (out / "runs").iterdir())
    assert runs == sorted(NAMES)
    for name in NAMES:
        assert sorted(p.name for p in (out / "runs" / name).iterdir()) == [
            "config.toml", "metrics.csv", "summary.json", "trace.json"]
    resolved = tomllib.loads((out / "runs" / NAMES[3] / "config.toml").read_text())
    assert resolved["cluster"]["fabric"] == "eth-10g" and resolved["cluster"]["workers"] == 4
    rows = read_results(out / "results.csv")
    assert [r["run"] for r in rows] == NAMES
    columns = list(rows[0])
    assert columns[:4] == ["run", "cluster.fabric", "cluster.workers", "run.seed"]
    assert {"final_loss", "sim_time_s", "samples_per_s", "iterations"} <= set(columns)
    assert "workers" not in columns  # per-worker lists are not scalars
    assert [(r["cluster.fabric"], r["cluster.workers"]) for r in rows] == [
        ("ib-hdr", "2"), ("ib-hdr", "4"), ("eth-10g", "2"), ("eth-10g", "4")]
    assert all(r["iterations"] == "10" for r in rows)
    assert json.loads((out / "sweep.json").read_text())["points"][0]["name"] == NAMES[0]
    # started again: nothing to do, the same results
    assert sweep_cli(write_config(), out) == 0
    assert "4 already done" in capsys.readouterr().out
    assert read_results(out / "results.csv") == rows


def _complete(out: Path) -> dict[str, bytes]:
    """Complete runs (not write_run's hidden temp dirs) -> their summary.json."""
    return {p.parent.name: p.read_bytes() for p in out.glob("runs/*/summary.json")
            if not p.parent.name.startswith(".")}


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_killed_sweep_resumes_to_the_same_results(tmp_path, write_config):
    sweep = '[sweep]\n"workload.lr" = [0.05, 0.1, 0.2, 0.4]\n"cluster.workers" = [2, 4]\n'
    config = write_config(sweep, iterations=800)
    reference = tmp_path / "reference"
    assert sweep_cli(config, reference, "--jobs", "1") == 0
    expected = read_results(reference / "results.csv")

    out = tmp_path / "killed"
    command = [sys.executable, "-m", "sim", "sweep", str(config), "--out", str(out),
               "--no-plots", "--jobs", "2"]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not _complete(out) and time.monotonic() < deadline:
        time.sleep(0.005)
    workers = _children(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10  # orphaned pool processes exit with the sweep
    while any(map(_alive, workers)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert workers and not any(map(_alive, workers))
    done = _complete(out)
    assert 1 <= len(done) < 8, "the sweep was not killed part-way"
    assert not (out / "results.csv").exists()

    resumed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{8 - len(done)} ran, {len(done)} already done" in resumed.stdout
    assert read_results(out / "results.csv") == expected
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(
        p.name for p in (reference / "runs").iterdir())  # no temp dirs, no duplicates
    assert {n: (out / "runs" / n / "summary.json").read_bytes() for n in done} == done


def test_resume_after_a_simulated_crash(tmp_path, write_config):
    config = write_config()
    reference, out = tmp_path / "reference", tmp_path / "crashed"
    assert sweep_cli(config, reference, "--jobs", "1") == 0
    assert sweep_cli(config, out, "--jobs", "1") == 0
    # what a crash leaves: some runs complete, one half-written temp dir, no results.csv
    import shutil

    for name in NAMES[1:3]:
        shutil.rmtree(out / "runs" / name)
    half = out / "runs" / f".{NAMES[1]}.tmp-4242"
    half.mkdir()
    (half / "config.toml").write_text("[cluster]\n")
    (out / "results.csv").unlink()
    kept = (out / "runs" / NAMES[0] / "summary.json").read_bytes()

    report = run_sweep(config, out, jobs=1, plots=False, progress=False)
    assert report.ran == NAMES[1:3] and report.skipped == [NAMES[0], NAMES[3]]
    assert not report.failed
    assert read_results(out / "results.csv") == read_results(reference / "results.csv")
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(NAMES)
    assert (out / "runs" / NAMES[0] / "summary.json").read_bytes() == kept


def test_dask_local_cluster_gives_the_same_results(tmp_path, write_config):
    distributed = pytest.importorskip("distributed")
    config = write_config()
    local, dask = tmp_path / "local", tmp_path / "dask"
    assert sweep_cli(config, local, "--jobs", "1") == 0
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        assert sweep_cli(config, dask, "--scheduler", cluster.scheduler_address) == 0
    assert read_results(dask / "results.csv") == read_results(local / "results.csv")
    assert sorted(p.name for p in (dask / "runs").iterdir()) == sorted(NAMES)


def test_unreachable_scheduler_is_a_user_error(tmp_path, write_config):
    pytest.importorskip("distributed")
    out = tmp_path / "out"
    with pytest.raises(UserError, match="--scheduler"):
        run_sweep(write_config(), out, scheduler="bogus://host:1", plots=False)
    assert not out.exists()


# ---- failures and bad input --------------------------------------------------------------

def test_a_failing_point_is_reported_and_the_rest_kept(tmp_path, monkeypatch, capsys,
                                                       write_config):
    import sim.simulated.engine as engine

    real = engine.simulate

    def flaky(config):
        if config.cluster.workers == 4 and config.cluster.fabric == "eth-10g":
            raise RuntimeError("boom")
        return real(config)

    monkeypatch.setattr(engine, "simulate", flaky)
    config, out = write_config(), tmp_path / "out"
    assert sweep_cli(config, out, "--jobs", "1") == 1
    err = capsys.readouterr().err
    assert f"failed: {NAMES[3]}: RuntimeError: boom" in err
    rows = read_results(out / "results.csv")  # every point, the failure with its reason
    assert [r["run"] for r in rows] == NAMES
    assert [r["error"] for r in rows[:3]] == ["", "", ""] and "boom" in rows[3]["error"]
    assert rows[3]["cluster.workers"] == "4" and rows[3]["sim_time_s"] == ""
    assert [r["run"] for r in Sweep(out).rows] == NAMES[:3]  # readers see finished runs
    assert list(Sweep(out).failed) == [NAMES[3]]
    monkeypatch.setattr(engine, "simulate", real)
    assert sweep_cli(config, out, "--jobs", "1") == 0  # the same command finishes it
    rows = read_results(out / "results.csv")
    assert [r["run"] for r in rows] == NAMES and not any(r["error"] for r in rows)


@pytest.mark.parametrize("sweep, named", [
    ('[sweep]\n"cluster.wrokers" = [2, 4]\n', "sweep.cluster.wrokers"),
    ('[sweep]\n"cluster.workers" = 4\n', "sweep.cluster.workers"),
    ('[sweep]\n"cluster.workers" = [2, 0]\n', "cluster.workers"),
    ('[sweep]\n"cluster.fabric" = ["ib-hdr", "token-ring"]\n', "cluster.fabric"),
    ('[sweep]\n"workload.batch" = [8, 5000]\n', "workload.batch"),
    ('[sweep]\n"workload.lr" = []\n', "sweep.workload.lr"),
    ('[sweep]\n"workload.lr" = [0.1, 0.1]\n', "sweep.workload.lr"),
    ('[sweep]\n"cluster" = [1]\n', "sweep.cluster"),
    ('[sweep]\n"run.seeds" = [[1]]\n', "sweep.run.seeds"),
    ("sweep = 3\n", "sweep"),
    ("", "nothing to sweep"),
])
def test_bad_sweep_tables_exit_2_and_write_nothing(tmp_path, capsys, sweep, named,
                                                   write_config):
    out = tmp_path / "out"
    assert sweep_cli(write_config(sweep), out) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and named in err and "exp.toml" in err
    assert not out.exists()


def test_a_bad_point_is_named(tmp_path, capsys, write_config):
    config = write_config('[sweep]\n"cluster.workers" = [2, 0]\n')
    assert sweep_cli(config, tmp_path / "out") == 2
    assert "sweep point workers=0: cluster.workers" in capsys.readouterr().err


def test_refuses_to_resume_a_different_sweep(tmp_path, capsys, write_config):
    config, out = write_config(), tmp_path / "out"
    assert sweep_cli(config, out, "--jobs", "1") == 0
    before = sorted(os.listdir(out / "runs"))
    assert sweep_cli(config, out, "--set", "sweep.cluster.workers=[2, 8]") == 2
    assert "different sweep (its point 2 is fabric=ib-hdr_workers=4" in capsys.readouterr().err
    assert sweep_cli(config, out, "--set", "run.iterations=11") == 2
    assert f"run {NAMES[0]} has a different config" in capsys.readouterr().err
    assert sorted(os.listdir(out / "runs")) == before
    # the saved definition reruns (resumes) the same sweep
    assert sweep_cli(out / "sweep.toml", out) == 0
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine\n")
    assert sweep_cli(config, tmp_path / "other") == 2
    assert "holds no sweep.json" in capsys.readouterr().err


def test_the_sweep_table_shows_time_to_target(tmp_path, capsys, write_config):
    config = write_config()
    assert sweep_cli(config, tmp_path / "out", "--jobs", "1",
                     "--set", "run.target_loss=0.1") == 0
    header = capsys.readouterr().out.splitlines()[1]
    assert header.split()[:3] == ["run", "final_loss", "time_to_target_s"]


# ---- seeds ----------------------------------------------------------------------------------

def test_seeds_option_repeats_every_point_from_run_seed(tmp_path, capsys, write_config):
    config = write_config('[sweep]\n"strategy.kind" = ["bsp", "asp"]\n')
    sweep = load_sweep(config, ["run.seed=5", "run.seeds=[1]"], seeds=3)
    assert [p.values for p in sweep.points[:3]] == [
        {"strategy.kind": "bsp", "run.seed": s} for s in (5, 6, 7)]  # replaces run.seeds
    assert sweep.definition["run"]["seeds"] == [5, 6, 7]  # sweep.toml reruns the same
    assert [p.name for p in load_sweep(config, seeds=2).points] == [
        "kind=bsp_seed=0", "kind=bsp_seed=1", "kind=asp_seed=0", "kind=asp_seed=1"]
    assert len(load_sweep(write_config("", name="plain.toml"), seeds=2).points) == 2
    assert sweep_cli(config, tmp_path / "out", "--seeds", "0") == 2
    assert "--seeds 0: expected at least 1 seed" in capsys.readouterr().err
    both = write_config('[sweep]\n"run.seed" = [1, 2]\n', name="both.toml")
    assert sweep_cli(both, tmp_path / "out", "--seeds", "2") == 2
    assert "sweep.run.seed: --seeds 2 is also given" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_seed_table_shows_mean_and_95_percent_interval_per_configuration(tmp_path,
                                                                             write_config):
    from sim.commands.sweep import format_table
    from sim.stats import mean_ci
    from sim.sweep import SweepReport

    path = write_config('[sweep]\n"strategy.kind" = ["bsp", "asp"]\n')
    sweep = load_sweep(path, ["run.target_loss=0.5"], seeds=3)
    report = SweepReport(tmp_path, sweep)
    losses, times = [1.0, 2.0, 3.0], [0.1, None, 0.3]
    report.rows = [{"run": p.name, "final_loss": loss, "time_to_target_s": t,
                    "sim_time_s": 2.0, "samples_per_s": 10.0}
                   for p, loss, t in zip(sweep.points[:3], losses, times, strict=True)]
    report.failed = {sweep.points[3].name: "boom"}
    report.rows += [{"run": p.name, "final_loss": 0.5, "time_to_target_s": None,
                     "sim_time_s": 1.0, "samples_per_s": 20.0, "diverged": True}
                    for p in sweep.points[4:]]
    lines = format_table(report).splitlines()
    assert lines[0].split() == ["configuration", "seeds", "final_loss", "time_to_target_s",
                                "reached", "sim_time_s", "samples_per_s"]
    loss, target = mean_ci(losses), mean_ci([0.1, 0.3])
    assert loss.half_width == pytest.approx(4.303 / 3 ** 0.5)
    assert lines[1].split() == ["kind=bsp", "3", "2", "±", f"{loss.half_width:.2g}",
                                f"{target.mean:.4g}", "±", f"{target.half_width:.2g}", "2/3",
                                "2", "10"]  # the same for every seed: no interval
    assert lines[2].split() == ["kind=asp", "2/3", "0.5", "-", "0/2", "1", "20", "2",
                                "diverged"]
    assert "95% confidence interval over the seeds" in lines[3]


def test_a_seeded_sweep_prints_one_line_per_configuration(tmp_path, capsys, write_config):
    config = write_config('[sweep]\n"strategy.kind" = ["bsp", "asp"]\n')
    assert sweep_cli(config, tmp_path / "out", "--jobs", "1", "--seeds", "2") == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("sweep ") and "4 runs" in printed[0]
    assert printed[1].split()[:3] == ["configuration", "seeds", "final_loss"]
    assert [line.split()[:2] for line in printed[2:4]] == [["kind=bsp", "2"], ["kind=asp", "2"]]
    rows = read_results(tmp_path / "out" / "results.csv")
    assert [r["run.seed"] for r in rows] == ["0", "1", "0", "1"]
