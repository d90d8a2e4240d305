"""The validation's killed-and-restarted cases: the recovery calibration (checkpoint files
and the restart delay, sim.calibration), the matrix's faults axis (the old
cases keep their names) and the calibrated profiles in a killed case's config."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sim.calibration import fit_recovery, measure_storage, profiles
from sim.calibration import recovery_profile as R
from sim.calibration.measure_device import describe_workload
from sim.calibration.measure_recovery import restart_job
from sim.calibration.sequence import calibrate_recovery
from sim.cli import main
from sim.errors import UserError
from sim.faults.storage import get_storage
from sim.network.fabrics import Fabric, save_profile
from sim.network.transports import get_transport, save_transport
from sim.training.compute_model import save_device_profile
from sim.training.validator import validate
from sim.validation.matrix import case_config, expand, load_matrix, toml_value

pytest.importorskip("mpi4py")

VALIDATION = Path(__file__).resolve().parents[2] / "experiments" / "validation"


@pytest.fixture
def tiny(two_rank_config_data) -> dict:
    """The shared two-rank workload under bsp, 0.5 ms a gradient, 20 updates (an eval every
    5)."""
    return two_rank_config_data({"strategy.kind": "bsp", "compute.time_s": 5e-4,
                                 "run.iterations": 20, "run.eval_every": 5})


def test_fit_rate_recovers_latency_and_rate():
    nbytes = [1e3, 1e5, 1e7]
    fit = fit_recovery.fit_rate(nbytes, [1e-3 + n / 2e8 for n in nbytes])
    assert fit["latency_s"] == pytest.approx(1e-3) and fit["rate_Bps"] == pytest.approx(2e8)
    assert fit["max_error"] < 1e-9
    flat = fit_recovery.fit_rate(nbytes, [3e-3, 2e-3, 1e-3])  # no growth with size: a pure latency
    assert flat["rate_Bps"] == float("inf") and flat["latency_s"] == 2e-3


def test_recovery_calibration_writes_profiles_the_simulator_reads(tmp_path, monkeypatch, tiny):
    monkeypatch.setattr(measure_storage, "QUICK_SIZES", [1_000, 64_000])
    config = validate(tiny)
    lines = calibrate_recovery(tmp_path / "rec", [config], quick=True)
    storage = get_storage(f"calibrated:{tmp_path / 'rec' / 'storage.json'}")
    assert storage.write_Bps > 0 and storage.read_Bps > 0 and storage.latency_s >= 0
    assert "write_file" in storage.source and "load_latest" in storage.source
    assert storage.write_s(64_000) > 0
    profile = json.loads((tmp_path / "rec" / "storage.json").read_text())
    assert [p["bytes"] for p in profile["points"]][0] > 1_000  # the file, header included
    assert all("write_error" in p and "read_error" in p for p in profile["points"])
    (point,) = json.loads((tmp_path / "rec" / "recovery.json").read_text())["points"]
    assert 0 < point["restart_s"] < point["restart_time_s"][0]  # the read taken out
    assert R.restart_for(tmp_path / "rec" / "recovery.json", config) == point["restart_s"]
    other = validate({**tiny, "cluster": {"workers": 3}})  # not measured: the profile's
    assert R.restart_for(tmp_path / "rec" / "recovery.json", other) == point["restart_s"]
    assert not list((tmp_path / "rec").glob(".probe*"))  # the files timed are gone
    text = "\n".join(lines)
    assert "fit errors" in text and f"faults.restart_s = {point['restart_s']:.3f}" in text
    assert f'checkpoint.storage = "calibrated:{tmp_path / "rec" / "storage.json"}"' in text


def test_the_restart_job_is_a_short_killed_bsp_run(tiny):
    job = restart_job(validate({**tiny, "strategy": {"kind": "asp"},
                                  "checkpoint": {"every_s": 1.0}}))
    assert job.strategy.kind == "bsp" and job.run.iterations == 3
    assert [(f.rank, f.at_update) for f in job.faults.failures] == [(1, 2)]
    assert job.checkpoint.every_steps == 1 and job.checkpoint.every_s is None
    assert job.workload == validate(tiny).workload
    assert R.config_key(job) == R.config_key(validate(tiny))


def test_the_matrix_gains_the_killed_and_grpc_cases_and_keeps_the_old_names():
    matrix = load_matrix(VALIDATION / "matrix.toml")
    cases = expand(matrix)
    kept = set(json.loads((VALIDATION / "real.json").read_text())["real_s"])
    # the cases from before the faults, parallel and tables axes keep their names (and
    # real.json keys)
    old = {c.name for c in cases
           if c.levels["faults"] == c.levels["parallel"] == c.levels["tables"] == "none"
           and c.levels["model"] != "widedeep" and c.levels["transport"] == "mpi"}
    assert len(old) == 65 and kept <= {c.name for c in cases} and len(cases) == 87
    killed = expand(matrix, ["faults=killed"])
    assert [c.name for c in killed] == ["w2-bsp-shm-small-none-none-killed",
                                        "w2-bsp-shm-kernel-none-none-killed"]
    assert all(c.overrides["faults.failures"] == [{"rank": 1, "at_update": 50}]
               for c in killed)


def test_the_grpc_cases_are_simulated_on_the_calibrated_transport(tmp_path, tiny):
    matrix = load_matrix(VALIDATION / "matrix.toml")
    grpc = expand(matrix, ["transport=grpc"])
    assert len(grpc) == 8 and all(c.name.endswith("-grpc") for c in grpc)
    profiles = profiles_for(tmp_path, validate(tiny))
    with pytest.raises(UserError, match="sim calibrate --only transport"):
        case_config(matrix, grpc[0], profiles)
    (tmp_path / "transport").mkdir()
    save_transport(tmp_path / "transport" / "transport.json",
                   dataclasses.replace(get_transport("grpc"), rpc_s=150e-6))
    config = case_config(matrix, grpc[0], {**profiles, "transport": tmp_path / "transport"})
    assert config.cluster.transport == \
        f"calibrated:{tmp_path / 'transport' / 'transport.json'}"
    assert get_transport(config.cluster.transport).rpc_s == 150e-6
    twin = expand(matrix, [f"{axis}={level}" for axis, level in grpc[0].levels.items()
                           if axis != "transport"] + ["transport=mpi"])[0]
    assert case_config(matrix, twin, profiles).cluster.transport == "mpi"


def test_an_unnamed_level_must_be_a_level_of_an_axis(tmp_path):
    (tmp_path / "base.toml").write_text("")
    (tmp_path / "m.toml").write_text('[axes]\nworkers = [2]\nfaults = ["none"]\n'
                                     '[levels.faults.none]\n[unnamed]\nfaults = "off"\n')
    with pytest.raises(UserError, match=r"\[unnamed\] faults = 'off'"):
        load_matrix(tmp_path / "m.toml")


def test_toml_value_writes_inline_tables():
    assert toml_value([{"rank": 1, "at_update": 50}]) == '[{"rank" = 1, "at_update" = 50}]'
    assert toml_value("a\"b") == '"a\\"b"' and toml_value(2e-3) == "0.002"


def profiles_for(root: Path, config) -> dict[str, Path]:
    """Hand-made profiles: device, shared memory, and recovery (restart 0.5 s for
    ``config``'s workload, 0.7 s for others)."""
    (root / "device").mkdir(parents=True)
    (root / "shm").mkdir()
    save_device_profile(root / "device" / "device.json", 1e10, 1e-5, "test", points=[])
    save_profile(root / "shm" / "fabric.json", Fabric("t", 8e9, 1e-6, 1e-6), source="test")
    points = [{"bytes": n, "write_s": 1e-3 + n / 1e8, "read_s": 5e-4 + n / 2e8}
              for n in (1e3, 1e5, 1e6)]
    (root / "recovery").mkdir()
    storage, fits = fit_recovery.fit_storage(points, measure_storage.where(root), 1)
    profiles.write_storage(root / "recovery" / "storage.json", storage, fits, points)
    restarts = [{"workload": "this", "key": R.config_key(config),
                 "restart_s": 0.5}, {"workload": "other", "key": "else", "restart_s": 0.9}]
    profiles.write_recovery(root / "recovery" / "recovery.json",
                            fit_recovery.fit_recovery(restarts, 1), restarts)
    return {"device": root / "device", "host": root / "host", "shm": root / "shm",
            "recovery": root / "recovery"}


def test_a_killed_case_is_simulated_on_the_calibrated_storage_and_restart(tmp_path, tiny):
    matrix = load_matrix(VALIDATION / "matrix.toml")
    killed = expand(matrix, ["faults=killed", "model=small"])[0]
    plain = expand(matrix, ["faults=none", "model=small", "workers=2", "strategy=bsp",
                            "network=shm", "stragglers=none"])[0]
    profiles = profiles_for(tmp_path, validate(tiny))  # not the small model's restart
    config = case_config(matrix, killed, profiles)
    assert [(f.rank, f.at_update) for f in config.faults.failures] == [(1, 50)]
    assert config.checkpoint.every_steps == 20
    assert config.checkpoint.storage == f"calibrated:{tmp_path / 'recovery' / 'storage.json'}"
    assert config.faults.restart_s == 0.7  # median over the profile: small's not measured
    none = case_config(matrix, plain, profiles)
    assert not none.faults.failures and none.checkpoint.every_steps is None
    assert none.checkpoint.storage == "nvme"  # untouched without faults


def test_validate_runs_a_killed_case_and_reports_its_restart(tmp_path, capsys, tiny):
    base = {**tiny, "run": {"iterations": 20, "eval_every": 5, "target_loss": 0.6}}
    (tmp_path / "base.toml").write_text(
        "\n".join(f"[{k}]\n" + "\n".join(f"{kk} = {toml_value(vv)}" for kk, vv in v.items())
                  for k, v in base.items()) + "\n")
    (tmp_path / "matrix.toml").write_text(
        'base = "base.toml"\nrepeat = 1\n[axes]\nworkers = [2]\nstrategy = ["bsp"]\n'
        'network = ["shm"]\nfaults = ["none", "killed"]\n[unnamed]\nfaults = "none"\n'
        '[levels.faults.none]\n[levels.faults.killed]\n'
        '"faults.failures" = [{rank = 1, at_update = 10}]\n"checkpoint.every_steps" = 4\n')
    profiles_for(tmp_path / "profiles", validate(base))
    assert main(["validate", "--matrix", str(tmp_path / "matrix.toml"), "--out",
                 str(tmp_path / "runs"), "--profiles", str(tmp_path / "profiles"),
                 "--quiet-wait", "0", "--retries", "0"]) == 0
    rows = json.loads((tmp_path / "runs" / "rows.json").read_text())
    assert [r["case"] for r in rows] == ["w2-bsp-shm", "w2-bsp-shm-killed"]
    assert rows[0]["report"]["faults"] is None
    faults = rows[1]["report"]["faults"]
    assert faults["failures"] == {"sim": 1, "real": [1]}
    assert faults["checkpoints"] == {"sim": 4, "real": [4]}  # after 4, 8, 12, 16
    sim = json.loads((tmp_path / "runs" / "cases" / "w2-bsp-shm-killed" / "sim" /
                      "summary.json").read_text())
    assert sim["restart_delay_s"] == 0.5  # the calibrated delay, then the read
    assert faults["restart_time_s"]["sim"] == pytest.approx(0.5 + sim["checkpoint_read_s"])
    assert faults["restart_time_s"]["real"]["mean"] > 0.1  # a new mpiexec and start-up
    assert "restart" in rows[1]["report"]["breakdown"]["kinds"]
    text = (tmp_path / "README.md").read_text()
    assert "## Failures and restarts" in text and "| w2-bsp-shm-killed |" in text
    assert "restart delay" in text  # the recovery profile among the calibrated ones
    assert not list((tmp_path / "runs" / "cases" / "w2-bsp-shm-killed").glob(".check*"))


def test_sim_calibrate_only_recovery_writes_both_profiles(tmp_path, capsys, monkeypatch, tiny):
    monkeypatch.setattr(measure_storage, "QUICK_SIZES", [1_000, 64_000])
    workload = tmp_path / "w.toml"
    workload.write_text("\n".join(f"[{k}]\n" + "\n".join(
        f"{kk} = {toml_value(vv)}" for kk, vv in v.items()) for k, v in tiny.items()) + "\n")
    assert main(["calibrate", "--out", str(tmp_path / "p"), "--only", "recovery", "--quick",
                 "--workload", str(workload)]) == 0
    printed = capsys.readouterr().out
    assert f'checkpoint.storage = "calibrated:{tmp_path / "p" / "storage.json"}"' in printed
    assert "faults.restart_s = " in printed and "restart:" in printed
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["recovery.json",
                                                                  "storage.json"]


def test_restart_for_survives_keys_a_later_lab_adds(tmp_path, tiny):
    """A point keyed by an older lab (another key) is still found by its workload's name and
    ranks; a key over the non-default workload keys ignores keys added with defaults."""

    config = validate(tiny)
    kernel = validate({**tiny, "workload": {**tiny.get("workload", {}), "batch": 24}})
    points = [{"workload": describe_workload(config), "ranks": config.cluster.workers,
               "key": "0123456789abcdef", "restart_s": 0.5},
              {"workload": describe_workload(kernel), "ranks": kernel.cluster.workers,
               "key": "fedcba9876543210", "restart_s": 0.9}]
    path = tmp_path / "recovery.json"
    path.write_text(json.dumps({"format": R.RECOVERY_FORMAT, "restart_s": 0.7,
                                "points": points}))
    assert R.restart_for(path, config) == 0.5 and R.restart_for(path, kernel) == 0.9
    dump = config.workload.model_dump(mode="json", exclude_defaults=True)
    assert "embedding_dim" not in dump  # a default: not in the key
    assert R.config_key(config) == R.config_key(validate({**tiny, "workload": {
        **tiny.get("workload", {}), "embedding_dim": config.workload.embedding_dim}}))
