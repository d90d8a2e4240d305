"""Failures and checkpoints in whole simulations: synchronous runs keep their numbers and
move in time by exactly the gaps; elastic runs carry on; bad settings exit 2."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cli import main
from sim.faults.storage import STORAGE, Storage, get_storage
from sim.faults.timeline import GAP_KINDS
from sim.recorder import KINDS
from sim.simulated.engine import build_simulation, simulate
from sim.trace import WORKERS
from tests.training_cases import MODELS, make

# runs of 40 updates take 0.2-0.4 ms fault-free
FAULTS = {"faults.failures": [{"rank": 1, "at_update": 13}, {"rank": 0, "at_s": 1e-4}],
          "faults.mtbf_s": 0.004, "faults.restart_s": 3e-4, "checkpoint.every_steps": 5}


def update_rows(result):
    rows = csv.DictReader(io.StringIO(result.metrics_csv))
    return [r for r in rows if r["kind"] == "update"]


@pytest.mark.parametrize("kind", ["bsp", "local-sgd", "bsp-ps"])
def test_a_restarted_synchronous_run_keeps_every_number_and_moves_by_the_gaps(kind):
    plain = simulate(make(strategy__kind=kind))
    faulty = simulate(make(FAULTS, strategy__kind=kind))
    s = faulty.summary
    assert s["final_loss"] == plain.summary["final_loss"]
    assert [r["loss"] for r in update_rows(faulty)] == [r["loss"] for r in update_rows(plain)]
    assert s["failures"] >= 2 and s["checkpoints"] == 7  # after 5, 10, ... 35
    gaps = s["checkpoint_time_s"] + s["restart_time_s"] + s["lost_work_s"]
    assert s["sim_time_s"] == pytest.approx(plain.summary["sim_time_s"] + gaps, rel=1e-12)
    assert s["recompute_s"] == pytest.approx(s["lost_work_s"])
    # every worker's activities add up to the run's time
    for worker in s["workers"]:
        assert sum(worker.values()) == pytest.approx(s["sim_time_s"], rel=1e-9)
    assert s["goodput_updates_per_s"] == pytest.approx(40 / s["sim_time_s"])


def test_update_times_are_the_fault_free_ones_plus_the_gaps_before_them():
    plain = simulate(make())
    faulty = simulate(make(FAULTS))
    before = np.array([float(r["time_s"]) for r in update_rows(plain)])
    after = np.array([float(r["time_s"]) for r in update_rows(faulty)])
    shift = after - before
    assert np.all(np.diff(shift) >= -1e-15) and shift[0] == 0.0  # gaps only add up
    assert shift[-1] == pytest.approx(faulty.summary["sim_time_s"]
                                      - plain.summary["sim_time_s"])


def test_the_trace_shows_the_gaps_on_every_worker_and_nothing_inside_them():
    result = simulate(make(FAULTS))
    events = [e for e in result.trace["traceEvents"]
              if e.get("ph") == "X" and e.get("pid") == WORKERS]
    for w in range(4):
        mine = sorted((e["ts"], e["ts"] + e["dur"], e["cat"]) for e in events
                      if e["tid"] == w)
        assert {kind for *_, kind in mine} >= set(GAP_KINDS)
        for (_, end, _), (start, _, _) in zip(mine, mine[1:], strict=False):
            assert start >= end - 1e-6  # no two slices of a worker overlap (us)
        gap_time = sum(b - a for a, b, k in mine if k in GAP_KINDS) * 1e-6
        s = result.summary
        assert gap_time == pytest.approx(s["checkpoint_s"] + s["restart_s"] + s["recompute_s"])


def test_runs_with_failures_are_deterministic():
    a, b = simulate(make(FAULTS, run__seed=3)), simulate(make(FAULTS, run__seed=3))
    a.summary.pop("wall_s"), b.summary.pop("wall_s")
    assert a.summary == b.summary and a.metrics_csv == b.metrics_csv


def test_the_time_limit_counts_failures_and_checkpoints():
    limit = 0.01
    result = simulate(make(FAULTS, run__iterations=100_000, run__time_limit_s=limit,
                           faults__restart_s=0.0005))
    times = [float(r["time_s"]) for r in update_rows(result)]
    assert result.summary["sim_time_s"] == pytest.approx(limit) and times[-1] < limit
    assert result.summary["failures"] > 0


@pytest.mark.parametrize("kind", ["asp", "ssp", "backup", "easgd"])
def test_elastic_runs_carry_on_without_a_dead_worker(kind):
    """Worker 2 dies after update 10 and is away longer than the run: the others finish
    (ssp with staleness 0 and backup with no backups would wait for it forever)."""
    config = make(strategy__kind=kind, strategy__staleness=0, strategy__backup=0,
                  faults__failures=[{"rank": 2, "at_update": 10}], faults__restart_s=10.0)
    result = simulate(config)
    s = result.summary
    assert s["iterations"] == 40 and s["failures"] == 1 and s["recovery"] == "elastic"
    failed_at = float(update_rows(result)[9]["time_s"])
    # the dead worker spent the rest of the run restarting
    assert s["workers"][2]["restart"] == pytest.approx(s["sim_time_s"] - failed_at, rel=0.05)
    assert s["restart_time_s"] == pytest.approx(s["workers"][2]["restart"])
    if kind != "backup":  # (backup records aggregates, worker -1)
        assert all(r["worker"] != "2" for r in update_rows(result)
                   if float(r["time_s"]) > failed_at)


def test_a_rejoined_worker_contributes_again():
    config = make(strategy__kind="asp", run__iterations=200,
                  faults__failures=[{"rank": 2, "at_update": 10}], faults__restart_s=1e-4)
    rows = update_rows(simulate(config))
    assert sum(r["worker"] == "2" for r in rows[60:]) > 10


def until_a_shard_fails(config):
    """The run's context, stepped until its first failure has been handled."""
    env, ctx, strategy = build_simulation(config)
    strategy.start()
    while ctx.recovery.failed == 0:
        env.step()
    return ctx


def test_a_dead_shard_restores_its_range_from_its_checkpoint():
    config = make(strategy__kind="asp", cluster__servers=2, checkpoint__every_steps=8,
                  faults__failures=[{"rank": 5, "at_update": 20}], faults__restart_s=1e-3)
    ctx = until_a_shard_fails(config)
    recovery, store = ctx.recovery, ctx.server.store
    keys = ctx.server.shard_keys(1)
    saved = recovery.saves[1][-1]
    assert saved.version == 16 and keys.start > 0
    assert np.array_equal(store.params[keys], saved.params)
    assert recovery.lost_updates == 20 - 16
    # the other shard kept its updates
    assert not np.array_equal(store.params[: keys.start],
                              recovery.saves[0][-1].params)


def test_a_dead_shard_of_dealt_layers_restores_its_layers_from_its_checkpoint():
    # mlp 16 -> 8 -> 3: layer 0 (136 keys) on shard 0, layer 1 (27 keys) on shard 1
    config = make(MODELS["mlp"], strategy__kind="asp", cluster__servers=2,
                  cluster__shard_by="round-robin", checkpoint__every_steps=8,
                  faults__failures=[{"rank": 5, "at_update": 20}], faults__restart_s=1e-3)
    ctx = until_a_shard_fails(config)
    recovery, store = ctx.recovery, ctx.server.store
    assert ctx.server.shard_keys(1) == slice(136, 163)
    assert np.array_equal(store.params[136:], recovery.saves[1][-1].params)
    assert not np.array_equal(store.params[:136], recovery.saves[0][-1].params)


def test_where_the_servers_hold_the_keys_changes_times_not_numbers():
    runs = [simulate(make(MODELS["mlp"], strategy__kind=kind, cluster__servers=2,
                          cluster__shard_by=how)).summary
            for kind in ("asp", "bsp-ps") for how in ("keys", "least-loaded")]
    for keys, dealt in (runs[:2], runs[2:]):
        assert dealt["final_loss"] == keys["final_loss"]
        assert dealt["sim_time_s"] != keys["sim_time_s"]


def test_elastic_checkpoints_pause_each_shard_for_its_write():
    """Blocking: each of the 2 shards writes its half, in parallel: 3 checkpoints cost
    3 x the object store's write of half the parameters. Background: only the wait for
    the previous write (the ideal host copies for free), less than that."""
    def run(mode):
        return simulate(make(strategy__kind="asp", cluster__servers=2,
                             checkpoint__every_steps=10, checkpoint__mode=mode,
                             checkpoint__storage="object-store")).summary
    _, ctx, _ = build_simulation(make(strategy__kind="asp", cluster__servers=2))
    plain = simulate(make(strategy__kind="asp", cluster__servers=2)).summary
    blocking, background = run("blocking"), run("background")
    write_s = STORAGE["object-store"].write_s(ctx.params.nbytes, 2)
    assert blocking["checkpoints"] == 3 and blocking["failures"] == 0
    assert blocking["checkpoint_time_s"] == pytest.approx(3 * write_s)
    assert blocking["sim_time_s"] > plain["sim_time_s"] + write_s
    assert 0 < background["checkpoint_time_s"] < blocking["checkpoint_time_s"]


def test_storage_costs_follow_the_closed_form():
    disk = Storage("d", write_Bps=1e9, read_Bps=2e9, latency_s=1e-3, aggregate_Bps=3e9)
    assert disk.write_s(4e9, 1) == pytest.approx(1e-3 + 4.0)
    assert disk.write_s(4e9, 2) == pytest.approx(1e-3 + 2.0)  # each writes 2 GB at 1 GB/s
    assert disk.write_s(4e9, 8) == pytest.approx(1e-3 + 4 / 3)  # the aggregate limits
    assert disk.read_s(4e9, 1) == pytest.approx(1e-3 + 2.0)
    assert disk.write_s(0) == 0.0
    assert get_storage("nvme") is STORAGE["nvme"] and all(s.source for s in STORAGE.values())


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(["write_Bps", "read_Bps", "latency_s",
                                        "aggregate_Bps", "speed"]),
                       st.one_of(st.floats(allow_nan=True), st.integers(-5, 5), st.text(max_size=3),
                                 st.none())))
def test_any_storage_table_is_accepted_or_refused_naming_a_key(table):
    try:
        storage = get_storage(table)
    except ValueError as exc:
        assert any(key in str(exc) for key in ("write_Bps", "read_Bps", "latency_s",
                                               "aggregate_Bps", "speed"))
    else:
        assert storage.write_s(1e6) > 0


@pytest.mark.parametrize(("keys", "named"), [
    ({"faults.failures": [{"rank": 0, "at_update": 40}]}, "faults.failures"),
    ({"faults.failures": [{"rank": 9, "at_s": 1.0}]}, "faults.failures"),
    ({"faults.failures": [{"rank": 0}]}, "faults.failures"),
    ({"faults.failures": [{"rank": 0, "at_s": 2.0}], "run.time_limit_s": 1.0},
     "faults.failures"),
    ({"checkpoint.every_steps": 0}, "checkpoint.every_steps"),
    ({"checkpoint.every_s": 0.0}, "checkpoint.every_s"),
    ({"checkpoint.every_steps": 5, "checkpoint.every_s": 1.0}, "checkpoint.every_s"),
    ({"checkpoint.storage": "tape"}, "checkpoint.storage"),
    ({"checkpoint.storage": {"write_Bps": 1e9}}, "checkpoint.storage"),
    ({"faults.mtbf_s": -1.0}, "faults.mtbf_s"),
    ({"faults.ranks": "servers", "faults.mtbf_s": 1.0}, "faults.ranks"),
])
def test_bad_fault_settings_exit_2_naming_the_key(tmp_path, capsys, keys, named):
    nested: dict = {"run": {"iterations": 40}}
    for dotted, value in keys.items():
        section, key = dotted.split(".")
        nested.setdefault(section, {})[key] = value
    config = tmp_path / "c.toml"
    config.write_text(tomli_w.dumps(nested))
    out = tmp_path / "out"
    assert main(["run", str(config), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err and not out.exists()


def test_the_fault_kinds_are_activities():
    assert set(GAP_KINDS) <= set(KINDS)


def test_a_calibrated_storage_profile_is_read_with_its_source(tmp_path):
    path = tmp_path / "storage.json"
    path.write_text(json.dumps({"format": "sgd-lab.storage-profile/1", "write_Bps": 5e8,
                                "read_Bps": 9e8, "latency_s": 4e-3,
                                "source": "measured here", "points": [1, 2]}))
    disk = get_storage(f"calibrated:{path}")
    assert (disk.write_Bps, disk.read_Bps, disk.latency_s) == (5e8, 9e8, 4e-3)
    assert disk.source == "measured here"
    with pytest.raises(ValueError, match="missing key 'latency_s'"):
        path.write_text(json.dumps({"write_Bps": 5e8, "read_Bps": 9e8}))
        get_storage(f"calibrated:{path}")
    with pytest.raises(ValueError, match="storage profile"):
        get_storage(f"calibrated:{tmp_path / 'none.json'}")


@settings(max_examples=80, deadline=None)
@given(st.dictionaries(
    st.sampled_from(["faults.mtbf_s", "faults.distribution", "faults.weibull_shape",
                     "faults.ranks", "faults.failures", "faults.restart_s",
                     "checkpoint.every_steps", "checkpoint.every_s", "checkpoint.storage",
                     "checkpoint.mode", "checkpoint.state_bytes"]),
    st.one_of(st.integers(-3, 50), st.floats(allow_nan=True, allow_infinity=True),
              st.text(max_size=4), st.booleans(),
              st.lists(st.fixed_dictionaries({"rank": st.integers(-1, 9)},
                                              optional={"at_s": st.floats(-1, 1e3),
                                                        "at_update": st.integers(-1, 60)}),
                       max_size=2)),
    max_size=3))
def test_any_fault_settings_load_or_are_refused_naming_their_table(keys):
    """Whatever the values, a config either loads or is refused with a UserError that
    names the [faults] or [checkpoint] key; never another exception."""
    from sim.errors import UserError
    from sim.training.validator import validate

    nested: dict = {"run": {"iterations": 40}}
    for dotted, value in keys.items():
        section, key = dotted.split(".")
        nested.setdefault(section, {})[key] = value
    try:
        validate(nested)
    except UserError as exc:
        assert "faults." in str(exc) or "checkpoint." in str(exc), str(exc)
