"""``sim validate --sched``: which discipline a case's real repeats get, and its twin's."""

from __future__ import annotations

import json
from pathlib import Path

import sim.real.launch.real_run as real_run
from sim.network.fabrics import Fabric, save_profile
from sim.training.compute_model import save_device_profile
from sim.training.validator import validate_real
from sim.validation.matrix import case_config, case_sched, expand, load_matrix, recorded_sched

VALIDATION = Path(__file__).resolve().parents[2] / "experiments" / "validation"


def profiles_for(root: Path) -> dict[str, Path]:
    """Hand-made device and shared-memory profiles, no host profile."""
    (root / "device").mkdir(parents=True)
    (root / "shm").mkdir()
    save_device_profile(root / "device" / "device.json", 1e10, 1e-5, "test", points=[])
    save_profile(root / "shm" / "fabric.json", Fabric("t", 8e9, 1e-6, 1e-6), source="test")
    return {"device": root / "device", "host": root / "host", "shm": root / "shm"}


def case(*levels: str):
    matrix = load_matrix(VALIDATION / "matrix.toml")
    return matrix, expand(matrix, list(levels))[0]


def test_a_case_twin_shares_cores_as_its_real_repeats(tmp_path):
    matrix, asp = case("workers=4", "strategy=asp", "model=large", "network=shm")
    profiles = profiles_for(tmp_path)
    assert case_config(matrix, asp, profiles).cluster.sched == "default"
    assert case_config(matrix, asp, profiles, "fifo").cluster.sched == "fifo"


def test_cases_that_cannot_keep_to_fifo_run_under_the_default(tmp_path, monkeypatch):
    monkeypatch.setattr(real_run, "fifo_refused", lambda: None)
    profiles = profiles_for(tmp_path)
    matrix, asp = case("workers=4", "strategy=asp", "model=large", "network=shm")
    config = case_config(matrix, asp, profiles)
    assert case_sched("fifo", validate_real(config, "shm")) == "fifo"
    assert case_sched("default", validate_real(config, "shm")) == "default"
    monkeypatch.setattr(real_run, "fifo_refused", lambda: "refused (test)")
    assert case_sched("fifo", validate_real(config, "shm")) == "default"


def test_the_twin_of_a_real_run_reads_the_discipline_it_recorded(tmp_path):
    assert recorded_sched(tmp_path) == "default"  # nothing recorded: the default
    (tmp_path / "r0").mkdir()
    (tmp_path / "r0" / "summary.json").write_text(json.dumps({"sched": "fifo"}))
    assert recorded_sched(tmp_path) == "fifo"


def test_restarted_and_grpc_runs_are_not_fifo():
    from types import SimpleNamespace as Real

    unsupported = real_run.sched_unsupported
    assert "faults" in unsupported(Real(recovery="restart", transport="mpi"))
    assert "grpc" in unsupported(Real(recovery=None, transport="grpc"))
    assert unsupported(Real(recovery=None, transport="mpi")) is None
