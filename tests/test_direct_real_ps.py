"""The parameter-server and table programs on real ranks, driven directly on ranks that are
threads of this process (tests/fake_mpi.py): the MPI links (sim/real/executors/ps_mpi.py)
move each message once and in order, the server applies asp's pushes in the order they
arrived and bsp-ps's as synchronous SGD, the sharded tables (ps_tables.py, bsp_tables.py)
train the numbers of one process's SGD, and the elastic server (elastic_rank.py) finds a
dead worker by its pid."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from fake_mpi import run_ranks
from real_rank_cases import kernel_gradient, rank_context, real_config, run_program, sgd_reference

from sim.real.executors import bsp_tables, elastic_rank, ps_tables
from sim.real.executors.assemble import RankLog
from sim.real.executors.ps_mpi import MpiServerLink, MpiWorkerLink
from sim.real.executors.ps_wire import CANCEL, HEADER, PUSH
from sim.training.rules import SGD, Rules
from sim.training.strategies import make_rules
from sim.training.workload import build_workload

LOGREG = {"cluster": {"workers": 2},
          "workload": {"model": "logreg", "features": 32, "samples": 600, "batch": 16,
                       "lr": 0.5},
          "strategy": {"kind": "asp"},
          "run": {"iterations": 6, "eval_every": 1, "seed": 3}}
WIDE_DEEP = {"cluster": {"workers": 2},
             "workload": {"model": "wide-deep", "dataset": "ctr-synthetic", "features": 3,
                          "fields": 3, "vocab": 200, "embedding_dim": 4, "cross_buckets": 64,
                          "hidden": [8], "samples": 1200, "batch": 16, "lr": 0.2},
             "run": {"iterations": 4, "eval_every": 1, "seed": 2}}


def with_keys(base: dict, **sections: dict) -> dict:
    return {name: {**base.get(name, {}), **sections.get(name, {})}
            for name in {*base, *sections}}


# ---- the MPI links ------------------------------------------------------------------------

def header(kind: float, worker: int, version: float = 0.0, size: int = 0) -> np.ndarray:
    message = np.zeros(HEADER + size)
    message[0], message[1], message[2] = kind, worker, version
    return message


def test_a_worker_asks_and_collects_the_servers_reply_past_an_earlier_cancel(tmp_path):
    config = real_config(with_keys(LOGREG, cluster={"workers": 1}))

    def program(comm):
        ctx = rank_context(comm, config, tmp_path)
        log = RankLog(ctx.rank)
        if ctx.rank == 0:  # the worker
            link, inbox = MpiWorkerLink(ctx, log), np.zeros(HEADER + 5)
            asked = link.ask([(1, header(1.0, 0))], [inbox])
            replies = link.collect()
            return asked, replies, inbox.copy(), log
        link, inbox = MpiServerLink(ctx, 1), np.zeros(HEADER + 5)
        got = link.receive(inbox)
        assert not link.ready(0)  # nothing in flight to it yet
        link.note(0, header(CANCEL, 0, 7.0))  # a cancel of an older step comes first
        reply = header(2.0, 0, 3.0, 3)
        reply[HEADER:] = [1.0, 2.0, 3.0]
        link.reply(0, reply)
        assert link.ready(0)
        link.close(set())
        return got, inbox.copy()

    (asked, replies, inbox, log), (got, request) = run_ranks(2, program).results
    assert got.count == HEADER and request[0] == 1.0  # the pull, header only
    assert replies.counts == [HEADER + 3]  # the reply; the cancel before it is skipped
    assert inbox[0] == 2.0 and list(inbox[HEADER:HEADER + 3]) == [1.0, 2.0, 3.0]
    assert asked <= replies.got_s and log.messages == 1
    assert [kind for _, kind, _, _ in log.spans] == ["overhead", "wire"]


def test_a_worker_is_cancelled_by_its_steps_cancel_only(tmp_path):
    config = real_config(with_keys(LOGREG, cluster={"workers": 1}))

    def program(comm):
        ctx = rank_context(comm, config, tmp_path)
        if ctx.rank == 1:
            link = MpiServerLink(ctx, 1)
            for version in (3.0, 5.0):
                link.note(0, header(CANCEL, 0, version))
            link.close(set())
            comm.Barrier()
            return None
        link = MpiWorkerLink(ctx, RankLog(0))
        comm.Barrier()  # both cancels are there
        return [link.cancelled(5.0), link.cancelled(5.0)]

    assert run_ranks(2, program).results[0] == [True, False]  # 3's dropped, 5's taken once


# ---- the server's program -----------------------------------------------------------------

def test_the_asp_server_applies_the_pushes_in_the_order_they_arrived(tmp_path):
    config = real_config(LOGREG)
    logs, ran = run_program(config, tmp_path)
    server = logs[-1]
    n = config.cluster.workers
    pushes = [payload for _, _, dest, _, payload in ran.world.taken
              if dest == n and payload[0] == PUSH]
    records = [record for _, record in server.updates]
    assert len(records) == config.run.iterations
    # update k is the k-th push to arrive (the rest came after the last update)
    assert [r.worker for r in records] == [int(p[1]) for p in pushes[:len(records)]]
    rules = make_rules(config)
    params = build_workload(config).params.copy()
    for k, (record, push) in enumerate(zip(records, pushes, strict=False), start=1):
        assert record.version_read == int(push[2]) and record.loss == push[3]
        params = params - rules.lr(record.staleness) * push[HEADER:]
        assert server.snapshots[k].tobytes() == params.tobytes(), k


def test_the_bsp_ps_server_steps_as_synchronous_sgd(tmp_path):
    config = real_config(with_keys(LOGREG, strategy={"kind": "bsp-ps"}))
    logs, _ = run_program(config, tmp_path)
    for k, expected in enumerate(sgd_reference(config, kernel_gradient)):
        assert logs[-1].snapshots[k].tobytes() == expected.tobytes(), k


# ---- tables -------------------------------------------------------------------------------

def table_reference(config) -> list[np.ndarray]:
    """One process's bsp with the tables replicated: every worker's whole gradient, their mean
    in worker order (Rules.mean), one step of the strategy's SGD (the tables' row optimizer
    and the MLP's SGD)."""
    workload = build_workload(config)
    params = workload.params.copy()
    sgd, out, mean = SGD(params, config), [params.copy()], np.zeros_like(params)
    for _ in range(config.run.iterations):
        grads = [kernel_gradient(workload.model, params, *w.next_batch())
                 for w in workload.workers]
        sgd.step(Rules.mean(grads, mean), config.workload.lr)
        out.append(params.copy())
    return out


@pytest.mark.parametrize("layers,program", [
    ({"strategy": {"kind": "bsp-ps"}, "embeddings": {"placement": "ps"},
      "cluster": {"workers": 2, "servers": 2}}, ps_tables),
    ({"strategy": {"kind": "bsp"}, "embeddings": {"placement": "alltoall"}}, bsp_tables),
    ({"strategy": {"kind": "bsp"},
      "embeddings": {"placement": "alltoall", "sharding": "table"}}, bsp_tables),
])
def test_sharded_tables_train_as_one_process_with_the_tables_replicated(tmp_path, layers,
                                                                         program):
    config = real_config(with_keys(WIDE_DEEP, **layers))
    logs, _ = run_program(config, tmp_path)
    record = logs[config.cluster.workers] if program is ps_tables else logs[0]
    assert sorted(record.snapshots) == list(range(config.run.iterations + 1))
    for k, expected in enumerate(table_reference(config)):
        # a partial pooled sum adds in another order than one process does (rounding)
        np.testing.assert_allclose(record.snapshots[k], expected, rtol=1e-12, atol=1e-14)
    extra = record.extra
    assert extra["cache_hit_rate"] == 0.0 and extra["pull_bytes_per_step"] > 0
    assert extra["unique_ids_per_step"] > 0 and extra["shard_load_max_over_mean"] >= 1.0


def test_a_table_shard_steps_a_synchronous_step_by_the_mean_of_its_rows():
    config = real_config(with_keys(WIDE_DEEP, strategy={"kind": "bsp-ps"},
                                   embeddings={"placement": "ps"},
                                   cluster={"workers": 2, "servers": 1}))
    workload, rules = build_workload(config), make_rules(config)
    layout = ps_tables.layout_of(workload)
    shard = ps_tables.ShardProtocol(rules, workload, layout, 0)
    before = shard.params.copy()
    lo, hi = layout.dense[0]
    table = layout.tables[1]  # the first embedding table (0 is the wide part): its row 3
    ids = [layout.split([np.zeros(0, np.int64), np.array([3])] +
                        [np.zeros(0, np.int64)] * (len(layout.tables) - 2))[0]] * 2
    pushes = [ps_tables.RowPush(i, np.full(layout.values(i), float(w + 1)),
                                np.full(hi - lo, float(w + 1))) for w, i in enumerate(ids)]
    shard.on_push(0, pushes[0], 0, 0.5, 1.0)
    assert shard.store.version == 0 and np.array_equal(shard.params, before)  # kept
    shard.on_push(1, pushes[1], 0, 0.5, 2.0)
    assert shard.store.version == 1 and len(shard.log.updates) == 1
    expected = before.copy()
    SGD(expected, config).step(np.full(hi - lo, 1.5), config.workload.lr, slice(lo, hi))
    np.testing.assert_array_equal(shard.params[lo:hi], expected[lo:hi])  # the dense mean
    changed = np.flatnonzero(shard.params[:lo] != before[:lo])
    row = table.params.start + 3 * table.dim
    assert set(changed) == set(range(row, row + table.dim))  # the pushed row, only it, moved


# ---- elastic ------------------------------------------------------------------------------

class Protocol:
    """What the monitor asks of a server: its workers, the dead and stopped ones."""

    def __init__(self, n: int) -> None:
        self.n, self.dead, self.stopped, self.dropped = n, set(), set(), []

    def drop(self, worker: int, now: float) -> None:
        self.dead.add(worker)
        self.dropped.append(worker)


def test_the_server_finds_a_dead_worker_by_its_pid_and_drops_it_once(tmp_path):
    config = real_config(with_keys(LOGREG, strategy={"kind": "asp"}))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid names no process
    (tmp_path / "rank0.pid").write_text(f"{os.getpid()}\n")
    (tmp_path / "rank1.pid").write_text(f"{gone.pid}\n")

    def program(comm):
        ctx = rank_context(comm, config, tmp_path, faults={"elastic": True})
        assert elastic_rank.elastic(ctx)
        protocol = Protocol(2)
        monitor = elastic_rank.WorkerMonitor.of(ctx, protocol)
        assert monitor is not None
        return protocol, [monitor.check(), monitor.check()], monitor.summary()

    protocol, found, summary = run_ranks(1, program).results[0]
    assert found == [True, False] and protocol.dropped == [1]
    assert summary["dead_workers"] == [1] and set(summary["found_dead_s"]) == {"1"}


def test_without_elastic_faults_there_is_no_monitor_and_no_plan(tmp_path):
    config = real_config(LOGREG)

    def program(comm):
        ctx = rank_context(comm, config, tmp_path)
        return (elastic_rank.elastic(ctx), elastic_rank.WorkerMonitor.of(ctx, Protocol(2)),
                elastic_rank.worker_plan(ctx))

    assert run_ranks(1, program).results[0] == (False, None, None)


def test_the_server_collects_every_live_workers_log_and_a_dead_ones_record(tmp_path):
    config = real_config(LOGREG)  # 2 workers and the server: ranks 0, 1, 2

    def program(comm):
        ctx = rank_context(comm, config, tmp_path, faults={"elastic": True})
        log = RankLog(ctx.rank)
        if ctx.rank == 2:
            log.extra["dead_workers"] = [1]  # rank 1 died: it sends nothing
        elif ctx.rank == 1:
            return None
        log.span(ctx.rank, "compute", 0.0, 1.0)
        return elastic_rank.collect(ctx, log)

    (tmp_path / "rank1.killed").write_text('{"rank": 1, "failure": 0, "update": 2, '
                                           '"at_s": 0.25, "lost_s": 0.0}')
    results = run_ranks(3, program).results
    assert results[0] is None  # a worker sends its log
    logs = results[2]
    assert [log.rank for log in logs] == [0, 1, 2]
    assert logs[0].spans == [(0, "compute", 0.0, 1.0)]
    # a dead worker left no log here: down from its death (the marker's time) to the end
    assert logs[1].spans == [(1, "overhead", 0.0, 0.25), (1, "restart", 0.25, float("inf"))]
