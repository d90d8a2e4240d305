"""summary.json says which workers straggled (fixed stragglers and compute.slowdowns) and
which clock its times are on: "simulated" for `sim run`, "wall" for `sim real`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomli_w

from sim.cli import main

TINY = {"cluster": {"workers": 4, "fabric": "ib-hdr"},
        "workload": {"features": 8, "samples": 256, "batch": 8},
        "compute": {"time_s": 1e-3},
        "strategy": {"kind": "asp"},
        "run": {"iterations": 8, "eval_every": 4, "seed": 1}}


def run(tmp_path: Path, command: str, **compute: object) -> dict:
    config = {**TINY, "compute": {**TINY["compute"], **compute}}
    if command == "real":
        config = {**config, "cluster": {"workers": 2}}
    path = tmp_path / "exp.toml"
    path.write_text(tomli_w.dumps(config))
    out = tmp_path / command
    assert main([command, str(path), "--out", str(out)]) == 0
    return json.loads((out / "summary.json").read_text())


def test_named_slowdowns_make_their_workers_stragglers_with_their_windows(tmp_path):
    summary = run(tmp_path, "run", slowdowns=[
        {"worker": 2, "factor": 5.0, "start_s": 0.0, "end_s": 0.01},
        {"worker": 3, "factor": 1.0}])  # a factor of 1 slows nothing
    assert summary["stragglers"] == [2]
    assert summary["slowdowns"] == [{"worker": 2, "factor": 5.0, "start_s": 0.0,
                                     "end_s": 0.01}]
    assert summary["clock"] == "simulated"


def test_fixed_stragglers_come_first_and_every_slowed_worker_is_listed_once(tmp_path):
    summary = run(tmp_path, "run", straggler_fraction=0.25, straggler_slowdown=3.0,
                  slowdowns=[{"worker": 0, "factor": 2.0, "start_s": 0.002}])
    fixed, named = summary["slowdowns"]
    assert fixed["factor"] == 3.0 and (fixed["start_s"], fixed["end_s"]) == (0.0, None)
    assert named == {"worker": 0, "factor": 2.0, "start_s": 0.002, "end_s": None}
    assert summary["stragglers"] == sorted({fixed["worker"], 0})


def test_no_slowdowns_no_stragglers(tmp_path):
    summary = run(tmp_path, "run")
    assert summary["stragglers"] == [] and summary["slowdowns"] == []


def test_a_real_run_says_its_times_are_wall_clock(tmp_path):
    pytest.importorskip("mpi4py")
    summary = run(tmp_path, "real", slowdowns=[{"worker": 1, "factor": 2.0}])
    assert (summary["clock"], summary["kind"]) == ("wall", "real")
    assert summary["stragglers"] == [1]
    assert summary["slowdowns"] == [{"worker": 1, "factor": 2.0, "start_s": 0.0,
                                     "end_s": None}]
    assert summary["sim_time_s"] > 0  # the result contract's key, kept for existing readers
