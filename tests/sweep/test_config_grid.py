"""Every combination of the config's main axes either runs or is refused with one line.

The grid is model x data set x classes x strategy x compression x pipelining x network x
topology x servers (54,432 points). Hypothesis draws points from it (seeded); each one runs
tiny through the command line in this process. A point must run to a finite summary (exit
0) or be refused before anything is written (exit 2, one line naming the key); any other
exception is a traceback, which fails the test.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sim.cli import main

AXES = {
    "workload.model": ["logreg", "softmax", "mlp", "sparse-logreg"],
    "workload.dataset": ["gaussian", "digits", "sparse-powerlaw"],
    "workload.classes": [2, 3],
    "strategy.kind": ["bsp", "bsp-ps", "backup", "asp", "ssp", "local-sgd", "easgd"],
    "strategy.compression": ["none", "topk", "qsgd"],
    "strategy.pipelining": ["none", "wfbp", "bucket"],
    "cluster.network": ["flow", "analytical"],
    "cluster.topology": ["star", "leaf-spine", "ring"],
    "cluster.servers": [1, 2],
}
BASE = """
[cluster]
fabric = "ib-hdr"
[run]
seed = 1
"""
TINY = {"cluster.workers": 3, "workload.samples": 120, "workload.features": 12,
        "workload.hidden": "[4]", "workload.batch": 4, "run.iterations": 4,
        "run.eval_every": 2, "strategy.local_steps": 2}
KEY = re.compile(r"\b(workload|strategy|cluster|compute|run|sweep)\.[a-z_]+")
points = st.fixed_dictionaries({key: st.sampled_from(values) for key, values in AXES.items()})


def base_config(tmp_path) -> str:
    path = tmp_path / "base.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(BASE)
    return str(path)


def run_point(point: dict, tmp_path, capsys) -> tuple[int, str]:
    sets = {**TINY, **point}
    if point["cluster.topology"] == "leaf-spine":
        sets["cluster.hosts_per_leaf"] = 2  # two leaves: traffic crosses the spine
    argv = ["run", base_config(tmp_path), "--out", str(tmp_path / "run")]
    for key, value in sets.items():
        argv += ["--set", f"{key}={value}"]
    capsys.readouterr()
    status = main(argv)
    return status, capsys.readouterr().err


@settings(max_examples=120, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(point=points)
def test_every_point_runs_or_is_refused_with_one_line(point, tmp_path_factory, capsys):
    tmp_path = tmp_path_factory.mktemp("grid")
    status, err = run_point(point, tmp_path, capsys)
    run_dir = tmp_path / "run"
    event(f"exit {status}")
    if status == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), (point, err)
        assert KEY.search(lines[0]), (point, lines[0])  # names the key at fault
        assert not run_dir.exists(), point  # refused before anything was written
        return
    assert status == 0, (point, err)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["iterations"] > 0, point
    for key in ("sim_time_s", "final_loss"):
        assert math.isfinite(summary[key]), (point, key, summary[key])


FIRST = {key: values[0] for key, values in AXES.items()}


def test_the_issue_example_runs_mlp_and_softmax_on_two_classes(tmp_path, capsys):
    """The gaussian data set's default 2 classes with multiclass models (a crash before)."""
    for model in ("mlp", "softmax"):
        status, err = run_point({**FIRST, "workload.model": model}, tmp_path / model, capsys)
        assert status == 0, err


def test_every_strategy_and_topology_runs_on_the_first_levels(tmp_path, capsys):
    """The grid test's refusals are not all there is: these points must run."""
    for kind in AXES["strategy.kind"]:
        for topology in AXES["cluster.topology"]:
            point = {**FIRST, "strategy.kind": kind, "cluster.topology": topology}
            status, err = run_point(point, tmp_path / f"{kind}-{topology}", capsys)
            assert status == 0, (point, err)


# what real runs accept (the rest is refused, as test_real_runs checks): no compression,
# pipelining on bsp only
REAL_AXES = {**{key: AXES[key] for key in ("workload.model", "workload.dataset",
                                           "workload.classes", "cluster.servers")},
             "strategy.kind": ["bsp", "bsp-ps", "backup", "asp", "ssp"],
             "strategy.pipelining": ["none", "wfbp"]}
real_points = st.fixed_dictionaries({key: st.sampled_from(values)
                                     for key, values in REAL_AXES.items()})


@settings(max_examples=16, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@pytest.mark.ranks
@given(point=real_points)
def test_every_real_point_runs_or_is_refused_with_one_line(point, tmp_path_factory, capsys):
    """``sim real`` on 2 ranks: the same contract (refusals before anything is written)."""
    pytest.importorskip("mpi4py")
    tmp_path = tmp_path_factory.mktemp("real")
    argv = ["real", base_config(tmp_path), "--out", str(tmp_path / "run")]
    for key, value in {**TINY, "cluster.workers": 2, **point}.items():
        argv += ["--set", f"{key}={value}"]
    capsys.readouterr()
    status = main(argv)
    err = capsys.readouterr().err
    event(f"exit {status}")
    if status == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), (point, err)
        assert KEY.search(lines[0]), (point, lines[0])
        assert not (tmp_path / "run").exists(), point
        return
    assert status == 0, (point, err)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert math.isfinite(summary["final_loss"]) and summary["iterations"] > 0, point


def test_a_coupled_sweep_key_is_overridden_whole():
    from sim.sweep.grid import load_sweep

    root = Path(__file__).resolve().parents[2]
    sweep = load_sweep(root / "experiments" / "wide-deep.toml",
                       ["sweep.workload.zipf_exponent,run.target_loss=[[0.6, 0.63]]",
                        'sweep.cluster.fabric=["ib-hdr"]'])
    assert len(sweep.points) == 10  # the 10 placements, one data set, one fabric
    assert {(p.values["workload.zipf_exponent"], p.values["run.target_loss"])
            for p in sweep.points} == {(0.6, 0.63)}
