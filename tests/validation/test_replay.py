"""Replaying a run's own compute (issue 48, item 1): a run's steps grouped from its trace,
a simulation replaying them, and ``sim compare --replay`` on a real run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sim.cli import main
from sim.simulated.engine import simulate
from sim.training.validator import validate
from sim.validation.replay import (
    measured_times,
    replayed_restart,
    simulate_replayed,
    step_compute_s,
)

HOST = {"host": "epyc-core", "cores": 2, "ranks_per_host": 4}  # ranks pay data and updates


def _write(tmp_path, result, name="run"):
    from sim.rundir import write_run

    write_run(tmp_path / name, result.files())
    return tmp_path / name


def test_a_step_runs_from_one_gather_to_the_next_or_from_one_first_pass_to_the_next():
    worker = [("data", "data", 0.0, 1.0), ("compute", "compute", 1.0, 2.0),
              ("wire", "wire", 3.0, 1.0), ("compute", "compute", 4.0, 0.5),  # carved around
              ("data", "data", 5.0, 1.0), ("compute", "compute", 6.0, 3.0),
              ("data", "data", 9.0, 1.0)]  # the run ended after this gather: no step
    assert step_compute_s(worker).tolist() == [2.5, 3.0]
    stage = [("compute", "F0", 0.0, 1.0), ("wait", "wait", 1.0, 1.0), ("compute", "F0", 2.0, 1.0),
             ("compute", "F1", 3.0, 2.0), ("compute", "B0", 5.0, 3.0), ("compute", "F0", 8.0, 4.0),
             ("compute", "B0", 12.0, 5.0)]  # F0 carved around a tensor sum is one pass
    assert step_compute_s(stage).tolist() == [7.0, 9.0]
    back_to_back = [("compute", "compute", 0.0, 2.0), ("compute", "compute", 2.0, 3.0),
                    ("wire", "wire", 5.0, 1.0), ("compute", "compute", 6.0, 1.0)]
    assert step_compute_s(back_to_back).tolist() == [5.0, 1.0]


@pytest.mark.parametrize("kind", ["bsp", "asp", "bsp-ps"])
def test_a_noisy_run_replayed_on_its_noiseless_config_comes_back(tmp_path, kind,
                                                                 tiny_config_data):
    """A simulated run with lognormal compute and a straggler is the "real" run: its trace
    has every step's compute. The same config without noise or straggler, replayed on it,
    gives that run's time back (to the trace's microsecond rounding), where the noiseless
    run alone does not: the replay put back exactly the measured compute."""
    data = tiny_config_data({"strategy.kind": kind, "run.iterations": 24})
    data["cluster"] |= HOST
    noisy = validate({**data, "compute": {"distribution": "lognormal", "sigma": 0.6,
                                          "straggler_fraction": 0.34,
                                          "straggler_slowdown": 3.0}})
    plain = validate(data)
    measured = simulate(noisy).summary
    run = _write(tmp_path, simulate(noisy))
    replayed = simulate_replayed(plain, run).summary
    workers = len(measured["workers"])
    # only the steps workers began as the run ended, which its trace does not hold
    assert replayed["replayed"]["steps_drawn"] <= 2 * workers
    assert replayed["replayed"]["scales"]["data"] == pytest.approx([1.0] * workers, rel=1e-4)
    for key in ("sim_time_s", "data_s"):
        assert replayed[key] == pytest.approx(measured[key], rel=1e-4, abs=1e-9), key
    # the steps begun as the run ended are drawn from the record, not the run's own
    for key in ("compute_s", "wait_s"):
        assert replayed[key] == pytest.approx(measured[key], rel=0.02), key
    assert abs(simulate(plain).summary["sim_time_s"] / measured["sim_time_s"] - 1) > 0.02


def test_a_pipeline_stage_replays_its_own_passes(tmp_path, split_mlp_data):
    data = split_mlp_data({"parallel.pipeline": 2, "parallel.microbatches": 4,
                           "run.iterations": 6})
    data["cluster"] = {**data.get("cluster", {}), **HOST}
    noisy = validate({**data, "compute": {"distribution": "exponential"}})
    run = _write(tmp_path, simulate(noisy))
    steps = measured_times(run).steps
    assert sorted(len(s) for s in steps.values()) == [6, 6] or min(map(len, steps.values())) >= 6
    replayed = simulate_replayed(validate(data), run).summary
    assert replayed["sim_time_s"] == pytest.approx(simulate(noisy).summary["sim_time_s"],
                                                   rel=1e-4)


def test_host_work_is_scaled_to_what_each_rank_measured(tmp_path, tiny_config_data):
    """The "real" run's host is twice as slow at gathering and updating: replayed on the
    faster host, each rank's data and update come out as measured."""
    data = tiny_config_data({"strategy.kind": "bsp", "run.iterations": 12})
    data["cluster"] |= HOST
    run = _write(tmp_path, simulate(validate(data)))
    trace = json.loads((run / "trace.json").read_text())
    for event in trace["traceEvents"]:  # the measured run: gathers and updates twice as long
        if event.get("pid") == 0 and event.get("cat") in ("data", "update"):
            event["dur"] *= 2
    (run / "trace.json").write_text(json.dumps(trace))
    replayed = simulate_replayed(validate(data), run).summary
    plain = simulate(validate(data)).summary
    assert replayed["replayed"]["scales"]["data"] == pytest.approx([2.0, 2.0], rel=1e-3)
    assert replayed["data_s"] == pytest.approx(2 * plain["data_s"], rel=1e-3)
    assert replayed["update_s"] == pytest.approx(2 * plain["update_s"], rel=1e-3)


def test_a_killed_runs_restart_spans_are_replayed(tmp_path, tiny_config_data):
    """The "real" run restarts its killed job in 3 ms where the config assumes 0.5 ms:
    replayed, its two restarts take what they took (their span from the kill to the new
    job's start, per failure), and with them the whole run; the checkpoints stay modelled."""
    data = tiny_config_data({"strategy.kind": "bsp", "run.iterations": 20,
                             "checkpoint.every_steps": 5,
                             "faults.failures": [{"rank": 1, "at_update": 7},
                                                 {"rank": 0, "at_update": 14}]})
    data["cluster"] |= HOST
    slow = validate({**data, "faults": {**data["faults"], "restart_s": 3e-3}})
    assumed = validate({**data, "faults": {**data["faults"], "restart_s": 5e-4}})
    measured = simulate(slow).summary
    replayed = simulate_replayed(assumed, _write(tmp_path, simulate(slow))).summary
    assert measured["failures"] == replayed["failures"] == 2
    assert replayed["restart_time_s"] == pytest.approx(measured["restart_time_s"], rel=1e-9)
    assert replayed["sim_time_s"] == pytest.approx(measured["sim_time_s"], rel=1e-4)
    assert replayed["checkpoint_s"] == pytest.approx(measured["checkpoint_s"], rel=1e-4)
    assert simulate(assumed).summary["sim_time_s"] < 0.9 * measured["sim_time_s"]


def test_a_restart_is_replayed_only_where_both_runs_restarted_alike(tiny_config_data):
    config = validate(tiny_config_data({"faults.restart_s": 2.0}))
    same = replayed_restart(config, {"failures": 1, "restart_time_s": 2.5},
                            {"failures": 1, "restart_time_s": 1.0})
    assert same.faults.restart_s == 0.5 and config.faults.restart_s == 2.0
    assert replayed_restart(config, {"failures": 1, "restart_time_s": 2.5},
                            {"failures": 2, "restart_time_s": 1.0}) is config
    assert replayed_restart(config, {}, {}) is config
    assert replayed_restart(config, {"failures": 1, "restart_time_s": 9.0},
                            {"failures": 1, "restart_time_s": 1.0}).faults.restart_s == 0.0


def test_a_trace_without_compute_is_refused_naming_the_file(tmp_path, tiny_config_data):
    from sim.errors import UserError

    run = _write(tmp_path, simulate(validate(tiny_config_data({"run.iterations": 4}))))
    trace = json.loads((run / "trace.json").read_text())
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e.get("cat") != "compute"]
    (run / "trace.json").write_text(json.dumps(trace))
    with pytest.raises(UserError, match="trace.json: no compute spans"):
        measured_times(run)


@pytest.mark.ranks
def test_compare_replay_on_a_real_run_takes_its_compute_data_and_update(
        tmp_path, two_rank_config_data, write_toml, capsys):
    pytest.importorskip("mpi4py")
    config = write_toml(tmp_path / "c.toml", two_rank_config_data(
        {"strategy.kind": "bsp", "run.iterations": 20, "run.eval_every": 10}))
    real, sim, out = tmp_path / "real", tmp_path / "sim", tmp_path / "cmp"
    assert main(["real", str(config), "--out", str(real), "--repeat", "2"]) == 0
    assert main(["run", str(config), "--out", str(sim), "--set", "cluster.host=epyc-core",
                 "--set", "cluster.cores=2", "--set", "cluster.ranks_per_host=2"]) == 0
    capsys.readouterr()
    assert main(["compare", str(sim), str(real), "--replay", "--no-plot", "--out",
                 str(out)]) == 0
    assert "compute replayed" in capsys.readouterr().out
    replay = json.loads((out / "report.json").read_text())["replay"]
    assert len(replay["repeats"]) == 2
    for i in range(2):
        simulated = json.loads((out / "replay" / f"r{i}" / "summary.json").read_text())
        measured = json.loads((real / f"r{i}" / "summary.json").read_text())
        for key in ("compute_s", "data_s", "update_s"):  # the mean worker's, as measured
            assert simulated[key] == pytest.approx(measured[key], rel=0.02), key
    assert np.isfinite(replay["iteration_s"]["error"])


def test_time_sliced_wall_clock_compute_is_replayed_without_holding_a_core(
        tmp_path, tiny_config_data):
    """A real run whose ranks outnumbered its CPUs under the default scheduler measured its
    compute in wall-clock time that holds its waits for a core: replayed off the cores
    (else they would be waited for twice), so the replay is faster than one on the cores.
    Under --sched fifo (or with a core per rank) its spans are work, replayed on them."""
    data = tiny_config_data({"strategy.kind": "bsp", "run.iterations": 8})
    data["cluster"] |= {"host": "epyc-core", "cores": 1, "ranks_per_host": 4}
    config = validate(data)
    run = _write(tmp_path, simulate(config))
    summary = json.loads((run / "summary.json").read_text())
    summary |= {"clock": "wall", "ranks": 2, "cpus": 1, "sched": "default"}
    (run / "summary.json").write_text(json.dumps(summary))
    assert measured_times(run).off_core
    sliced = simulate_replayed(config, run).summary["sim_time_s"]
    summary["sched"] = "fifo"
    (run / "summary.json").write_text(json.dumps(summary))
    assert not measured_times(run).off_core
    on_cores = simulate_replayed(config, run).summary["sim_time_s"]
    assert sliced < on_cores
