"""Flow-level network on SimPy: messages are fluid flows sharing links max-min fairly.

A message from host a to host b of n bytes (its costs: :mod:`sim.network.message_cost`):

1. waits the send overhead o,
2. flows along its route; whenever a flow starts or ends, the rates of the flows it
   shares links with are recomputed by progressive filling (SimGrid's flow model),
3. once its last byte has left, is delivered hops * L + o later.

Flows due to finish within ``precision_s`` (1 ns by default, SimGrid's default timing
precision) of the first one finish together, at the latest of their times: chunks that
differ by one byte then stay in step instead of splitting into separate events, and no
flow ever finishes early.

Speed: flows live in one of two places, which never share a link. Messages sent a few at a
time (a push to the servers, a point-to-point send) go to :mod:`sim.network.incremental`,
where a start or an end recomputes only the flows connected to it through shared links, in
plain Python, and a flow alone on its route or queued behind one bottleneck costs
O(route length). Large batches (a collective's round) go to :mod:`sim.network.bulk`, numpy
arrays where a thousand flows starting together cost one rate computation. Everything that
happens at one simulated instant is settled by one low-priority event, and one timer waits
for the next flows to finish.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy
from simpy.events import NORMAL, EventPriority

from sim.network.bulk import BulkFlows
from sim.network.fabrics import Fabric
from sim.network.incremental import Flow, IncrementalMaxMin
from sim.network.linklog import FlowLog
from sim.network.message_cost import arrival_s, path_window_Bps, posted_s, wire_bytes
from sim.network.schedule_runner import Execution
from sim.network.token_bucket import TokenBuckets
from sim.network.topology import Paths, Topology
from sim.network.transports import REGISTRY, Transport

if TYPE_CHECKING:
    from sim.network.collectives import Plan

Delivered = Callable[[np.ndarray], None]  # receives indices into the submitted arrays

# Batches of up to this many messages start their flows one by one in the incremental
# engine; larger ones go to the numpy table in one piece.
SMALL_BATCH = 16
# Below SimPy's NORMAL (1): the settling pass runs after everything else at an instant.
_LAST = EventPriority(2)
_ROUTES_KEPT = 1 << 16  # (src, dst) routes remembered for messages sent one by one


class _EndOfInstant(simpy.Event):
    """An event processed after all normal events at the current simulated time."""

    def __init__(self, env: simpy.Environment) -> None:
        super().__init__(env)
        self._ok = True  # triggered on creation, like simpy.Timeout
        self._value = None
        env.schedule(self, _LAST)


class _Batch:
    """What to do as a send's messages arrive: call ``on_delivered(indices)`` at each
    instant some do, or fire ``event`` (with the time) once the last one has."""

    __slots__ = ("on_delivered", "event", "undelivered", "latest_s")

    def __init__(self, on_delivered: Delivered | None, event: simpy.Event | None,
                 n: int) -> None:
        self.on_delivered, self.event, self.undelivered = on_delivered, event, n
        self.latest_s = -math.inf  # the latest delivery so far (event batches)


class FlowNetwork:
    """Hosts on a topology exchanging messages as max-min fair flows.

    Link capacities come from the topology (build it from ``fabric.bandwidth_Bps``, as
    :func:`sim.network.network_builder.build_network` does); latency and overheads from the fabric.
    """

    model = "flow"

    def __init__(self, env: simpy.Environment, fabric: Fabric, topology: Topology,
                 precision_s: float = 1e-9, transport: Transport | None = None) -> None:
        self.env, self.fabric, self.topology = env, fabric, topology
        # the transport's frames are bytes on the wire; its window bounds each flow
        self.transport = transport if transport is not None else REGISTRY["mpi"]
        self._bounds: dict[int, float] | None = {} if self.transport.windowed else None
        self.precision_s = precision_s
        self.capacity = topology.capacity_Bps  # achievable rates: built from bandwidth_Bps
        self._bulk = BulkFlows(self.capacity)
        self._single = IncrementalMaxMin(self.capacity.tolist())
        self._batches: dict[int, _Batch] = {}
        self._next_batch = 0
        self._settling = False
        self._timer = 0  # version of the pending completion timer
        self._armed_at = math.inf  # when that timer fires (s)
        self._route_cache: dict[tuple[bytes, bytes], Paths] = {}
        self._routes: dict[tuple[int, int], tuple[int, ...]] = {}
        self.flows_started = 0
        self.messages_delivered = 0
        self.flow_log: FlowLog | None = None
        self._sample_due = False  # a sample of the log waits for the end of the instant
        self._bulk_links: set[int] = set()  # the table's links at the log's last sample
        # a shaped fabric's links are token buckets whose capacity moves in time
        self._buckets = None if not fabric.shaped else TokenBuckets(
            range(topology.n_links), self.capacity.tolist(), fabric.burst_s,
            fabric.peak_Bps, self._single.link_rate, self._single.set_capacity)

    @property
    def sent(self) -> int:
        """Sends so far (calls of :meth:`send`, :meth:`send_all`, :meth:`send_many` with
        messages): the next one's id, which the trace shows on its link flows."""
        return self._next_batch

    # ---- sending ---------------------------------------------------------------------

    def send(self, src: int, dst: int, nbytes: float) -> simpy.Event:
        """One message; the event fires at delivery with the delivery time as value.
        Raises ValueError for a host outside the topology."""
        hosts = self.topology.n_hosts
        if not (0 <= src < hosts and 0 <= dst < hosts):
            raise ValueError(f"hosts must be in [0, {hosts}), got src {src} dst {dst}")
        done = self.env.event()
        key = self._register(_Batch(None, done, 1))
        size = float(self._framed(float(nbytes)))
        start = self.env.timeout(posted_s(self.fabric))
        start.callbacks.append(lambda _: self._start_one(key, src, dst, size))
        return done

    def send_all(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray) -> simpy.Event:
        """Messages src[i] -> dst[i] of nbytes[i] bytes, all sent now; the event fires when
        the last has arrived, with that time as value. Raises ValueError as
        :meth:`send_many`."""
        done = self.env.event()
        if not len(src):
            return done.succeed(self.env.now)
        batch = _Batch(None, done, len(src))
        nbytes = self._framed(nbytes)
        if len(src) <= SMALL_BATCH or self._incremental_only:
            return self._send_small(_as_list(src), _as_list(dst), _as_list(nbytes, float),
                                    batch)
        self._send_bulk(src, dst, nbytes, batch)
        return done

    def send_many(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
                  on_delivered: Delivered) -> None:
        """Messages src[i] -> dst[i] (hosts) of nbytes[i] bytes, all sent now.

        ``on_delivered(indices)`` is called at each instant some of them arrive.
        Raises ValueError for a host outside the topology.
        """
        if not len(src):
            return
        batch = _Batch(on_delivered, None, len(src))
        nbytes = self._framed(nbytes)
        if len(src) <= SMALL_BATCH or self._incremental_only:
            self._send_small(_as_list(src), _as_list(dst), _as_list(nbytes, float), batch)
        else:
            self._send_bulk(src, dst, nbytes, batch)

    def run_plan(self, plan: Plan) -> Generator[simpy.Event, Any, float]:
        """Run a collective's schedule here (see :mod:`sim.network.schedule_runner`); elapsed s."""
        started = self.env.now
        yield Execution(self, plan).done
        return self.env.now - started

    def start_log(self, limit: int, window_s: tuple[float, float] = (0.0, math.inf),
                  sample_limit: int = 200_000) -> None:
        """Keep finished flows for the trace's link tracks in :attr:`flow_log` (a
        :class:`~sim.network.linklog.FlowLog`: the first ``limit`` that lie within
        ``window_s``, and the links' utilisation over the same span, at most
        ``sample_limit`` samples)."""
        self.flow_log = FlowLog(limit, window_s, sample_limit)
        self._single.follow_changes(self.flow_log.sampling)

    @property
    def _incremental_only(self) -> bool:
        """Whether every flow stays in the incremental engine, which alone solves with a
        transport's bounds and with capacities that move (token buckets)."""
        return self._bounds is not None or self._buckets is not None

    def _tokens_to_now(self) -> bool:
        """Count the token buckets up to now, before rates change; whether a link's
        capacity moved (False without buckets)."""
        return self._buckets is not None and self._buckets.advance(self.env.now)

    def _register(self, batch: _Batch) -> int:
        key = self._next_batch
        self._next_batch += 1
        self._batches[key] = batch
        return key

    def _send_small(self, src: list[int], dst: list[int], nbytes: list[float],
                    batch: _Batch) -> simpy.Event | None:
        hosts = self.topology.n_hosts
        if min(min(src), min(dst)) < 0 or max(max(src), max(dst)) >= hosts:
            raise ValueError(f"hosts must be in [0, {hosts}), got src {src} dst {dst}")
        key = self._register(batch)
        start = self.env.timeout(posted_s(self.fabric))
        start.callbacks.append(lambda _: self._start_small(key, src, dst, nbytes))
        return batch.event

    def _send_bulk(self, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
                   batch: _Batch) -> None:
        src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
        nbytes = np.asarray(nbytes, np.float64)
        hosts = self.topology.n_hosts
        if min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= hosts:
            raise ValueError(f"hosts must be in [0, {hosts}), got src {src} dst {dst}")
        key = self._register(batch)
        start = self.env.timeout(posted_s(self.fabric))
        start.callbacks.append(lambda _: self._start_bulk(key, src, dst, nbytes))

    # ---- starting flows ----------------------------------------------------------------

    def _route(self, src: int, dst: int) -> tuple[int, ...]:
        """The links from src to dst, remembered: routing is fixed."""
        route = self._routes.get((src, dst))
        if route is None:
            if len(self._routes) >= _ROUTES_KEPT:
                self._routes.clear()
            route = self._routes[src, dst] = tuple(self.topology.route(src, dst))
        return route

    def _framed(self, nbytes: Any) -> Any:
        """Payload bytes (a number or an array) as bytes on the wire: with the transport's
        frames (the payload itself when it has none: no conversion on the common path)."""
        if not self.transport.framed:
            return nbytes
        return wire_bytes(self.transport, np.asarray(nbytes, np.float64))

    def _bound(self, hops: int) -> float:
        """The most a flow over ``hops`` links may send (bytes/s): the transport's window
        over the path's round trip (inf without flow control)."""
        if self._bounds is None:
            return math.inf
        bound = self._bounds.get(hops)
        if bound is None:
            bound = self._bounds[hops] = path_window_Bps(self.transport, self.fabric, hops)
        return bound

    def _start_small(self, batch: int, src: list[int], dst: list[int],
                     nbytes: list[float]) -> None:
        self._tokens_to_now()
        instant = [key for index, (a, b, size) in enumerate(zip(src, dst, nbytes, strict=True))
                   if (key := self._begin(batch, index, a, b, size)) is not None]
        if instant:
            self._deliver_keys(instant)
        self._changed()

    def _start_one(self, batch: int, src: int, dst: int, size: float) -> None:
        self._tokens_to_now()
        instant = self._begin(batch, 0, src, dst, size)
        if instant is not None:
            self._deliver_keys([instant])
        self._changed()

    def _begin(self, batch: int, index: int, src: int, dst: int,
               size: float) -> tuple[int, int, int] | None:
        """Start one message's flow; its key if it uses no link (delivered without one)."""
        route = self._route(src, dst)
        # Empty messages and same-host messages use no link: only latency and overheads.
        if size <= 0 or not route:
            return batch, index, len(route)
        flow = Flow((batch, index, len(route)), route, size, self.env.now,
                    self._bound(len(route)))
        self.flows_started += 1
        if self._bulk.n_flows and self._bulk.busy(list(route)):
            # into the table, with whatever it shares its other links with: the table and
            # the incremental engine must never share a link
            self._to_bulk([*self._single.extract(route, self.env.now), (flow, size)])
        else:
            self._single.add(flow, self.env.now)
        return None

    def _start_bulk(self, batch: int, src: np.ndarray, dst: np.ndarray,
                    nbytes: np.ndarray) -> None:
        paths = self._paths(src, dst)
        index = np.arange(len(src))
        # Empty messages and same-host messages use no link: only latency and overheads.
        instant = (nbytes <= 0) | (paths.hops == 0)
        if instant.any():
            self._deliver_arrays(np.full(instant.sum(), batch), index[instant],
                                 paths.hops[instant])
            keep = ~instant
            row = np.cumsum(keep) - 1
            pair_keep = keep[paths.flow]
            paths = paths._replace(flow=row[paths.flow[pair_keep]],
                                   link=paths.link[pair_keep], hops=paths.hops[keep])
            index, nbytes = index[keep], nbytes[keep]
        if len(index):
            now = self.env.now
            if self._single.n_flows and self._single.busy(np.unique(paths.link).tolist()):
                # keep the table closed: the flows these share links with join it
                self._to_bulk(self._single.extract(np.unique(paths.link).tolist(), now))
            self.flows_started += len(index)
            self._bulk.add(now, {"left": nbytes, "size": nbytes, "hops": paths.hops,
                                 "batch": np.full(len(index), batch), "index": index,
                                 "started": np.full(len(index), now)},
                           paths.flow, paths.link)
        self._changed()

    def _to_bulk(self, flows: list[tuple[Flow, float]]) -> None:
        """Move flows (with the bytes each has left) into the numpy table."""
        if not flows:
            return
        keys = np.array([flow.key for flow, _ in flows], np.int64).reshape(-1, 3)
        routes = [flow.route for flow, _ in flows]
        self._bulk.add(self.env.now, {
            "left": np.array([left for _, left in flows]),
            "size": np.array([flow.size for flow, _ in flows]),
            "hops": keys[:, 2].copy(), "batch": keys[:, 0].copy(), "index": keys[:, 1].copy(),
            "started": np.array([flow.started for flow, _ in flows])},
            np.repeat(np.arange(len(routes)), [len(r) for r in routes]),
            np.array([link for route in routes for link in route], np.int64))

    def _paths(self, src: np.ndarray, dst: np.ndarray) -> Paths:
        """Routes of a batch, remembered: collectives repeat the same rounds."""
        key = (src.tobytes(), dst.tobytes())
        paths = self._route_cache.get(key)
        if paths is None:
            if len(self._route_cache) >= 4096:
                self._route_cache.clear()
            paths = self._route_cache[key] = self.topology.paths(src, dst)
        return paths

    # ---- settling and completion -------------------------------------------------------

    def _changed(self) -> None:
        """Flows started or ended now: settle at the end of the instant if some rates wait
        for it, else look again at when the next flows finish."""
        if self._bulk.stale_from is not None or self._single.pending:
            if not self._settling:
                self._settling = True
                _EndOfInstant(self.env).callbacks.append(self._settle)
        elif not self._settling:
            self._arm()
            self._sample_links()

    def _settle(self, _: simpy.Event) -> None:
        self._settling = False
        self._bulk.settle()
        self._single.settle(self.env.now)
        self._arm()
        self._sample_links()

    def _sample_links(self) -> None:
        """The rates are settled: the log samples the links' utilisation at the end of the
        instant, if it still does (flows start and end by the dozen at one instant, and
        only the last rates of an instant count)."""
        log = self.flow_log
        if log is not None and log.sampling and not self._sample_due:
            self._sample_due = True
            _EndOfInstant(self.env).callbacks.append(self._take_sample)

    def _take_sample(self, _: simpy.Event) -> None:
        self._sample_due = False
        log = self.flow_log
        if self._settling or not log.sampling:
            return  # a settling pass comes later in this instant, and samples after it
        changed = self._changed_links()
        # the first sample in the window shows every busy link, changed or not
        links = list(range(len(self.capacity))) if not log.opened else sorted(changed)
        log.sample(self.env.now, links, self._link_rates,
                   self._single.capacity, self._single.n_flows + self._bulk.n_flows)
        if not log.sampling:
            self._single.follow_changes(False)

    def _changed_links(self) -> set[int]:
        """The links whose rates may have changed since the last sample: the incremental
        engine's, and every link the table used then or uses now (its rates move as a
        whole)."""
        changed = self._single.take_changed()
        bulk = self._bulk
        if bulk.n_flows or self._bulk_links:
            links = set(np.unique(bulk.pair_link).tolist()) if bulk.n_flows else set()
            changed |= links | self._bulk_links
            self._bulk_links = links
        return changed

    def _link_rates(self, links: list[int]) -> list[float]:
        """Bytes/s on each of ``links`` (the engines never share a link)."""
        rates = [self._single.link_rate(link) for link in links]
        bulk = self._bulk
        if bulk.n_flows:
            per_link = np.bincount(bulk.pair_link, weights=bulk.rate[bulk.pair_flow],
                                   minlength=len(self.capacity))
            rates = [rate + float(per_link[link]) for rate, link in zip(rates, links,
                                                                         strict=True)]
        return rates

    def _arm(self) -> None:
        """Wake up when the first flow finishes, unless a wake-up is due by then: that one
        looks again when it fires (a timer fired early costs one event, and cancelling it
        would cost more)."""
        now = self.env.now
        first = self._first_wait(now)
        if first is not None and now + first < self._armed_at:
            # the flows due just after it are found when it fires, but a collective's
            # round is in one piece: chunks a byte apart finish together (one event)
            self._schedule(self._latest_wait(now, first) if self._bulk.n_flows
                           else max(first, 0.0))

    def _next_wait(self) -> float | None:
        """Seconds until the next flows are through, together: the latest of those due
        within ``precision_s`` of the first (None: no flow is running)."""
        now = self.env.now
        first = self._first_wait(now)
        if first is None:
            return None
        wait = self._latest_wait(now, first)
        return wait if self._buckets is None else max(wait, first)  # a bucket may be first

    def _first_wait(self, now: float) -> float | None:
        """Seconds until the first flow is through (None: no flow is running)."""
        bulk = self._bulk
        if bulk.n_flows:
            bulk.advance(now)
            first = min(bulk.first_wait(), self._single.first_finish() - now)
        else:
            first = self._single.first_finish() - now
        if self._buckets is not None:
            first = min(first, self._buckets.next_empty(now))
        # below 0 while a flow due already waits for others due within the precision window
        return None if first == math.inf else first

    def _latest_wait(self, now: float, first: float) -> float:
        """The latest wait (s) among flows through within ``precision_s`` of ``first``."""
        limit = first + self.precision_s
        latest = self._single.latest_finish(now + limit) - now
        if self._bulk.n_flows:
            latest = max(latest, self._bulk.latest_wait(limit))
        return max(latest, 0.0)

    def _schedule(self, wait: float) -> None:
        self._timer += 1
        self._armed_at = self.env.now + wait
        version = self._timer
        timer = self.env.timeout(wait)
        timer.callbacks.append(lambda _: self._on_timer(version))

    def _on_timer(self, version: int) -> None:
        if version != self._timer:
            return  # a sooner wake-up replaced this one
        self._armed_at = math.inf
        now = self.env.now
        if self._tokens_to_now():
            self._changed()  # new capacities: settle, then look again at what is due
            return
        wait = self._next_wait()  # flows that started since may have moved the finish
        if wait is None:
            return
        if now + wait > now:
            self._schedule(wait)
            return
        bulk = self._bulk
        if bulk.n_flows:
            done = bulk.done_rows(now)
            if done.any():
                if self.flow_log is not None:
                    rows = np.flatnonzero(done)
                    self.flow_log.keep(now, ((bulk.started[r], bulk.size[r], bulk.links_of(r),
                                              bulk.batch[r], bulk.index[r]) for r in rows),
                                       len(rows))
                self._deliver_arrays(bulk.batch[done], bulk.index[done], bulk.hops[done])
                bulk.remove(done)
        if self._single.n_flows:
            finished = self._single.take_done(now, self.precision_s)
            if finished:
                finished.sort(key=_started_order)
                if self.flow_log is not None:
                    self.flow_log.keep(now, ((f.started, f.size, f.route, *f.key[:2])
                                             for f in finished), len(finished))
                self._deliver_keys([flow.key for flow in finished])
        self._changed()

    # ---- delivery ----------------------------------------------------------------------

    def _deliver_keys(self, keys: list[tuple[int, int, int]]) -> None:
        """Deliver (batch, index, hops) messages after their last byte: hops * L + receive
        overhead; an event batch's event is scheduled for its last delivery directly."""
        fabric = self.fabric
        timed: dict[float, dict[int, list[int]]] = {}
        for batch, index, hops in keys:
            delay = arrival_s(fabric, hops)
            entry = self._batches[batch]
            if entry.event is None:
                timed.setdefault(delay, {}).setdefault(batch, []).append(index)
            else:
                self._count_down(batch, entry, delay)
        for delay in sorted(timed):
            timer = self.env.timeout(delay)
            timer.callbacks.append(lambda _, groups=timed[delay]: self._deliver_groups(groups))

    def _count_down(self, key: int, entry: _Batch, delay: float) -> None:
        """One message of an event batch is through; schedule the event after the last."""
        now = self.env.now
        entry.undelivered -= 1
        self.messages_delivered += 1  # counted as its delivery is scheduled
        if now + delay > entry.latest_s:
            entry.latest_s, latest_delay = now + delay, delay
        else:
            latest_delay = entry.latest_s - now
        if entry.undelivered:
            return
        del self._batches[key]
        event = entry.event
        event._ok, event._value = True, now + latest_delay
        self.env.schedule(event, NORMAL, latest_delay)

    def _deliver_groups(self, groups: dict[int, list[int]]) -> None:
        for key in sorted(groups):
            self._deliver(key, np.array(sorted(groups[key])))

    def _deliver_arrays(self, batch: np.ndarray, index: np.ndarray, hops: np.ndarray) -> None:
        """As :meth:`_deliver_keys`, grouped with numpy (a collective's round)."""
        if len(batch) <= SMALL_BATCH or any(self._batches[int(key)].event is not None
                                            for key, _ in _groups(batch)):
            self._deliver_keys(list(zip(batch.tolist(), index.tolist(), hops.tolist(),
                                        strict=True)))
            return
        delay = arrival_s(self.fabric, hops)
        for value, group in _groups(delay):
            timer = self.env.timeout(float(value))
            timer.callbacks.append(lambda _, b=batch[group], i=index[group]:
                                   self._deliver_batches(b, i))

    def _deliver_batches(self, batch: np.ndarray, index: np.ndarray) -> None:
        for key, group in _groups(batch):
            mine = index[group]
            # rows keep the order they were sent in: usually sorted already
            self._deliver(int(key), mine if (mine[1:] > mine[:-1]).all() else np.sort(mine))

    def _deliver(self, key: int, indices: np.ndarray) -> None:
        self.messages_delivered += len(indices)
        entry = self._batches[key]
        entry.undelivered -= len(indices)
        if entry.undelivered == 0:
            del self._batches[key]
        entry.on_delivered(indices)


def _started_order(flow: Flow) -> tuple[int, int, int]:
    """Flows in the order they were sent: by send, then by index in it."""
    return flow.key


def _as_list(values: Any, kind: type = int) -> list:
    """A few values as a list of Python numbers (as given when already one)."""
    if isinstance(values, list):
        return values if kind is int else [float(v) for v in values]
    return np.asarray(values, np.float64 if kind is float else None).tolist()


def _groups(keys: np.ndarray) -> list[tuple[Any, np.ndarray | slice]]:
    """(key, selector) for each distinct key, in key order; fast when all keys are equal."""
    if keys[0] == keys[-1] and (keys == keys[0]).all():
        return [(keys[0], slice(None))]
    return [(key, keys == key) for key in np.unique(keys)]
