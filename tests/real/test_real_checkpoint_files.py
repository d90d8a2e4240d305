"""Checkpoint files of real runs: atomic, checksummed, the newest valid one read (no MPI)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sim.real.executors import checkpoint as ckpt
from sim.real.launch.launcher import RunFailed
from sim.real.launch.relaunch import run_restarting
from sim.training.validator import load_config
from sim.training.workload import build_workload


def saved(update: int, size: int = 5) -> ckpt.Saved:
    rng = np.random.default_rng(update)
    return ckpt.Saved(update, rng.normal(size=size), rng.normal(size=size), [update, update],
                      {"taken_s": 0.25 * update})


def test_a_checkpoint_round_trips_exactly_and_leaves_no_temporary_file(tmp_path):
    original = saved(20)
    path = ckpt.save(tmp_path, original)
    assert path == ckpt.path_for(tmp_path, 20)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
    back = ckpt.load(path)
    assert back.update == 20 and back.batches == [20, 20]
    assert back.params.tobytes() == original.params.tobytes()
    assert back.velocity.tobytes() == original.velocity.tobytes()
    assert back.meta == {"taken_s": 5.0}
    no_momentum = ckpt.load(ckpt.save(tmp_path, ckpt.Saved(30, np.ones(3))))
    assert no_momentum.velocity is None


def test_records_beside_checkpoints_are_read_back_in_order_up_to_one(tmp_path):
    for update in (10, 20, 30):
        for rank in (0, 1):
            ckpt.save_record(tmp_path, update, rank, {"update": update, "rank": rank})
    assert ckpt.record_updates(tmp_path, 1, 20) == [10, 20]
    assert ckpt.load_records(tmp_path, 1, [10, 20]) == [{"update": 10, "rank": 1},
                                                        {"update": 20, "rank": 1}]
    ckpt.record_path(tmp_path, 20, 0).write_bytes(b"not a pickle")
    with pytest.raises(ckpt.CorruptCheckpoint, match="record of checkpoint 20"):
        ckpt.load_records(tmp_path, 0, [10, 20])


def test_the_header_holds_the_format_length_and_sha256(tmp_path):
    path = ckpt.write_file(tmp_path / "x.sgd", b"payload")
    magic, header, payload = path.read_bytes().split(b"\n", 2)
    assert magic + b"\n" == ckpt.MAGIC and payload == b"payload"
    fields = json.loads(header)
    assert fields["format"] == "npz" and fields["length"] == 7
    assert ckpt.read_file(path) == ("npz", b"payload")


@pytest.mark.parametrize("damage, reason", [
    (lambda data: data[:-40], "truncated"),
    (lambda data: data[:-40] + bytes([data[-40] ^ 0x01]) + data[-39:], "checksum mismatch"),
    (lambda data: b"garbage" + data, "bad magic"),
], ids=["truncated", "bit-flipped", "not-a-checkpoint"])
def test_a_damaged_newest_checkpoint_is_skipped_with_one_line_and_the_previous_used(
        tmp_path, damage, reason):
    for update in (10, 20, 30):
        ckpt.save(tmp_path, saved(update))
    newest = ckpt.path_for(tmp_path, 30)
    newest.write_bytes(damage(newest.read_bytes()))
    with pytest.raises(ckpt.CorruptCheckpoint, match=reason):
        ckpt.load(newest)
    found, notes = ckpt.load_latest(tmp_path)
    assert found.update == 20
    assert found.params.tobytes() == saved(20).params.tobytes()
    assert len(notes) == 1 and "ckpt-000000030.sgd skipped" in notes[0] and reason in notes[0]
    assert "\n" not in notes[0]


def test_no_valid_checkpoint_means_starting_from_the_beginning(tmp_path):
    assert ckpt.load_latest(tmp_path) == (None, [])
    ckpt.save(tmp_path, saved(10))
    path = ckpt.path_for(tmp_path, 10)
    path.write_bytes(path.read_bytes()[:30])
    found, notes = ckpt.load_latest(tmp_path)
    assert found is None and len(notes) == 1


def test_skipping_batches_is_drawing_them(tmp_path):
    config_path = tmp_path / "c.toml"
    config_path.write_text('[cluster]\nworkers = 2\n[workload]\nmodel = "logreg"\n'
                           'samples = 300\nbatch = 16\n[run]\nseed = 5\n')
    drawn, skipped = build_workload(load_config(config_path)), build_workload(
        load_config(config_path))
    for _ in range(23):  # past an epoch's end: a shard of ~120 rows is 7 batches
        drawn.workers[1].next_batch()
    ckpt.skip_batches(skipped.workers[1], 23)
    for _ in range(3):
        a, b = drawn.workers[1].next_batch(), skipped.workers[1].next_batch()
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_a_restart_resumes_from_the_newest_valid_checkpoint_and_says_so(tmp_path, capsys):
    """The runner's side, with a stand-in for the job: the first job writes checkpoints 10
    and 20, the newer is corrupted, the planned kill takes the job down; the second job is
    told to resume from 10, with the spans the failure cost."""
    config_path = tmp_path / "c.toml"
    config_path.write_text('[cluster]\nworkers = 2\n[strategy]\nkind = "bsp"\n'
                           '[run]\niterations = 60\n[checkpoint]\nevery_steps = 10\n'
                           '[faults]\nfailures = [{rank = 1, at_update = 25}]\n')
    config = load_config(config_path)
    specs = []
    summary = {"iterations": 60, "sim_time_s": 2.0,
               "workers": [{"recompute": 0.3, "restart": 1.0, "checkpoint": 0.1}] * 2}

    def launch(spec, records):
        specs.append(json.loads(json.dumps(spec)))
        if len(specs) == 1:
            for update in (10, 20):
                ckpt.save(tmp_path / "ck", saved(update))
            newest = ckpt.path_for(tmp_path / "ck", 20)
            newest.write_bytes(newest.read_bytes()[:-5])
            records.update({"killed": [{"rank": 1, "failure": 0, "update": 25, "at_s": 0.9}],
                            "clock": {"t0": 123.0, "start_s": 0.0},
                            "checkpoints": {10: (0.2, 0.25), 20: (0.5, 0.55)}})
            raise RunFailed("rank 1 died")
        return {"summary.json": json.dumps(summary)}

    files = run_restarting(config, tmp_path / "ck", launch)
    assert specs[0]["resume"] is None and specs[0]["origin"] is None
    resume = specs[1]["resume"]
    assert resume["path"].endswith("ckpt-000000010.sgd") and resume["kill_s"] == 0.9
    # (checkpoint 10's own span is in the ranks' records beside it)
    assert resume["gaps"] == [["recompute", 0.25, 0.9]]
    assert specs[1]["done"] == [0] and specs[1]["origin"] == 123.0
    err = capsys.readouterr().err
    assert "ckpt-000000020.sgd skipped: truncated" in err
    result = json.loads(files["summary.json"])
    assert result["failures"] == 1 and result["recovery"] == "restart"
    assert result["lost_updates"] == 15 and result["lost_work_s"] == 0.3
    assert result["goodput_updates_per_s"] == 30.0


def test_a_failure_that_is_not_the_planned_kill_still_fails_the_run(tmp_path):
    config_path = tmp_path / "c.toml"
    config_path.write_text('[cluster]\nworkers = 2\n[run]\niterations = 60\n'
                           '[faults]\nfailures = [{rank = 1, at_update = 25}]\n')

    def launch(spec, records):
        records.update({"killed": [], "clock": None, "checkpoints": {}})
        raise RunFailed("rank 0 failed: ValueError: boom")

    with pytest.raises(RunFailed, match="boom"):
        run_restarting(load_config(config_path), tmp_path / "ck", launch)
