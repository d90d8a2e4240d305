"""Checkpoint-restart of real bsp runs, on the ranks' side.

Every rank holds the same replica, so rank 0 alone writes the checkpoint
(:mod:`sim.real.executors.checkpoint`) after update k when ``[checkpoint]`` says one is
due: rank 0 writes the training state (atomically, fsynced), and a barrier holds every
rank until it is on disk, which is each rank's ``checkpoint`` time (blocking mode, as in
the simulator). Then every rank leaves beside it the lab's record of what it logged since
its last checkpoint (:func:`~sim.real.executors.checkpoint.save_record`; untimed, so it
shows as loop overhead). With ``checkpoint.every_s`` rank 0's clock decides and a
one-value broadcast per update tells the others.

A job started again after a failure (the spec's ``resume``) loads the checkpoint the runner
chose into the replica and its own records up to it into its log, fast-forwards every
stream that drew numbers since the start (the worker's mini-batches, the compute model's
noise) by the updates done, and carries on with the same batches: the numbers are an
uninterrupted run's, bit for bit. The time the failure cost goes on every rank's first step
as the spans the runner measured: the ``recompute`` of work lost with the killed job, the
``restart`` (from the kill to this job's start, mpiexec and start-up included).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sim.real.executors import checkpoint as ckpt
from sim.real.executors.assemble import Part, RankLog
from sim.real.executors.context import RankContext
from sim.real.executors.fault_injection import FaultPlan
from sim.real.executors.replica import Replica
from sim.rundir import write_atomic


class RestartRecovery:
    """A bsp rank's failures and checkpoints (a no-op without ``[faults]`` and
    ``[checkpoint]``)."""

    def __init__(self, ctx: RankContext, replica: Replica) -> None:
        self.ctx, self.replica = ctx, replica
        spec = ctx.faults
        self.dir = Path(spec["checkpoints"]) if spec.get("checkpoints") else None
        self.resume_spec = spec.get("resume")
        self.plan = FaultPlan.of(ctx.config, ctx.rank, ctx.workdir, spec.get("done", []))
        self.cfg = ctx.config.checkpoint
        self.written = int(spec.get("checkpoints_written", 0))
        self.last_begun_s = 0.0
        self.gaps: list[Part] = []  # what the failure cost, put on the first step
        self.kernel_s: list[float] = []  # the history's (the log's are this job's only)
        self.messages = 0
        # what the records so far hold: steps, kernel times, messages, the last update
        # (-1: none yet, so the snapshot of update 0, the first evaluation, goes in one)
        self.recorded = (0, 0, 0, -1)
        self.compute: Any = None
        self.allreduce: Any = None

    def resume(self) -> int:
        """Load the checkpoint to resume from into the replica; the updates it holds."""
        if not self.resume_spec or not self.resume_spec.get("path"):
            return 0
        saved = ckpt.load(Path(self.resume_spec["path"]))
        replica, workload, rank = self.replica, self.ctx.workload, self.ctx.rank
        replica.params[:] = saved.params
        if replica.sgd.velocity is not None and saved.velocity is not None:
            replica.sgd.velocity[:] = saved.velocity
        ckpt.skip_batches(workload.workers[rank], saved.batches[rank])
        for _ in range(saved.update):  # the modelled compute times drawn so far
            workload.compute.duration(rank, 0.0)
        pieces = ckpt.load_records(self.dir, rank,
                                   ckpt.record_updates(self.dir, rank, saved.update))
        replica.steps = [step for piece in pieces for step in piece["steps"]]
        for piece in pieces:
            replica.log.snapshots.update(piece["snapshots"])
        self.kernel_s = [t for piece in pieces for t in piece["kernel_s"]]
        self.messages = sum(piece["messages"] for piece in pieces)
        self.recorded = (len(replica.steps), len(self.kernel_s), self.messages, saved.update)
        self.last_begun_s = float(saved.meta.get("taken_s", 0.0))
        self.written = int(saved.meta.get("checkpoints", 0))
        return saved.update

    def started(self) -> None:
        """The job's clock has started: the failure's spans up to now."""
        if self.resume_spec:
            self.gaps = [tuple(g) for g in self.resume_spec.get("gaps", [])]
            self.gaps.append(("restart", float(self.resume_spec["kill_s"]), self.ctx.now()))

    def parts(self, parts: list[Part]) -> list[Part]:
        """A step's parts, with the failure's spans before the first step's."""
        gaps, self.gaps = self.gaps, []
        return gaps + parts

    def after(self, update: int, last: bool) -> None:
        """Update ``update`` is applied on every rank: a planned failure, then a
        checkpoint if one is due (none after the run's last update)."""
        ctx = self.ctx
        self.plan.check(update, ctx.now(), None)
        if self.dir is None or not self.cfg.enabled or last or not self.due(update):
            return
        began = ctx.now()
        if ctx.rank == 0:
            self.write(update, began)
        ctx.comm.Barrier()  # blocking: every rank waits until the checkpoint is on disk
        ended = ctx.now()
        self.replica.steps[-1][0].append(("checkpoint", began, ended))
        self.last_begun_s = began
        self.written += 1
        self.save_record(update)
        if ctx.rank == 0:  # when training went on from it: the runner's record
            write_atomic(ctx.workdir / f"ckpt-{update}.json",
                         json.dumps({"update": update, "taken_s": began, "resumed_s": ended}))

    def due(self, update: int) -> bool:
        if self.cfg.every_steps is not None:
            return update % self.cfg.every_steps == 0
        due = self.ctx.now() - self.last_begun_s >= self.cfg.every_s
        return bool(self.ctx.comm.bcast(due, root=0))  # rank 0's clock decides for all

    def attach(self, compute: Any, allreduce: Any) -> None:
        """This job's compute and allreduce, whose kernel times and messages the log gets."""
        self.compute, self.allreduce = compute, allreduce

    def save_record(self, update: int) -> None:
        """This rank's log since its last record, beside checkpoint ``update``."""
        steps_n, kernel_n, messages_n, last = self.recorded
        kernel = self.kernel_s + list(self.compute.kernel_s)
        messages = self.messages + self.allreduce.messages
        piece = {"steps": [(list(parts), *rest) for parts, *rest in
                           self.replica.steps[steps_n:]],
                 "snapshots": {i: s for i, s in self.replica.log.snapshots.items()
                               if i > last},
                 "kernel_s": kernel[kernel_n:], "messages": messages - messages_n}
        ckpt.save_record(self.dir, update, self.ctx.rank, piece)
        self.recorded = (len(self.replica.steps), len(kernel), messages, update)

    def write(self, update: int, began: float) -> None:
        replica = self.replica
        ckpt.save(self.dir, ckpt.Saved(
            update, replica.params.copy(),
            None if replica.sgd.velocity is None else replica.sgd.velocity.copy(),
            [update] * self.ctx.workload.n,
            {"taken_s": began, "checkpoints": self.written + 1}))

    def finish(self, log: RankLog) -> RankLog:
        """``log`` with the history's kernel times and messages, then this job's."""
        log.kernel_s = self.kernel_s + list(self.compute.kernel_s)
        log.messages = self.messages + self.allreduce.messages
        return log
