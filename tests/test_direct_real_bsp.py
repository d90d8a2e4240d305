"""The real bsp programs driven directly, on ranks that are threads of this process
(tests/fake_mpi.py): plain bsp (sim/real/executors/bsp.py) against synchronous SGD written
in numpy, its layer-wise pipelined form (bsp_pipelined.py) against plain bsp bit for bit,
the replica it steps (replica.py), and checkpoint-restart (restart_rank.py) against an
uninterrupted run bit for bit."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fake_mpi import run_ranks
from numpy_ref import logreg_ref
from real_rank_cases import kernel_gradient, rank_context, real_config, run_program, sgd_reference

from sim.real.executors import bsp, bsp_pipelined
from sim.real.executors import checkpoint as ckpt
from sim.real.executors.assemble import RankLog
from sim.real.executors.rank_collectives import TAG_BASE, rank_rounds
from sim.real.executors.replica import Replica
from sim.real.launch.relaunch import run_restarting
from sim.training.workload import build_workload

LR = 0.5
LOGREG = {"cluster": {"workers": 2},
          "workload": {"model": "logreg", "features": 32, "samples": 600, "batch": 16,
                       "lr": LR},
          "strategy": {"kind": "bsp"},
          "run": {"iterations": 4, "eval_every": 1, "seed": 3}}
MLP = {"cluster": {"workers": 2},
       "workload": {"model": "mlp", "dataset": "gaussian", "features": 12, "classes": 4,
                    "samples": 400, "hidden": [8, 8, 6], "batch": 16, "lr": 0.2},
       "strategy": {"kind": "bsp"},
       "run": {"iterations": 4, "eval_every": 1, "seed": 5}}


def with_keys(base: dict, **sections: dict) -> dict:
    return {name: {**base.get(name, {}), **sections.get(name, {})}
            for name in {*base, *sections}}


def numpy_gradient(model, params, X, y) -> np.ndarray:
    return logreg_ref(X, y, params, model.l2)[1]


# ---- bsp ----------------------------------------------------------------------------------

@pytest.mark.parametrize("impl,wait", [("schedule", "spin"), ("schedule", "sleep"),
                                       ("mpi", "spin"), ("mpi", "sleep")])
def test_two_bsp_ranks_take_synchronous_sgd_steps_on_the_mean_gradient(tmp_path, impl, wait):
    config = real_config(LOGREG)
    logs, _ = run_program(config, tmp_path, impl, wait)
    snapshots = logs[0].snapshots
    assert sorted(snapshots) == list(range(config.run.iterations + 1))
    # the gradients by the same kernel: the rest (a two-term sum, the mean, the step) is
    # exact in any order, so the replica is numpy's bit for bit
    for k, expected in enumerate(sgd_reference(config, kernel_gradient)):
        assert snapshots[k].tobytes() == expected.tobytes(), k
    # and the gradient written in numpy: the same numbers up to rounding
    for k, expected in enumerate(sgd_reference(config, numpy_gradient)):
        np.testing.assert_allclose(snapshots[k], expected, rtol=1e-12, atol=1e-14)
    assert not logs[1].snapshots  # only rank 0 keeps the model of record


def test_bsp_sends_the_simulators_schedule_and_each_rank_logs_its_messages(tmp_path):
    config = real_config(LOGREG)
    logs, ran = run_program(config, tmp_path)
    calls = config.run.iterations + 1  # the warm-up's allreduce, then one per update
    for rank, log in enumerate(logs):
        rounds = rank_rounds(config.strategy.collective, 2, build_workload(config).model.size,
                             rank)
        assert log.messages == calls * sum(len(r.sends) for r in rounds)
        got = [(source, tag, len(data)) for _, source, dest, tag, data in ran.world.taken
               if dest == rank and tag >= TAG_BASE]
        # every call receives the schedule's messages, round after round, in transfer order
        expected = [(peer, TAG_BASE + r.index, n) for r in rounds for peer, _, n in r.recvs]
        assert got == expected * calls


def test_a_combined_step_is_wait_until_the_slowest_gradient_then_wire():
    parts = [("compute", 0.0, 1.0), ("wire", 1.0, 3.0), ("update", 3.0, 3.5)]
    assert bsp.waiting_for(parts, 2.0) == [("compute", 0.0, 1.0), ("wait", 1.0, 2.0),
                                           ("wire", 2.0, 3.0), ("update", 3.0, 3.5)]
    assert bsp.waiting_for(parts, 1.0) == parts  # it was the slowest: all wire
    assert bsp.waiting_for(parts, 5.0)[1] == ("wait", 1.0, 3.0)  # all of it wait


def test_combine_lays_out_every_ranks_steps_and_records_the_mean_loss(tiny_real_workload):
    workload = tiny_real_workload
    logs = [RankLog(0), RankLog(1)]
    # (parts, ready, updated, loss): rank 1's gradient is done at 2.0, rank 0's at 1.0
    logs[0].steps = [([("compute", 0.0, 1.0), ("wire", 1.0, 3.0), ("update", 3.0, 3.5)],
                      1.0, 3.5, 0.25)]
    logs[1].steps = [([("compute", 0.0, 2.0), ("wire", 2.0, 3.0), ("update", 3.0, 3.4)],
                      2.0, 3.4, 0.75)]
    bsp.combine(logs, workload)
    assert [s[1:] for s in logs[0].spans] == [("compute", 0.0, 1.0), ("wait", 1.0, 2.0),
                                              ("wire", 2.0, 3.0), ("update", 3.0, 3.5)]
    assert [s[1:] for s in logs[1].spans] == [("compute", 0.0, 2.0), ("wire", 2.0, 3.0),
                                              ("update", 3.0, 3.4)]
    [(at, record)] = logs[0].updates
    assert at == 3.5 and record.loss == 0.5 and record.worker == -1
    assert (record.clock, record.version_read, record.staleness) == (1, 0, 0)
    assert record.samples == 2 * workload.config.workload.batch
    assert not logs[1].updates


@pytest.fixture
def tiny_real_workload():
    return build_workload(real_config(LOGREG))


# ---- the replica --------------------------------------------------------------------------

def test_a_replica_steps_by_the_mean_and_stops_at_a_nan(tmp_path):
    config = real_config(with_keys(LOGREG, run={"eval_every": 2}))

    def program(comm) -> tuple[Replica, np.ndarray, bool, bool]:
        ctx = rank_context(comm, config, tmp_path)
        replica = Replica(ctx)
        start = replica.params.copy()
        summed = np.full(start.size, 4.0)  # the sum of the two ranks' gradients
        assert replica.step(summed, [("compute", 0.0, 1.0)], 1.0, 0.5)
        stepped = replica.params.copy()
        replica.step(np.ones(start.size), [], 1.0, 0.5)  # update 2: an evaluation point
        assert np.array_equal(stepped, start - LR * 2.0)  # lr x the mean (4 / 2)
        ok = replica.step(np.full(start.size, np.nan), [], 2.0, 0.5)
        return replica, start, ok, replica.log.diverged

    ran = run_ranks(2, program)
    for rank, (replica, _, ok, diverged) in enumerate(ran.results):
        assert not ok and diverged and len(replica.steps) == 2
        parts, ready, updated, loss = replica.steps[0]
        assert parts[0] == ("compute", 0.0, 1.0) and parts[1][0] == "update"
        assert ready == 1.0 and loss == 0.5 and updated >= parts[1][1]
        # rank 0 snapshots where the rules evaluate (update 2 of eval_every 2), none else
        assert sorted(replica.log.snapshots) == ([2] if rank == 0 else [])


# ---- pipelined bsp ------------------------------------------------------------------------

@pytest.mark.parametrize("pipelining", ["wfbp", "bucket"])
def test_pipelined_bsp_is_plain_bsp_bit_for_bit(tmp_path, pipelining):
    plain = real_config(MLP)
    piped = real_config(with_keys(MLP, strategy={"pipelining": pipelining,
                                                 "bucket_bytes": 200}))
    plain_logs, _ = run_program(plain, tmp_path / "plain")
    piped_logs, _ = run_program(piped, tmp_path / "piped")
    assert bsp_pipelined.combine is bsp.combine
    expected, got = plain_logs[0].snapshots, piped_logs[0].snapshots
    assert sorted(got) == sorted(expected) == list(range(5))
    for k in expected:  # each message's sum of two terms is the whole vector's
        assert got[k].tobytes() == expected[k].tobytes()
    # one collective per message: layers (wfbp) or buckets of them, more than one
    assert piped_logs[0].messages > plain_logs[0].messages


class Reducer:
    """An allreduce that completes on the ``test`` after its ``start``."""

    def __init__(self, index: int, events: list) -> None:
        self.index, self.events, self.started = index, events, False

    def start(self, buf) -> None:
        self.events.append(("start", self.index))
        self.started = True

    def test(self) -> bool:
        return self.started

    def wait(self) -> None:
        self.events.append(("wait", self.index))


def test_the_channel_sends_one_ready_message_at_a_time_first_ready_first():
    events: list = []
    grad = np.arange(6.0)
    channel = bsp_pipelined.Channel([Reducer(i, events) for i in range(3)],
                                    [slice(0, 2), slice(2, 4), slice(4, 6)], grad)
    channel.ready += [2, 0]
    assert channel.progress() is False  # never cuts the modelled compute short
    assert events == [("start", 2)] and channel.busy == 2
    channel.ready.append(1)
    channel.progress()  # 2 is done: 0 goes next, 1 waits behind it
    assert events == [("start", 2), ("start", 0)] and channel.ready == [1]
    channel.finish()
    assert events == [("start", 2), ("start", 0), ("wait", 0), ("start", 1), ("wait", 1)]
    assert channel.done == 3 and channel.busy is None


# ---- checkpoint-restart -------------------------------------------------------------------

def test_a_bsp_run_resumed_from_its_checkpoint_is_the_uninterrupted_run(tmp_path):
    config = real_config(with_keys(LOGREG, checkpoint={"every_steps": 2},
                                   run={"iterations": 5}))
    checkpoints = tmp_path / "checkpoints"
    jobs: list[tuple[dict, list[RankLog]]] = []  # (the spec's faults, the ranks' logs)

    def launch(faults: dict, records: dict) -> dict[str, str]:  # one job, in-process
        logs, _ = run_program(config, tmp_path / "job", faults=faults, combine=False)
        jobs.append((faults, logs))
        return {"summary.json": '{"iterations": 5, "sim_time_s": 1.0, "workers": [{}]}'}

    files = run_restarting(config, checkpoints, launch)  # no failure: one job
    summary = json.loads(files["summary.json"])
    assert (summary["recovery"], summary["failures"], summary["checkpoints"]) == (
        "restart", 0, 2)
    [(faults, whole)] = jobs
    assert faults["checkpoints"] == str(checkpoints) and faults["resume"] is None
    assert sorted(p.name for p in checkpoints.glob(ckpt.PATTERN)) == [
        ckpt.path_for(checkpoints, 2).name, ckpt.path_for(checkpoints, 4).name]
    # every rank's step 2 and 4 ended in the checkpoint's blocking write
    for log in whole:
        assert [s[0][-1][0] for s in log.steps] == ["update", "checkpoint", "update",
                                                     "checkpoint", "update"]

    # a second job resumed from update 2's checkpoint (as the runner resumes after a kill)
    resume = {"path": str(ckpt.path_for(checkpoints, 2)), "kill_s": 0.0,
              "gaps": [("recompute", 0.0, 0.0)]}
    (tmp_path / "again").mkdir()
    again, _ = run_program(config, tmp_path / "again", combine=False,
                           faults={**faults, "resume": resume})
    assert sorted(again[0].snapshots) == sorted(whole[0].snapshots) == list(range(6))
    for k, params in whole[0].snapshots.items():  # the same numbers, bit for bit
        assert again[0].snapshots[k].tobytes() == params.tobytes(), k
    for log, first in zip(again, whole, strict=True):
        assert len(log.steps) == 5  # the records up to the checkpoint, then this job's
        assert log.steps[:2] == first.steps[:2]
        third = [kind for kind, _, _ in log.steps[2][0]]
        assert third[:2] == ["recompute", "restart"]  # the failure's cost, on its first step
        assert len(log.kernel_s) == 5
