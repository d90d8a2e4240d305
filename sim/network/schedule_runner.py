"""Runs a collective's schedule on the flow model, whole rounds at a time.

Follows the semantics in :mod:`sim.network.schedule`. Endpoints that move together are
handled together: when a thousand ranks finish a ring step at the same instant, their
thousand next transfers are found with a few numpy calls and sent as one batch, so a
ring allreduce over p ranks in step costs O(p) SimPy events, not O(p^2). Ranks that drift
apart (uneven paths, contention) cost one batch per distinct instant.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import numpy as np
import simpy

from sim.network.schedule import Round

if TYPE_CHECKING:
    from sim.network.collectives import Plan


class Network(Protocol):
    """What an execution needs of a network (:class:`sim.network.flow.FlowNetwork` has it)."""

    env: simpy.Environment

    def send_many(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
                  on_delivered: Callable[[np.ndarray], None]) -> None: ...


class _OpenRound:
    """A round some endpoint has reached: who takes part, what started, payloads in flight."""

    def __init__(self, rnd: Round, n_endpoints: int) -> None:
        self.rnd = rnd
        self.involved = np.bincount(np.concatenate([rnd.src, rnd.dst]),
                                    minlength=n_endpoints)  # transfers per endpoint
        self.n_involved = int(np.count_nonzero(self.involved))
        self.started = np.zeros(len(rnd), dtype=bool)
        self.n_started = 0
        self.undelivered = len(rnd)
        self.payloads: dict[int, np.ndarray] = {}
        self._by_endpoint: tuple[np.ndarray, np.ndarray] | None = None

    def transfers_of(self, endpoints: np.ndarray) -> np.ndarray:
        """Sorted ids of the transfers the given endpoints take part in."""
        if self._by_endpoint is None:  # made when endpoints first arrive apart
            # transfer ids grouped by endpoint (CSR): rows ptr[e]:ptr[e+1] of by_endpoint
            ends = np.concatenate([self.rnd.src, self.rnd.dst])
            self._by_endpoint = (np.argsort(ends, kind="stable") % max(len(self.rnd), 1),
                                 np.concatenate([[0], np.cumsum(self.involved)]))
        by_endpoint, ptr = self._by_endpoint
        start = ptr[endpoints]
        length = ptr[endpoints + 1] - start
        rows = np.repeat(start - (np.cumsum(length) - length), length) + np.arange(length.sum())
        return distinct(by_endpoint[rows], len(self.rnd))


class Execution:
    """One schedule in flight; ``done`` fires when every endpoint is past the last round."""

    def __init__(self, network: Network, plan: Plan) -> None:
        self.network, self.plan = network, plan
        schedule = plan.schedule
        self.n_rounds = schedule.n_rounds
        self.n_endpoints = schedule.n_endpoints
        self.round_of = np.zeros(self.n_endpoints, np.int64)  # the round each endpoint is in
        self.pending = np.zeros(self.n_endpoints, np.int64)  # its undelivered transfers there
        self.rounds: dict[int, _OpenRound] = {}
        self.n_opened = 0
        self.n_finished = 0
        self.done: simpy.Event = network.env.event()
        self._enter(np.arange(self.n_endpoints))

    def _round(self, r: int) -> _OpenRound | None:
        """Round r, opened on first arrival; None once all its transfers were delivered."""
        if r == self.n_opened:
            self.n_opened += 1
            opened = _OpenRound(self.plan.schedule.round(r), self.n_endpoints)
            if opened.undelivered:
                self.rounds[r] = opened
        return self.rounds.get(r)

    def _enter(self, group: np.ndarray) -> None:
        """Endpoints in ``group`` have just entered round ``round_of``; skip idle rounds."""
        while len(group):
            where = self.round_of[group]
            moving = []
            rounds = distinct(where, self.n_rounds + 1)
            for r in rounds.tolist():
                members = group if len(rounds) == 1 else group[where == r]
                if r == self.n_rounds:
                    self.n_finished += len(members)
                    continue
                opened = self._round(r)
                involved = opened.involved[members] if opened else np.zeros(len(members), int)
                busy = involved > 0
                self.pending[members[busy]] = involved[busy]
                idle = members[~busy]
                self.round_of[idle] += 1
                moving.append(idle)
                if busy.any():
                    self._start_ready(r, opened, members[busy])
            group = np.concatenate(moving) if moving else group[:0]
        if self.n_finished == self.n_endpoints and not self.done.triggered:
            self.done.succeed()

    def _start_ready(self, r: int, opened: _OpenRound, arrived: np.ndarray) -> None:
        """Send the transfers of round r whose two endpoints are now both in it."""
        rnd = opened.rnd
        if not opened.n_started and len(arrived) == opened.n_involved:
            ids = np.arange(len(rnd))  # everyone arrived at once (ranks in step)
        else:
            ids = opened.transfers_of(arrived)
            ids = ids[~opened.started[ids] & (self.round_of[rnd.src[ids]] == r)
                      & (self.round_of[rnd.dst[ids]] == r)]
        if not len(ids):
            return
        opened.started[ids] = True
        opened.n_started += len(ids)
        if self.plan.buffers is not None:
            opened.payloads.update(self.plan.buffers.payloads(rnd, ids))
        hosts = self.plan.hosts
        self.network.send_many(hosts[rnd.src[ids]], hosts[rnd.dst[ids]],
                               rnd.count[ids] * float(self.plan.itemsize),
                               lambda which: self._delivered(r, ids[which]))

    def _delivered(self, r: int, ids: np.ndarray) -> None:
        opened = self.rounds[r]
        rnd = opened.rnd
        if len(ids) == len(rnd):  # the whole round at once: every endpoint in it is through
            through = np.flatnonzero(opened.involved)
            self.pending[through] = 0
        else:
            np.subtract.at(self.pending, rnd.src[ids], 1)
            np.subtract.at(self.pending, rnd.dst[ids], 1)
            touched = distinct(np.concatenate([rnd.src[ids], rnd.dst[ids]]), self.n_endpoints)
            through = touched[self.pending[touched] == 0]
        if self.plan.buffers is not None and len(through):
            receiving = np.zeros(self.n_endpoints, dtype=bool)
            receiving[through] = True
            self.plan.buffers.apply(rnd, np.flatnonzero(receiving[rnd.dst]), opened.payloads)
        opened.undelivered -= len(ids)
        if not opened.undelivered:
            del self.rounds[r]
        self.round_of[through] += 1
        self._enter(through)


def distinct(values: np.ndarray, bound: int) -> np.ndarray:
    """Sorted distinct values of an int array whose values lie in [0, bound).

    A mark array is cheaper than sorting when the values are many compared to the bound,
    which is the common case here (whole rounds moving together).
    """
    if len(values) * 8 < bound:
        return np.unique(values)
    seen = np.zeros(bound, dtype=bool)
    seen[values] = True
    return np.flatnonzero(seen)
