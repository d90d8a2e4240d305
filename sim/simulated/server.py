"""Parameter servers: the parameters split by key range over S shards on their own hosts,
or (:meth:`ParameterServer.deal_layers`) whole layers dealt over the shards.

Messages: a pull is a small request to every shard followed by each shard's part of the
parameters; a push sends each shard its part of the (possibly compressed) gradient.
Bytes are split over shards in proportion to their key ranges. The server applies an
update when the last shard has received its part.

Given the recorder's :class:`~sim.trace.TraceNotes`, the shards' CPU work and the pushes
queued at each (received, not yet processed) go on the trace; a pull given a ``sends`` list
appends the ids of the network sends it made (:attr:`FlowNetwork.sent
<sim.network.flow.FlowNetwork.sent>`: the flows' ids on the trace).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import Any, NamedTuple

import numpy as np
import simpy

from sim.network.message_cost import REQUEST_BYTES
from sim.trace import TraceNotes
from sim.training.store import ParameterStore

_SPLITS_KEPT = 1024  # message splits remembered per server


class _Split(NamedTuple):
    """A message over the shards: bytes per shard, and the owning shards' hosts and bytes."""

    parts: np.ndarray
    hosts: list[int]
    owned: list[float]


def round_robin(sizes: np.ndarray, shards: int) -> np.ndarray:
    """Layer i on shard i mod ``shards`` (TensorFlow's ``replica_device_setter`` default)."""
    return np.arange(len(sizes)) % shards


def least_loaded(sizes: np.ndarray, shards: int) -> np.ndarray:
    """Each layer in turn on the shard holding the fewest bytes so far, the first such on a
    tie (tf_cnn_benchmarks' ``ParamServerDeviceSetter``)."""
    loads, owner = np.zeros(shards), np.empty(len(sizes), dtype=np.intp)
    for i, size in enumerate(sizes):
        owner[i] = int(np.argmin(loads))
        loads[owner[i]] += size
    return owner


# how whole layers are dealt over the shards (cluster.shard_by, other than "keys")
DEALS = {"round-robin": round_robin, "least-loaded": least_loaded}


class ParameterServer:
    """The servers' hosts on the network around a :class:`~sim.training.store.ParameterStore`
    (the parameters of record and the strategy's rules)."""

    def __init__(self, network: Any, hosts: np.ndarray, store: ParameterStore,
                 cores: Any = None, first_rank: int = 0,
                 notes: TraceNotes | None = None) -> None:
        self.network, self.hosts, self.store = network, np.asarray(hosts), store
        # shard s is rank first_rank + s on ``cores`` (sim.simulated.hosts.Hosts); without
        # them (a network-only copy) shards cost no CPU
        self.cores, self.first_rank = cores, first_rank
        self.notes = notes  # for the trace (None: not traced)
        if notes is not None:
            notes.servers = len(self.hosts)
        sizes = np.array([len(part) for part in np.array_split(store.params, len(self.hosts))])
        # of any message, per shard (equal key ranges when there are no numbers to hold)
        self.share = sizes / sizes.sum() if sizes.sum() else np.full(len(self.hosts),
                                                                      1 / len(self.hosts))
        edges = np.concatenate([[0.0], np.cumsum(self.share)])
        # the keys (fractions of the vector) each shard owns: segment i, [lo_i, hi_i), is
        # shard owner_i's (one segment a shard: equal key ranges)
        self.segments = (edges[:-1], edges[1:], np.arange(len(self.hosts)))
        self._splits: dict[tuple[float, float, float], _Split] = {}
        # a shard that is down (restarting, or writing a blocking checkpoint) serves
        # nothing until its event fires: messages to or from it, and work for it, wait
        self.back_up: dict[int, simpy.Event] = {}
        self._up_at: dict[int, float] = {}  # when each of those is back (s)
        self._shard_of_host = {int(h): s for s, h in enumerate(self.hosts)}

    def deal_layers(self, layer_bytes: np.ndarray, how: str) -> None:
        """Whole layers dealt over the shards (:data:`DEALS`, by ``how``), each layer's keys
        on one shard; replaces the equal key ranges (a shard's share is then its layers')."""
        sizes = np.asarray(layer_bytes, dtype=float)
        edges = np.concatenate([[0.0], np.cumsum(sizes)]) / sizes.sum()
        owner = DEALS[how](sizes, len(self.hosts))
        self.share = np.bincount(owner, weights=sizes, minlength=len(self.hosts)) / sizes.sum()
        self.segments, self._splits = (edges[:-1], edges[1:], owner), {}

    def follow(self, other: ParameterServer) -> None:
        """Split the keys over the shards as ``other`` does (a network-only copy of it)."""
        self.share, self.segments, self._splits = other.share, other.segments, {}

    def shard_keys(self, shard: int) -> slice | np.ndarray:
        """Indices into the parameter vector that ``shard`` owns (a slice for one range)."""
        size = self.store.params.size
        lo, hi, owner = self.segments
        pieces = [slice(int(np.rint(a * size)), int(np.rint(b * size)))
                  for a, b in zip(lo[owner == shard], hi[owner == shard], strict=True)]
        if len(pieces) == 1:
            return pieces[0]
        return np.concatenate([np.arange(p.start, p.stop) for p in pieces]).astype(np.intp)

    def take_down(self, shard: int, seconds: float) -> simpy.Event:
        """Shard ``shard`` serves nothing for ``seconds`` from now (or until it was to be
        back, if later); returns the event of its return."""
        env = self.network.env
        until = max(env.now + seconds, self._up_at.get(shard, env.now))
        back = env.timeout(until - env.now)
        self.back_up[shard], self._up_at[shard] = back, until
        back.callbacks.append(lambda _: self._back(shard, back))
        return back

    def _back(self, shard: int, event: simpy.Event) -> None:
        if self.back_up.get(shard) is event:
            del self.back_up[shard], self._up_at[shard]

    def _awaited(self, shards: Any) -> list[simpy.Event]:
        """The returns of those of ``shards`` that are down."""
        return [self.back_up[s] for s in shards if s in self.back_up]

    def range_bytes(self, start: float, stop: float, nbytes: float) -> np.ndarray:
        """Bytes per shard of a message carrying the keys [start, stop) (fractions of the
        whole vector, 0..1) in ``nbytes``: each shard gets the part of its key range.
        (Read-only: calls with the same arguments share it.)"""
        return self._split(start, stop, nbytes).parts

    def _split(self, start: float, stop: float, nbytes: float) -> _Split:
        """How a message splits over the shards, remembered: a run sends the same few
        messages again and again, and numpy's per-call cost would dominate each."""
        key = (start, stop, nbytes)
        split = self._splits.get(key)
        if split is None:
            lo, hi, owner = self.segments
            overlap = np.bincount(owner, np.clip(np.minimum(stop, hi) - np.maximum(start, lo),
                                                 0.0, None), len(self.hosts))
            parts = nbytes * overlap / (stop - start)
            parts.flags.writeable = False
            owners = parts > 0
            split = _Split(parts, self.hosts[owners].tolist(), parts[owners].tolist())
            if len(self._splits) < _SPLITS_KEPT:  # sparse batches vary: keep the first ones
                self._splits[key] = split
        return split

    def push_range(self, host: int, start: float, stop: float, nbytes: float,
                   sends: list[int] | None = None) -> simpy.Event:
        """Part of a gradient (keys [start, stop), as fractions) to the shards that own it."""
        split = self._split(start, stop, nbytes)
        return self._send([host] * len(split.hosts), split.hosts, split.owned, sends)

    def send_range(self, host: int, start: float, stop: float, nbytes: float,
                   sends: list[int] | None = None) -> simpy.Event:
        """The shards that own keys [start, stop) send their part of them to ``host``."""
        split = self._split(start, stop, nbytes)
        return self._send(split.hosts, [host] * len(split.hosts), split.owned, sends)

    def push_parts(self, host: int, parts: np.ndarray,
                   sends: list[int] | None = None) -> simpy.Event:
        """``parts[s]`` bytes from ``host`` to each shard s (none where 0): a message whose
        split follows the rows it carries, not key ranges (embedding tables)."""
        owners = np.flatnonzero(parts > 0)
        return self._send([host] * len(owners), self.hosts[owners].tolist(),
                          parts[owners].tolist(), sends)

    def send_parts(self, host: int, parts: np.ndarray,
                   sends: list[int] | None = None) -> simpy.Event:
        """Each shard s sends ``parts[s]`` bytes to ``host`` (none where 0)."""
        owners = np.flatnonzero(parts > 0)
        return self._send(self.hosts[owners].tolist(), [host] * len(owners),
                          parts[owners].tolist(), sends)

    def answer(self, host: int, owners: np.ndarray,
               sends: list[int] | None = None) -> simpy.Event:
        """The shards where ``owners`` is true answer a call from ``host`` with an empty
        response (an RPC's: alpha on the wire, no bytes)."""
        shards = np.flatnonzero(owners)
        return self._send(self.hosts[shards].tolist(), [host] * len(shards),
                          [0.0] * len(shards), sends)

    def _send(self, src: list[int], dst: list[int], nbytes: list[float],
              sends: list[int] | None) -> simpy.Event:
        """Messages src[i] -> dst[i] of nbytes[i] (one alone by the network's cheaper
        path); the ids of the network's sends go to ``sends``."""
        if self.back_up:
            down = self._awaited(self._shard_of_host.get(h) for h in (*src, *dst))
            if down:  # the client retries until the shard is back
                env = self.network.env
                return env.process(self._send_later(down, src, dst, nbytes, sends))
        first = self.network.sent
        if len(src) == 1:
            done = self.network.send(src[0], dst[0], nbytes[0])
        else:
            done = self.network.send_all(src, dst, nbytes)
        if sends is not None:
            sends.extend(range(first, self.network.sent))
        return done

    def _send_later(self, down: list[simpy.Event], src: list[int], dst: list[int],
                    nbytes: list[float],
                    sends: list[int] | None) -> Generator[simpy.Event, Any, None]:
        yield simpy.AllOf(self.network.env, down)
        yield self._send(src, dst, nbytes, sends)

    def process(self, owners: np.ndarray, seconds: np.ndarray,
                sender: int | None = None, parts: np.ndarray | None = None,
                what: str | None = None, sends: list[int] | None = None,
                ) -> simpy.Event | None:
        """Each owning shard spends its ``seconds`` of CPU on its thread (after the work
        already queued there); the event fires when all have. None: no CPU work at all (no
        cores, or the ideal host), so there is nothing to wait for. ``sender`` (a rank) and
        ``parts`` (bytes each owner received): a push from that worker, whose parts a shard
        first finishes receiving beyond the eager limit
        (:meth:`sim.simulated.hosts.Hosts.handshake_s`). ``what``: the work's name on the
        trace ("push" when there is a sender, else "work"); ``sends``: the network sends of
        the push."""
        if self.cores is None or not np.any(seconds > 0):
            return None
        env = self.network.env
        shards = np.flatnonzero(owners)
        ranks = [self.first_rank + int(s) for s in shards]
        handshakes = ([0.0] * len(ranks) if sender is None else
                      [self.cores.handshake_s(sender, r, float(p))
                       for r, p in zip(ranks, parts, strict=True)])
        jobs = [self.cores.run(r, float(t), woken=True, handshake_s=h)
                for r, t, h in zip(ranks, seconds, handshakes, strict=True)]
        if self.back_up:
            jobs = [self._when_up(int(s), job) for s, job in zip(shards, jobs, strict=True)]
        if self.notes is not None:
            name = what or ("work" if sender is None else "push")
            flow = sends[0] if sends else None
            sizes = [math.nan] * len(jobs) if parts is None else [float(p) for p in parts]
            jobs = [self._traced(int(s), job, name, sender, size, flow)
                    for s, job, size in zip(shards, jobs, sizes, strict=True)]
        return simpy.AllOf(env, [env.process(job) for job in jobs])

    def _when_up(self, shard: int, job: Generator[simpy.Event, Any, float]
                 ) -> Generator[simpy.Event, Any, float]:
        while shard in self.back_up:
            yield self.back_up[shard]
        return (yield from job)

    def _traced(self, shard: int, job: Generator[simpy.Event, Any, float], what: str,
                sender: int | None, nbytes: float,
                flow: int | None) -> Generator[simpy.Event, Any, None]:
        """``job`` on the trace: a slice of the CPU it took on the shard (its seconds and
        the reload after a gap, :meth:`sim.simulated.hosts.Hosts.run`), ending when the job
        does; a push is queued at the shard from now until then."""
        notes, env = self.notes, self.network.env
        queued = sender is not None
        if queued:
            notes.queue(shard, +1, env.now)
        took = yield from job
        notes.work(shard, what, env.now - took, env.now, sender, nbytes, flow)
        if queued:
            notes.queue(shard, -1, env.now)

    def push(self, host: int, nbytes: float,
             keys: tuple[float, float] = (0.0, 1.0)) -> simpy.Event:
        """A gradient of ``nbytes`` for ``keys`` (fractions of the vector) from ``host``;
        fires when every shard has its part."""
        return self.push_range(host, *keys, nbytes)

    def pull(self, host: int, out: np.ndarray, rows: np.ndarray | None = None,
             serve_s: np.ndarray | None = None,
             wait: Callable[[simpy.Event], Generator[simpy.Event, Any, Any]] | None = None,
             *, sends: list[int] | None = None) -> Generator[simpy.Event, Any, int]:
        """Copy the parameters (or only ``rows``) into ``out``; returns the version read.

        The copy is taken when the shards have served the request (``serve_s``: CPU seconds
        of each owning shard, after the work queued on it); the data arrives later, and the
        puller notices it through ``wait`` (default: at once).
        """
        id_bytes = 0 if rows is None else rows.size * rows.itemsize
        yield self.push_range(host, 0.0, 1.0, REQUEST_BYTES * len(self.hosts) + id_bytes,
                              sends)
        served = None if serve_s is None else self.process(self.share > 0, serve_s,
                                                           what="pull")
        if served is not None:
            yield served
        version = self.store.read(out, rows)
        params = self.store.params
        nbytes = params.nbytes if rows is None else rows.size * params.itemsize
        reply = self.send_range(host, 0.0, 1.0, nbytes, sends)
        if wait is None:
            yield reply
        else:
            yield from wait(reply)
        return version
