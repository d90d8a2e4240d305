"""Flow-level network on SimPy: messages are fluid flows sharing links max-min fairly.

A message from host a to host b of n bytes (see :mod:`sim.network.fabrics`):

1. waits the send overhead o,
2. flows along its route; whenever a flow starts or ends, the rates of the flows it
   shares links with are recomputed by progressive filling (SimGrid's flow model),
3. once its last byte has left, is delivered hops * L + o later.

Flows due to finish within ``precision_s`` (1 ns by default, SimGrid's default timing
precision) of the first one finish together, at the latest of their times: chunks that
differ by one byte then stay in step instead of splitting into separate events, and no
flow ever finishes early.

Speed: all flow state lives in numpy arrays. Everything that happens at one simulated
instant is settled by one low-priority event, so a thousand flows starting together cost
one rate computation, and a change whose links no other flow touches recomputes only the
new flows (max-min splits into independent parts over disjoint links).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy
from simpy.events import EventPriority

from sim.network.executor import Execution
from sim.network.fabrics import Fabric
from sim.network.maxmin import max_min_rates
from sim.network.topology import Paths, Topology

if TYPE_CHECKING:
    from sim.network.collectives import Plan

Delivered = Callable[[np.ndarray], None]  # receives indices into the submitted arrays

# A flow is finished when this fraction of its bytes is left: it absorbs the rounding of
# rate * time so that flows ending together finish in the same event.
_DONE = 1e-12
# Below SimPy's NORMAL (1): the settling pass runs after everything else at an instant.
_LAST = EventPriority(2)


class _EndOfInstant(simpy.Event):
    """An event processed after all normal events at the current simulated time."""

    def __init__(self, env: simpy.Environment) -> None:
        super().__init__(env)
        self._ok = True  # triggered on creation, like simpy.Timeout
        self._value = None
        env.schedule(self, _LAST)


@dataclass
class FlowLog:
    """The finished flows kept for the trace, (start s, end s, bytes, directed links): the
    first ``limit`` that lie within ``window_s``. Every finished flow is counted, so what
    was left out is known (:attr:`left_out`, from :attr:`first_left_out_s` on)."""

    limit: int
    window_s: tuple[float, float] = (0.0, math.inf)
    flows: list[tuple[float, float, float, tuple[int, ...]]] = field(default_factory=list)
    finished: int = 0
    first_left_out_s: float | None = None

    @property
    def left_out(self) -> int:
        return self.finished - len(self.flows)


class FlowNetwork:
    """Hosts on a topology exchanging messages as max-min fair flows.

    Link capacities come from the topology (build it from ``fabric.bandwidth_Bps``, as
    :func:`sim.network.runner.build_network` does); latency and overheads from the fabric.
    """

    model = "flow"

    def __init__(self, env: simpy.Environment, fabric: Fabric, topology: Topology,
                 precision_s: float = 1e-9) -> None:
        self.env, self.fabric, self.topology = env, fabric, topology
        self.precision_s = precision_s
        self.capacity = topology.capacity_Bps  # achievable rates: built from bandwidth_Bps
        # active flows, one row each
        self._left = np.empty(0)  # bytes not yet sent
        self._rate = np.empty(0)  # bytes/s
        self._size = np.empty(0)
        self._hops = np.empty(0, np.int64)
        self._batch = np.empty(0, np.int64)  # which send_many call
        self._index = np.empty(0, np.int64)  # position in that call
        self._pair_flow = np.empty(0, np.int64)  # routes as (flow row, link) pairs
        self._pair_link = np.empty(0, np.int64)
        self._link_load = np.zeros(topology.n_links, np.int64)  # flows on each link
        self._updated_at = env.now
        self._batches: dict[int, list[Any]] = {}  # id -> [on_delivered, undelivered]
        self._next_batch = 0
        self._recompute_from: int | None = None  # rows whose rates are stale
        self._settling = False
        self._timer = 0  # version of the pending completion timer
        self._started = np.empty(0)  # when each flow started, s
        self._route_cache: dict[tuple[bytes, bytes], Paths] = {}
        self.flows_started = 0
        self.messages_delivered = 0
        self.flow_log: FlowLog | None = None

    # ---- sending ---------------------------------------------------------------------

    def send(self, src: int, dst: int, nbytes: float) -> simpy.Event:
        """One message; the event fires at delivery with the delivery time as value."""
        done = self.env.event()
        self.send_many(np.array([src]), np.array([dst]), np.array([nbytes], np.float64),
                       lambda _: done.succeed(self.env.now))
        return done

    def send_many(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
                  on_delivered: Delivered) -> None:
        """Messages src[i] -> dst[i] (hosts) of nbytes[i] bytes, all sent now.

        ``on_delivered(indices)`` is called at each instant some of them arrive.
        Raises ValueError for a host outside the topology.
        """
        src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
        nbytes = np.asarray(nbytes, np.float64)
        if not len(src):
            return
        hosts = self.topology.n_hosts
        if min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= hosts:
            raise ValueError(f"hosts must be in [0, {hosts}), got src {src} dst {dst}")
        batch = self._next_batch
        self._next_batch += 1
        self._batches[batch] = [on_delivered, len(src)]
        start = self.env.timeout(self.fabric.overhead_s)
        start.callbacks.append(lambda _: self._start(batch, src, dst, nbytes))

    def run_plan(self, plan: Plan) -> Generator[simpy.Event, Any, float]:
        """Run a collective's schedule here (see :mod:`sim.network.executor`); elapsed s."""
        started = self.env.now
        yield Execution(self, plan).done
        return self.env.now - started

    # ---- flow table ------------------------------------------------------------------

    def _start(self, batch: int, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray) -> None:
        paths = self._paths(src, dst)
        index = np.arange(len(src))
        # Empty messages and same-host messages use no link: only latency and overheads.
        instant = (nbytes <= 0) | (paths.hops == 0)
        if instant.any():
            self._deliver_later(np.full(instant.sum(), batch), index[instant],
                                paths.hops[instant])
            keep = ~instant
            row = np.cumsum(keep) - 1
            pair_keep = keep[paths.flow]
            paths = paths._replace(flow=row[paths.flow[pair_keep]],
                                   link=paths.link[pair_keep], hops=paths.hops[keep])
            index, nbytes = index[keep], nbytes[keep]
        if len(index):
            self._add(batch, index, nbytes, paths)

    def _paths(self, src: np.ndarray, dst: np.ndarray) -> Paths:
        """Routes, remembered for small requests: training repeats the same few exchanges
        (a worker's push to its shards) thousands of times, and routing is fixed."""
        if len(src) > 16:
            return self.topology.paths(src, dst)
        key = (src.tobytes(), dst.tobytes())
        paths = self._route_cache.get(key)
        if paths is None:
            if len(self._route_cache) >= 4096:
                self._route_cache.clear()
            paths = self._route_cache[key] = self.topology.paths(src, dst)
        return paths

    def _add(self, batch: int, index: np.ndarray, nbytes: np.ndarray, paths: Paths) -> None:
        self._advance()
        first = len(self._left)
        shares_a_link = bool(self._link_load[paths.link].any())
        self._left = np.concatenate([self._left, nbytes])
        self._size = np.concatenate([self._size, nbytes])
        self._rate = np.concatenate([self._rate, np.zeros(len(nbytes))])
        self._hops = np.concatenate([self._hops, paths.hops])
        self._started = np.concatenate([self._started, np.full(len(nbytes), self.env.now)])
        self._batch = np.concatenate([self._batch, np.full(len(nbytes), batch)])
        self._index = np.concatenate([self._index, index])
        self._pair_flow = np.concatenate([self._pair_flow, paths.flow + first])
        self._pair_link = np.concatenate([self._pair_link, paths.link])
        self._link_load += np.bincount(paths.link, minlength=len(self._link_load))
        self.flows_started += len(nbytes)
        # New flows on idle links leave every existing rate as it was.
        self._mark_stale(0 if shares_a_link else first)

    def _remove(self, done: np.ndarray) -> None:
        """Drop finished rows; recompute the others only if they shared a link."""
        pair_done = done[self._pair_flow]
        freed = self._pair_link[pair_done]
        self._link_load -= np.bincount(freed, minlength=len(self._link_load))
        keep = ~done
        row = np.cumsum(keep) - 1
        if self._recompute_from is not None:
            self._recompute_from = int(keep[: self._recompute_from].sum())
        for name in ("_left", "_rate", "_size", "_hops", "_batch", "_index", "_started"):
            setattr(self, name, getattr(self, name)[keep])
        self._pair_flow = row[self._pair_flow[~pair_done]]
        self._pair_link = self._pair_link[~pair_done]
        if self._link_load[freed].any():
            self._mark_stale(0)
        elif not self._settling:
            self._set_timer()  # nothing else changes at this instant: rates stand as they are

    def start_log(self, limit: int, window_s: tuple[float, float] = (0.0, math.inf)) -> None:
        """Keep finished flows for the trace's link tracks in :attr:`flow_log` (a
        :class:`FlowLog`: the first ``limit`` that lie within ``window_s``)."""
        self.flow_log = FlowLog(limit, window_s)

    def _log(self, done: np.ndarray) -> None:
        log, now = self.flow_log, float(self.env.now)
        rows = np.flatnonzero(done)
        log.finished += len(rows)
        inside = rows[(self._started[rows] >= log.window_s[0]) & (now <= log.window_s[1])]
        kept = inside[:log.limit - len(log.flows)]
        for row in kept:
            links = tuple(self._pair_link[self._pair_flow == row].tolist())
            log.flows.append((float(self._started[row]), now, float(self._size[row]), links))
        if len(kept) < len(rows) and log.first_left_out_s is None:
            log.first_left_out_s = now

    def _advance(self) -> None:
        """Bring every flow's remaining bytes up to now."""
        elapsed = self.env.now - self._updated_at
        if elapsed > 0 and len(self._left):
            self._left -= self._rate * elapsed
        self._updated_at = self.env.now

    # ---- settling and completion -------------------------------------------------------

    def _mark_stale(self, first_row: int | None) -> None:
        """Rates of rows >= first_row need recomputing (None: none do); settle at the end."""
        if first_row is not None:
            current = self._recompute_from
            self._recompute_from = first_row if current is None else min(current, first_row)
        if not self._settling:
            self._settling = True
            _EndOfInstant(self.env).callbacks.append(self._settle)

    def _settle(self, _: simpy.Event) -> None:
        self._settling = False
        first = self._recompute_from
        if first is not None:
            self._recompute_from = None
            pairs = slice(np.searchsorted(self._pair_flow, first), None)
            self._rate[first:] = max_min_rates(self._pair_flow[pairs] - first,
                                               self._pair_link[pairs],
                                               len(self._left) - first, self.capacity)
        self._set_timer()

    def _set_timer(self) -> None:
        """Wake up when the next flows finish (replacing any earlier wake-up)."""
        self._timer += 1
        if len(self._left):
            finish = self._left / self._rate
            first = finish.min()
            wait = float(finish[finish <= first + self.precision_s].max())
            version = self._timer
            timer = self.env.timeout(max(wait, 0.0))
            timer.callbacks.append(lambda _: self._on_timer(version))

    def _on_timer(self, version: int) -> None:
        if version != self._timer:
            return  # rates changed since this timer was set
        self._advance()
        done = self._left <= _DONE * self._size
        # a flow whose remaining time is below the clock's resolution is done, too;
        # rows added at this instant have no rate yet (0) and are not
        with np.errstate(divide="ignore"):
            done |= self.env.now + self._left / self._rate <= self.env.now
        if done.any():
            if self.flow_log is not None:
                self._log(done)
            self._deliver_later(self._batch[done], self._index[done], self._hops[done])
            self._remove(done)
        else:
            self._mark_stale(None)

    def _deliver_later(self, batch: np.ndarray, index: np.ndarray, hops: np.ndarray) -> None:
        """Deliver after the last byte: hops * L + receive overhead, grouped by delay."""
        delay = hops * self.fabric.latency_s + self.fabric.overhead_s
        for value, group in _groups(delay):
            timer = self.env.timeout(float(value))
            timer.callbacks.append(lambda _, b=batch[group], i=index[group]: self._deliver(b, i))

    def _deliver(self, batch: np.ndarray, index: np.ndarray) -> None:
        self.messages_delivered += len(index)
        for key, group in _groups(batch):
            entry = self._batches[int(key)]
            mine = index[group]
            entry[1] -= len(mine)
            if entry[1] == 0:
                del self._batches[int(key)]
            entry[0](np.sort(mine))


def _groups(keys: np.ndarray) -> list[tuple[Any, np.ndarray | slice]]:
    """(key, selector) for each distinct key, in key order; fast when all keys are equal."""
    if keys[0] == keys[-1] and (keys == keys[0]).all():
        return [(keys[0], slice(None))]
    return [(key, keys == key) for key in np.unique(keys)]
