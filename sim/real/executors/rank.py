"""The program every MPI rank runs: ``python -m sim.real.executors.rank --spec SPEC.json``.

The spec (a :class:`~sim.real.executors.rank_spec.RankSpec`, written by
:mod:`sim.real.launch.real_run`) holds the config the parent validated, which the rank does
not check again, the work directory shared with the launcher, the message path, the
allreduce implementation and the wait mode. A rank leaves in
the work directory ``rankR.pid`` (so the launcher can name a rank that died), touches
``rankR.beat`` while it makes progress and ``rankR.done`` when it has finished training;
an exception is written to ``rankR.err`` and aborts every rank. Rank 0 gathers the logs and
writes the run's files, as JSON ``{name: text}``, to the spec's ``result`` path.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
import traceback
from pathlib import Path

from sim.real.executors.rank_spec import RankSpec
from sim.rundir import write_atomic


def train(comm: object, spec: RankSpec, started: float) -> None:
    from mpi4py import MPI

    from sim.real.executors.assemble import assemble
    from sim.real.executors.context import RankContext
    from sim.real.executors.elastic_rank import collect, elastic
    from sim.real.executors.rank_clock import Heartbeat, Waiter
    from sim.real.executors.rank_sched import leave
    from sim.real.executors.registry import real_strategy
    from sim.training.strategies import make_rules
    from sim.training.workload import build_workload

    rank = comm.Get_rank()
    workdir = spec.workdir
    heartbeat = Heartbeat(workdir / f"rank{rank}.beat")
    config = spec.config
    workload = build_workload(config)
    rules = make_rules(config)
    strategy = real_strategy(config)
    if comm.Get_size() != strategy.ranks(config):  # the launcher's bug
        raise RuntimeError(f"{strategy.name} needs {strategy.ranks(config)} ranks, "
                           f"got {comm.Get_size()}")
    waiter = Waiter(spec.wait, yields=spec.sched != "default")
    ctx = RankContext(comm, workload, rules, waiter, spec.impl, heartbeat, spec)
    log = strategy.run(ctx)
    leave(spec.sched)  # the gather below spins in MPI: at the default policy, it shares
    (workdir / f"rank{rank}.done").touch()
    if elastic(ctx):  # no collective: a worker may be dead; the server writes the files
        logs, writer = collect(ctx, log), workload.n
    else:
        logs, writer = comm.gather(log, root=0), 0
    if rank == writer:
        strategy.combine(logs, workload)
        extra = {"net": spec.net, "transport": spec.transport,
                 "allreduce_impl": spec.impl, "wait_mode": spec.wait,
                 "sched": spec.sched,
                 "ranks": comm.Get_size(), "repeat": spec.repeat,
                 "mpi": MPI.Get_library_version().splitlines()[0].strip()}
        files = assemble(workload, rules, logs, time.perf_counter() - started, extra)
        write_atomic(spec.result, json.dumps(files))


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()
    parser = argparse.ArgumentParser(prog="python -m sim.real.executors.rank")
    parser.add_argument("--spec", type=Path, required=True)
    args = parser.parse_args(argv)
    spec = RankSpec.from_json(args.spec.read_text())
    from sim.real.executors.rank_clock import tighten_timer_slack
    from sim.real.executors.rank_sched import enter

    tighten_timer_slack()
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    # after MPI_Init (whose PMI exchange with the launcher sleeps in sockets), before the
    # imports and warm-up: ranks pinned to one core take turns at them, none spins
    enter(spec.sched, rank)
    (spec.workdir / f"rank{rank}.pid").write_text(f"{os.getpid()}\n")
    if spec.elastic:  # the process manager tells the others of a planned death: carry on
        for sig in (signal.SIGINT, signal.SIGUSR1):
            signal.signal(sig, signal.SIG_IGN)
    try:
        train(comm, spec, started)
    except BaseException as exc:  # noqa: BLE001 - any failure must end every rank
        (spec.workdir / f"rank{rank}.err").write_text(
            f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()}")
        comm.Abort(1)
    if spec.elastic:  # MPI_Finalize could wait for the dead rank
        os._exit(0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
