"""``sim real --twin --profiles DIR`` refuses a device fitted on other workloads than the
config's (issue 47, item 0): logistic regression's fit applied to an MLP put the twin's
compute 181% off without a word. Function-level, no MPI; the command's exit 2 is checked
before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.calibration.measure_device import describe_workload, timed_workloads
from sim.cli import main
from sim.errors import UserError
from sim.network.fabrics import Fabric, save_profile
from sim.training.compute_model import save_device_profile
from sim.training.validator import validate
from sim.validation.twin import stored

LOGREG = {"cluster": {"workers": 2},
          "workload": {"model": "logreg", "features": 3000, "batch": 48}}
MLP = {"cluster": {"workers": 2},
       "workload": {"model": "mlp", "features": 3000, "classes": 3, "hidden": [256, 256],
                    "batch": 64}}


def profiles(place: Path, *timed: dict) -> Path:
    """A calibration's profiles/ (device and shared memory) whose device timed ``timed``'s
    workloads, one point each, written through the profiles' own writers."""
    (place / "device").mkdir(parents=True)
    (place / "shm").mkdir()
    points = []
    for data in timed:
        config = validate(data)
        points.append({"workload": describe_workload(config), "flops": 1e6, "traffic": 0.0,
                       "activations": 0.0, "lookups": 0.0, "seconds": 1e-4})
    save_device_profile(place / "device" / "device.json", 13e9, 5e-6, "test", points=points)
    save_profile(place / "shm" / "fabric.json", Fabric("t", 8e9, 1e-6, 1e-6), source="test")
    return place


def test_a_device_fitted_on_other_workloads_is_refused_in_one_line(tmp_path):
    place = profiles(tmp_path / "profiles", LOGREG)
    with pytest.raises(UserError) as refused:
        stored(validate(MLP), "shm", place)
    message = str(refused.value)
    assert "\n" not in message
    assert str(place) in message and "device/device.json" in message
    assert "logreg 3000 x2 batch 48" in message  # what it was fitted on
    assert "mlp 3000-256-256 x3 batch 64" in message  # the config's workload
    assert "drop --profiles" in message


def test_a_device_that_timed_the_workload_is_accepted(tmp_path):
    """As `sim validate --profiles` reuses one calibration over the many workloads it timed:
    a device fitted on several workloads serves each of them."""
    place = profiles(tmp_path / "profiles", LOGREG, MLP)
    found = stored(validate(MLP), "shm", place)
    assert found["device"] == place / "device"
    assert stored(validate(LOGREG), "shm", place)["shm"] == place / "shm"


def test_a_modelled_compute_time_needs_no_fitted_device(tmp_path):
    place = profiles(tmp_path / "profiles", LOGREG)
    modelled = validate({**MLP, "compute": {"time_s": 2e-3}})
    assert stored(modelled, "shm", place)["device"] == place / "device"


def test_a_device_without_points_timed_nothing(tmp_path):
    place = profiles(tmp_path / "profiles")
    assert timed_workloads({"flops_per_s": 1e10}) == []
    with pytest.raises(UserError, match="no recorded workload"):
        stored(validate(LOGREG), "shm", place)


def test_sim_real_exits_2_before_running(tmp_path, write_toml, capsys):
    place = profiles(tmp_path / "profiles", LOGREG)
    config = write_toml(tmp_path / "mlp.toml", MLP)
    out = tmp_path / "real"
    assert main(["real", str(config), "--out", str(out), "--twin", "--profiles",
                 str(place)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --profiles")
    assert "was fitted on logreg 3000 x2 batch 48" in err
    assert not out.exists()  # refused before the real run
