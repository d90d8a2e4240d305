"""Flows started in bulk (a collective's round), kept in numpy arrays, one row each.

A thousand flows starting together cost one rate computation (:func:`max_min_rates` over the
rows whose rates are stale), and rows whose links no other row touches keep their rates when
others start or end (max-min splits into independent parts over disjoint links). The table is
closed: no flow outside it shares a link with its rows (:class:`sim.network.flow.FlowNetwork`
keeps it so), so its rates are max-min fair on their own.
"""

from __future__ import annotations

import numpy as np

from sim.network.incremental import DONE
from sim.network.maxmin import max_min_rates

_COLUMNS = ("left", "rate", "size", "hops", "batch", "index", "started")


class BulkFlows:
    """Active flows as rows of arrays; routes as (row, link) pairs grouped by row."""

    def __init__(self, capacity: np.ndarray) -> None:
        self.capacity = capacity
        self.left = np.empty(0)  # bytes not yet sent
        self.rate = np.empty(0)  # bytes/s
        self.size = np.empty(0)
        self.hops = np.empty(0, np.int64)
        self.batch = np.empty(0, np.int64)  # which send_many call
        self.index = np.empty(0, np.int64)  # position in that call
        self.started = np.empty(0)  # when each flow started, s
        self.pair_flow = np.empty(0, np.int64)
        self.pair_link = np.empty(0, np.int64)
        self.load = np.zeros(len(capacity), np.int64)  # rows on each link
        self.updated_at = 0.0
        self.stale_from: int | None = None  # rows >= this need their rates recomputed

    @property
    def n_flows(self) -> int:
        return self.left.size

    def busy(self, links: np.ndarray | list[int]) -> bool:
        """Whether any of ``links`` carries a row."""
        return bool(self.n_flows) and bool(self.load[links].any())

    def add(self, now: float, columns: dict[str, np.ndarray], pair_flow: np.ndarray,
            pair_link: np.ndarray) -> None:
        """Append rows (``columns``: every name of :data:`_COLUMNS` but rate; pairs index
        the new rows from 0); their rates, and others' if they share links, go stale."""
        self.advance(now)
        first = self.n_flows
        shares_a_link = bool(self.load[pair_link].any())
        n = len(columns["left"])
        for name in _COLUMNS:
            new = columns[name] if name != "rate" else np.zeros(n)
            # always a copy: ``left`` is worked down in place, and a caller's array (or the
            # same array given as two columns) must not change with it
            setattr(self, name, np.array(new) if not first
                    else np.concatenate([getattr(self, name), new]))
        self.pair_flow = np.concatenate([self.pair_flow, pair_flow + first])
        self.pair_link = np.concatenate([self.pair_link, pair_link])
        self.load += np.bincount(pair_link, minlength=len(self.load))
        # New flows on idle links leave every existing rate as it was.
        self._mark_stale(0 if shares_a_link else first)

    def advance(self, now: float) -> None:
        """Bring every row's remaining bytes up to ``now``."""
        elapsed = now - self.updated_at
        if elapsed > 0 and self.n_flows:
            self.left -= self.rate * elapsed
        self.updated_at = now

    def settle(self) -> None:
        """Recompute the stale rates."""
        first, self.stale_from = self.stale_from, None
        if first is None:
            return
        start = int(np.searchsorted(self.pair_flow, first))
        flow, link = self.pair_flow[start:] - first, self.pair_link[start:]
        if self.load[link].max() == 1:
            # each link carries one flow: a flow runs at its slowest link's capacity (what
            # progressive filling gives, without the rounds' rounding)
            self.rate[first:] = _slowest_link(self.capacity[link], self.hops[first:])
        else:
            self.rate[first:] = max_min_rates(flow, link, self.n_flows - first, self.capacity)

    def first_wait(self) -> float:
        """Seconds from the last :meth:`advance` until the next row is through (inf: none)."""
        if not self.n_flows:
            return np.inf
        return float((self.left / self.rate).min())

    def latest_wait(self, limit: float) -> float:
        """The longest wait (s) among the rows through within ``limit`` s; -inf if none."""
        if not self.n_flows:
            return -np.inf
        finish = self.left / self.rate
        return float(finish[finish <= limit].max(initial=-np.inf))

    def done_rows(self, now: float) -> np.ndarray:
        """Which rows are through at ``now`` (after :meth:`advance`)."""
        done = self.left <= DONE * self.size
        # a flow whose remaining time is below the clock's resolution is done, too;
        # rows added at this instant have no rate yet (0) and are not
        with np.errstate(divide="ignore"):
            done |= now + self.left / self.rate <= now
        return done

    def links_of(self, row: int) -> tuple[int, ...]:
        """A row's route (its pairs are consecutive: pair_flow never decreases)."""
        start, stop = np.searchsorted(self.pair_flow, (row, row + 1))
        return tuple(self.pair_link[start:stop].tolist())

    def remove(self, done: np.ndarray) -> bool:
        """Drop the ``done`` rows; whether the others' rates went stale (they shared a link)."""
        if done.all():  # a collective's round, all through together
            self.load[self.pair_link] = 0  # only rows are counted here
            for name in _COLUMNS:
                setattr(self, name, getattr(self, name)[:0])
            self.pair_flow, self.pair_link = self.pair_flow[:0], self.pair_link[:0]
            self.stale_from = None
            return False
        pair_done = done[self.pair_flow]
        freed = self.pair_link[pair_done]
        self.load -= np.bincount(freed, minlength=len(self.load))
        keep = ~done
        row = np.cumsum(keep) - 1
        if self.stale_from is not None:
            self.stale_from = int(keep[: self.stale_from].sum())
        for name in _COLUMNS:
            setattr(self, name, getattr(self, name)[keep])
        self.pair_flow = row[self.pair_flow[~pair_done]]
        self.pair_link = self.pair_link[~pair_done]
        if self.load[freed].any():
            self._mark_stale(0)
        return self.stale_from is not None

    def _mark_stale(self, first_row: int) -> None:
        current = self.stale_from
        self.stale_from = first_row if current is None else min(current, first_row)


def _slowest_link(capacity: np.ndarray, hops: np.ndarray) -> np.ndarray:
    """The smallest of each flow's ``hops`` consecutive link capacities."""
    if hops[0] == hops[-1] and (hops == hops[0]).all():  # fixed-length routes: a table
        table = capacity.reshape(len(hops), int(hops[0]))
        slowest = table[:, 0].copy()
        for column in range(1, table.shape[1]):  # a few columns: faster than .min(axis=1)
            np.minimum(slowest, table[:, column], out=slowest)
        return slowest
    return np.minimum.reduceat(capacity, np.cumsum(hops) - hops)
