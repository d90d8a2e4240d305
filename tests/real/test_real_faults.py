"""Real runs under ``[faults]`` and ``[checkpoint]``: a planned SIGKILL of a rank; bsp
restarts from its newest checkpoint and ends bit for bit where an uninterrupted run ends;
asp and ssp carry on without the dead worker; what real runs refuse exits 2."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import tomli_w

from sim.cli import main
from sim.real.executors import checkpoint as ckpt
from sim.recorder import KINDS

pytest.importorskip("mpi4py")


@pytest.fixture
def base(tiny_real_config_data):
    """``base(kind)``: the shared tiny real config for ``kind`` as TOML text, with momentum
    (a checkpoint then holds its buffer too), a longer run and ssp's bound 1 (no backup
    worker)."""
    def text(kind: str) -> str:
        return tomli_w.dumps(tiny_real_config_data(
            workload__momentum=0.9, strategy__kind=kind, strategy__backup=None,
            run__iterations=60))

    return text


CHECKPOINTS = "[checkpoint]\nevery_steps = 10\n"
LIMITS = ["--timeout", "60", "--hang-timeout", "20"]  # nothing may hang


def run(tmp_path: Path, name: str, text: str, *extra: str) -> Path:
    config, out = tmp_path / f"{name}.toml", tmp_path / name
    config.write_text(text)
    assert main(["real", str(config), "--out", str(out), *LIMITS, *extra]) == 0
    return out


def rows(out: Path) -> list[tuple[str, ...]]:
    """metrics.csv without its times: what an uninterrupted run must equal."""
    with (out / "metrics.csv").open() as f:
        return [(r["kind"], r["iteration"], r["worker"], r["loss"], r["accuracy"])
                for r in csv.DictReader(f)]


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_bsp_killed_and_restarted_is_the_uninterrupted_run_bit_for_bit(tmp_path, base):
    plain = run(tmp_path, "plain", base("bsp") + CHECKPOINTS)
    killed = run(tmp_path, "killed", base("bsp") + CHECKPOINTS +
                 "[faults]\nfailures = [{rank = 1, at_update = 25}]\n")
    assert rows(killed) == rows(plain) and len(rows(plain)) == 60 + 13
    a, b = summary(plain), summary(killed)
    assert a["final_loss"] == b["final_loss"] and a["final_accuracy"] == b["final_accuracy"]
    for update in (30, 50):  # written after the restart: the same parameters and momentum
        x, y = (ckpt.load(ckpt.path_for(out / "checkpoints", update)) for out in (plain, killed))
        assert x.params.tobytes() == y.params.tobytes()
        assert x.velocity.tobytes() == y.velocity.tobytes()
    assert b["recovery"] == "restart" and b["failures"] == 1 and a["failures"] == 0
    assert b["checkpoints"] == 5 and b["lost_updates"] == 5
    assert b["lost_work_s"] > 0 and b["checkpoint_time_s"] > 0
    assert b["restart_time_s"] > b["lost_work_s"]  # a new mpiexec, imports, warm-up
    assert b["goodput_updates_per_s"] == pytest.approx(60 / b["sim_time_s"])
    for worker in b["workers"]:  # the fault spans, and all of the run's time accounted for
        assert set(worker) == set(KINDS)
        assert worker["restart"] == pytest.approx(b["restart_time_s"], rel=0.01)
        assert sum(worker.values()) == pytest.approx(b["sim_time_s"], rel=0.05)
    with (killed / "metrics.csv").open() as f:  # one wall clock across the restart
        times = [float(r["time_s"]) for r in csv.DictReader(f) if r["kind"] == "update"]
    # updates 21.. are the resumed job's: after the restart and the work done again
    assert times == sorted(times)
    assert times[20] - times[19] > b["restart_time_s"] + b["lost_work_s"]


def test_bsp_killed_before_any_checkpoint_starts_again_from_the_start(tmp_path, base):
    plain = run(tmp_path, "plain", base("bsp"))
    killed = run(tmp_path, "killed", base("bsp") +
                 "[faults]\nfailures = [{rank = 0, at_s = 0.001}, "
                 "{rank = 1, at_update = 40}]\n")
    assert rows(killed) == rows(plain)
    b = summary(killed)
    assert b["failures"] == 2 and b["checkpoints"] == 0 and b["lost_updates"] >= 41
    assert b["lost_work_s"] > 0
    assert not (killed / "checkpoints").exists()


@pytest.mark.parametrize("kind", ["asp", "ssp", "backup"])
def test_a_dead_worker_is_dropped_and_the_others_finish_the_run(tmp_path, kind, base):
    out = run(tmp_path, kind, base(kind) +
              "[faults]\nfailures = [{rank = 1, at_update = 25}]\n")
    s = summary(out)
    assert s["iterations"] == 60 and s["recovery"] == "elastic" and s["failures"] == 1
    assert s["dead_workers"] == [1] and s["lost_work_s"] >= 0
    assert 0 <= s["detection_s"] < 5  # the server noticed the pid had gone
    assert s["restart_time_s"] > 0  # worker 1 is down from its death to the end
    updates = [r for r in rows(out) if r[0] == "update"]
    assert len(updates) == 60
    if kind != "backup":  # (a backup step is everyone's: worker -1)
        last_of_1 = max(i for i, r in enumerate(updates) if r[2] == "1")
        assert last_of_1 < 40 and all(r[2] == "0" for r in updates[last_of_1 + 1:])
    assert s["workers"][1]["restart"] == pytest.approx(s["restart_time_s"])


@pytest.mark.parametrize("text, message", [
    ("[faults]\nmtbf_s = 10.0\n", "faults.mtbf_s"),
    ("[faults]\nfailures = [{rank = 2, at_update = 5}]\n", "faults.failures: rank 2 is the "
     "parameter server"),
    ("[checkpoint]\nevery_steps = 5\n", "checkpoint.every_steps"),
], ids=["random-failures", "server-rank", "server-checkpoints"])
def test_what_real_runs_do_not_do_exits_2_naming_the_key(tmp_path, capsys, text, message, base):
    config = tmp_path / "c.toml"
    config.write_text(base("asp") + text)
    assert main(["real", str(config), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_bsp_ps_checkpoints_are_refused_for_real(tmp_path, capsys, base):
    config = tmp_path / "c.toml"
    config.write_text(base("bsp-ps") + CHECKPOINTS)
    assert main(["real", str(config), "--out", str(tmp_path / "out")]) == 2
    assert "checkpoint.every_steps" in capsys.readouterr().err
