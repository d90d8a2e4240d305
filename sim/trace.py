"""trace.json: Chrome trace events (open it in Perfetto) from what a run recorded.

Processes, shown in this order (``process_sort_index``):

- pid 0 ``workers``: a thread per worker with its slices, named and categorised by activity
  (:data:`sim.recorder.KINDS`); a slice with a label is named by it instead (a pipeline
  pass's compute: ``F3``, ``B3``, microbatch 3), and a worker's thread may be named by the
  run (a rank of a split replica: ``rank 5: replica 1, stage 0, shard 1``);
- pid 1 ``overlapped communication``: the workers' communication beside their compute
  (pipelined runs), in lanes where it overlaps;
- pid 3 ``servers``: a thread per parameter-server shard with its CPU work (``push``,
  ``pull``, ``apply`` slices) and a counter of the pushes queued at it (received, not yet
  processed); both empty on the ideal host, where a shard's work takes no time;
- pid 2 ``network links (flows)``: a thread per directed link (lanes where flows overlap)
  with the link flows that crossed it, named after their message; a utilisation counter per
  link (its flows' rates over its capacity, 0..1) and one of the flows in flight.

A slice that carried a message has arguments (``message``, ``bytes``, ``layer`` or
``layers``, ``version_read``, ``staleness``, ``flows``: the ids of its network sends, which
its link flows carry as ``flow``), and flow arrows (v1 flow events: ``s``, ``t``, ``f`` bound
to the enclosing slice) run from it along each of its flows' links, forward in time: from
where the message leaves the sender (:meth:`_Trace.arrows`).
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

NONE = -(2**63)  # a missing integer in the typed columns
WORKERS, OVERLAPPED, LINKS, SERVERS = 0, 1, 2, 3  # pids
PROCESSES = {WORKERS: "workers", OVERLAPPED: "overlapped communication", SERVERS: "servers",
             LINKS: "network links (flows)"}  # in display order

_FACT_COLUMNS = (("span", "q"), ("message", "h"), ("bytes", "d"), ("first_layer", "q"),
                 ("last_layer", "q"), ("version_read", "q"), ("staleness", "q"),
                 ("label", "h"))
_SEND_COLUMNS = (("span", "q"), ("send", "q"))
_HANDOFF_COLUMNS = (("sender", "q"), ("receiver", "q"))
_WORK_COLUMNS = (("shard", "q"), ("what", "h"), ("start", "d"), ("end", "d"),
                 ("worker", "q"), ("bytes", "d"), ("flow", "q"))
_QUEUE_COLUMNS = (("shard", "q"), ("time_s", "d"), ("length", "q"))


@dataclass(slots=True)
class Facts:
    """What a span carried, shown as its slice's arguments (each optional)."""

    message: str = ""  # "push", "pull", "collective"; "" for a span about one
    nbytes: float = math.nan  # bytes on the wire
    layers: tuple[int, int] | None = None  # first and last layer carried (forward indices)
    sends: list[int] = field(default_factory=list)  # its network sends (FlowNetwork.sent)
    version_read: int | None = None  # the parameters' version a pull read
    label: str = ""  # the slice's name instead of its activity's (a pipeline pass: "F3")


def _table(columns: tuple[tuple[str, str], ...]) -> dict[str, array]:
    return {name: array(code) for name, code in columns}


def _append(table: dict[str, array], *values: float) -> None:
    for column, value in zip(table.values(), values, strict=True):
        column.append(value)


def _rows(table: dict[str, array]) -> Iterable[tuple]:
    return zip(*table.values(), strict=True)


class TraceNotes:
    """What the trace shows beyond the workers' spans, as typed columns (no object per
    event): the facts of message spans, the shards' work and their push queues."""

    def __init__(self) -> None:
        self.servers = 0  # parameter-server shards (their tracks are named even when idle)
        self._names: dict[str, int] = {}  # message and work names, interned as small codes
        self._facts = _table(_FACT_COLUMNS)
        self._sends = _table(_SEND_COLUMNS)
        self._work = _table(_WORK_COLUMNS)
        self._queue = _table(_QUEUE_COLUMNS)
        self._handoffs = _table(_HANDOFF_COLUMNS)
        self._queued: dict[int, int] = {}  # shard -> pushes queued now
        self._busy_until: dict[int, float] = {}  # shard -> end of its latest work (s)
        self._last_push: dict[int, int] = {}  # worker -> the fact row of its latest push
        # (facts, overlapped): what the spans recorded now (of that kind) carry, if they
        # carry nothing of their own (Recorder.tagging)
        self.tag: tuple[Facts, bool] | None = None

    def _code(self, name: str) -> int:
        return self._names.setdefault(name, len(self._names))

    def note(self, worker: int, span: int, overlapped: bool, facts: Facts | None) -> None:
        """Span number ``span`` (of ``worker``, ``overlapped`` with its compute or not)
        carried ``facts`` (None: those of the :attr:`tag`, if it is of that kind)."""
        if facts is None:
            if self.tag is None or self.tag[1] != overlapped:
                return
            facts = self.tag[0]
        spans, messages, nbytes, first, last, versions, staleness, labels = \
            self._facts.values()
        row = len(spans)
        spans.append(span)
        messages.append(self._code(facts.message))
        nbytes.append(facts.nbytes)
        lo, hi = facts.layers or (NONE, NONE)
        first.append(lo)
        last.append(hi)
        versions.append(NONE if facts.version_read is None else facts.version_read)
        staleness.append(NONE)  # known once the servers apply it (:meth:`applied`)
        labels.append(self._code(facts.label))
        if facts.sends:
            sent_by, sends = self._sends.values()
            for send in facts.sends:
                sent_by.append(span)
                sends.append(send)
        if facts.message == "push":
            self._last_push[worker] = row

    def handoff(self, sender: int, receiver: int) -> None:
        """What span number ``sender`` produced went to another rank, whose span number
        ``receiver`` took it up (a pipeline stage's activations): an arrow between them."""
        _append(self._handoffs, sender, receiver)

    def handoff_pairs(self) -> list[tuple[int, int]]:
        """(sender span, receiver span) of every :meth:`handoff`, in order."""
        return list(_rows(self._handoffs))

    def applied(self, worker: int, version_read: int, staleness: int) -> None:
        """The servers applied ``worker``'s latest push: its slice shows the version it was
        computed on and its staleness."""
        row = self._last_push.pop(worker, None)
        if row is not None:
            self._facts["version_read"][row] = version_read
            self._facts["staleness"][row] = staleness

    def work(self, shard: int, what: str, start: float, end: float, worker: int | None = None,
             nbytes: float = math.nan, flow: int | None = None) -> None:
        """Shard ``shard`` spent [start, end) s of CPU on ``what`` (from ``worker``'s message
        of ``nbytes``, network send ``flow``). A shard works through its jobs one at a
        time: a start before the previous job's end is that end's rounding."""
        start = max(start, self._busy_until.get(shard, start))
        self._busy_until[shard] = end
        if end > start:
            _append(self._work, shard, self._code(what), start, end,
                    NONE if worker is None else worker, nbytes, NONE if flow is None else flow)

    def queue(self, shard: int, change: int, now: float) -> None:
        """A push joined (+1) or left (-1) ``shard``'s queue at ``now`` (s)."""
        length = self._queued.get(shard, 0) + change
        self._queued[shard] = length
        _append(self._queue, shard, now, length)

    # ---- for the trace ------------------------------------------------------------------

    def span_args(self) -> tuple[dict[int, dict[str, Any]], dict[int, list[int]],
                                 dict[int, str]]:
        """Slice arguments by span number, the network sends of each span, and the names
        of the spans named apart from their activity."""
        names = list(self._names)
        args: dict[int, dict[str, Any]] = {}
        named: dict[int, str] = {}
        for span, message, nbytes, lo, hi, version, staleness, label in _rows(self._facts):
            if names[label]:
                named[span] = names[label]
            found: dict[str, Any] = {}
            if names[message]:
                found["message"] = names[message]
            if not math.isnan(nbytes):
                found["bytes"] = _number(nbytes)
            if lo != NONE:
                found.update({"layer": lo} if lo == hi else {"layers": f"{lo}-{hi}"})
            if version != NONE:
                found["version_read"] = version
            if staleness != NONE:
                found["staleness"] = staleness
            args[span] = found
        sends: dict[int, list[int]] = {}
        for span, send in _rows(self._sends):
            sends.setdefault(span, []).append(send)
        for span, ids in sends.items():
            args.setdefault(span, {})["flows"] = ids
        return args, sends, named

    def work_items(self) -> list[_Item]:
        """The shards' work as slices (track: the shard), with what is known of it."""
        names = list(self._names)
        items = []
        for shard, what, start, end, worker, nbytes, flow in _rows(self._work):
            args: dict[str, Any] = {}
            if worker != NONE:
                args["worker"] = worker
            if not math.isnan(nbytes):
                args["bytes"] = _number(nbytes)
            if flow != NONE:
                args["flow"] = flow
            items.append(_Item(start, end, (shard,), names[what], "server", args))
        return items

    def queue_samples(self) -> list[tuple[int, float, int]]:
        """(shard, time s, pushes queued) from 0 at the start; the last value at a time."""
        last: dict[tuple[int, float], int] = {(s, 0.0): 0 for s in range(self.servers)}
        for shard, time_s, length in _rows(self._queue):
            last[shard, time_s] = length
        return [(shard, time_s, length) for (shard, time_s), length in last.items()]


EDGE_US = 1e-3  # how far a flow event keeps from the ends of its slice (1 ns)
HANDOFF_IDS = 1 << 40  # ids of the arrows between workers' slices, apart from link flows'


def _inside(ts: float, lo: float, hi: float) -> float:
    """``ts`` (us) moved into the slice [lo, hi] and at least :data:`EDGE_US` (or half the
    slice) from its ends."""
    edge = min(EDGE_US, (hi - lo) / 2)
    return min(max(ts, lo + edge), hi - edge)


def _forward(a: _Item, b: _Item) -> tuple[float, float] | None:
    """Where an arrow from slice ``a`` to slice ``b`` starts and ends (us): at ``a``'s end
    and ``b``'s start, each just inside its slice (a v1 flow event binds to the slice that
    holds its ts). A receiver takes a message up only after its sender made it, so ``b``
    starts no earlier than ``a`` ends: the simulator's clock says so exactly, and a real
    run's ranks log on one clock (``time.perf_counter``, :mod:`sim.real.executors.
    rank_clock`) and the receiver's pass begins after its receive returned. Should the times
    say otherwise all the same (a trace from some other clock), the start is clamped back to
    the end, within ``a``, then the end moved on to the start, within ``b``, so that no
    arrow points back in time; None if even that cannot hold (``b`` ended before ``a``
    began): no arrow then."""
    a_lo, a_hi, b_lo, b_hi = a.start * 1e6, a.end * 1e6, b.start * 1e6, b.end * 1e6
    end = _inside(b_lo, b_lo, b_hi)
    start = _inside(min(a_hi, end), a_lo, a_hi)
    if start > end:
        end = _inside(start, b_lo, b_hi)
    return (start, end) if start <= end else None


def _number(x: float) -> float | int:
    """An integral float as an int (4096, not 4096.0)."""
    return int(x) if float(x).is_integer() else float(x)


class _Item(NamedTuple):
    """A slice to place in lanes: [start, end) s on each of ``tracks``."""

    start: float
    end: float
    tracks: tuple[int, ...]
    name: str
    cat: str
    args: dict[str, Any]
    key: int = -1  # what it stands for: a span number, a logged flow's index


class _Lanes:
    """The lanes of one track: a heap of (end, lane) of the busy ones and one of the free
    lane numbers, so that an item takes the lowest lane free at its start in O(log lanes)
    (a thousand flows at once on a server's link)."""

    __slots__ = ("busy", "free", "count")

    def __init__(self) -> None:
        self.busy: list[tuple[float, int]] = []
        self.free: list[int] = []
        self.count = 0

    def take(self, start: float, end: float) -> int:
        """The lane of an item from ``start`` to ``end`` (items come in order of start)."""
        busy, free = self.busy, self.free
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane, self.count = self.count, self.count + 1
        heapq.heappush(busy, (end, lane))
        return lane


def _place(items: list[_Item], tracks: Iterable[int] = ()
           ) -> tuple[dict[tuple[int, int], int], list[tuple[int, _Item]]]:
    """Threads for ``items``: a track gets as many lanes as it had items at once, an item
    taking the first lane free at its start, so no two slices of one thread overlap.
    Returns the thread of each (track, lane), numbered in that order (``tracks`` get one
    even without items), and (thread, item) for each item on each of its tracks."""
    lanes: dict[int, _Lanes] = {track: _Lanes() for track in tracks}
    placed = []
    for item in sorted(items, key=lambda item: item.start):
        for track in item.tracks:
            found = lanes.get(track)
            if found is None:
                found = lanes[track] = _Lanes()
            placed.append((track, found.take(item.start, item.end), item))
    keys = sorted((track, lane) for track, found in lanes.items()
                  for lane in range(max(found.count, 1)))
    tid = {key: n for n, key in enumerate(keys)}
    return tid, [(tid[track, lane], item) for track, lane, item in placed]


def _slice(pid: int, tid: int, item: _Item) -> dict[str, Any]:
    event = {"ph": "X", "name": item.name, "cat": item.cat, "pid": pid, "tid": tid,
             "ts": item.start * 1e6, "dur": (item.end - item.start) * 1e6}
    if item.args:
        event["args"] = item.args
    return event


def _threads(pid: int, tid: dict[tuple[int, int], int],
             name: Callable[[int], str]) -> dict[tuple[int, int], str]:
    return {(pid, n): name(track) + (f" ({lane + 1})" if lane else "")
            for (track, lane), n in tid.items()}


class _Trace:
    """The events of one trace, with the threads they use (named when finished)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.threads: dict[tuple[int, int], str] = {}
        self.pids: set[int] = set()
        # send -> (pid, tid, start us, end us) of the slice of the span that sent it
        self.anchors: dict[int, tuple[int, int, float, float]] = {}

    def slices(self, pid: int, placed: list[tuple[int, _Item]],
               sends: dict[int, list[int]]) -> None:
        """Slices on ``pid``; those of spans with network sends anchor their arrows."""
        if placed:
            self.pids.add(pid)
        for tid, item in placed:
            self.events.append(_slice(pid, tid, item))
            for send in sends.get(item.key, ()):
                self.anchors.setdefault(send, (pid, tid, item.start * 1e6, item.end * 1e6))

    def counters(self, pid: int, series: str,
                 samples: Iterable[tuple[str, float, float]]) -> None:
        """Counter events of ``samples`` (track name, time s, value), the value named
        ``series`` (Perfetto names the track "name series")."""
        before = len(self.events)
        self.events += [{"ph": "C", "name": name, "pid": pid, "ts": time_s * 1e6,
                         "args": {series: value}} for name, time_s, value in samples]
        if len(self.events) > before:
            self.pids.add(pid)

    def arrows(self, flow: int, send: int, start: float, end: float, hops: list[int]) -> None:
        """A flow's arrow chain: from its send's slice, where the message leaves the sender
        (the flow's ``start`` s, inside that slice), through its link slices (``hops``:
        their tids in route order, each from ``start`` to ``end`` s) in time order.

        A v1 flow event binds to the slice that holds its ts on its thread, and a viewer
        reads the events in time order, so the ``s`` comes first and every event lies inside
        its own slice, away from its ends (where a neighbouring slice on the same thread may
        start or end): the steps at equal fractions of the flow, after the ``s``."""
        anchor = self.anchors.get(send)
        if anchor is None or not hops:
            return
        pid, tid, lo, hi = anchor
        start, end = start * 1e6, end * 1e6
        ts = _inside(start, lo, hi)
        first = max(ts, start)
        # (a sender's slice that began after its flow ended would leave the steps outside
        # their slices: in time order all the same)
        steps = [_inside(first + (end - first) * (n + 1) / (len(hops) + 1), first, end)
                 if first <= end else first for n in range(len(hops))]
        events = self.events
        events.append({"ph": "s", "id": flow, "cat": "message", "name": "message", "pid": pid,
                       "tid": tid, "ts": ts})
        for link_tid, link_ts in zip(hops[:-1], steps, strict=False):
            events.append({"ph": "t", "id": flow, "cat": "message", "name": "message",
                           "pid": LINKS, "tid": link_tid, "ts": link_ts})
        events.append({"ph": "f", "bp": "e", "id": flow, "cat": "message", "name": "message",
                       "pid": LINKS, "tid": hops[-1], "ts": steps[-1]})

    def handoffs(self, pairs: list[tuple[int, int]], own: dict[int, _Item]) -> None:
        """An arrow from each sender's slice, where it ends (its output leaves), to the
        receiver's slice, where it starts (it takes the output up): both on the workers'
        own tracks, and forward in time (:func:`_forward`)."""
        for n, (sender, receiver) in enumerate(pairs):
            a, b = own.get(sender), own.get(receiver)
            if a is None or b is None:
                continue
            ends = _forward(a, b)
            if ends is None:
                continue
            flow = HANDOFF_IDS + n
            for ph, item, ts in (("s", a, ends[0]), ("f", b, ends[1])):
                event = {"ph": ph, "id": flow, "cat": "handoff", "name": "handoff",
                         "pid": WORKERS, "tid": item.tracks[0], "ts": ts}
                if ph == "f":
                    event["bp"] = "e"
                self.events.append(event)

    def metadata(self) -> list[dict[str, Any]]:
        """Names and display order of every process and thread used."""
        order = list(PROCESSES)
        events = []
        for pid in sorted(self.pids, key=order.index):
            events += [{"ph": "M", "name": "process_name", "pid": pid,
                        "args": {"name": PROCESSES[pid]}},
                       {"ph": "M", "name": "process_sort_index", "pid": pid,
                        "args": {"sort_index": order.index(pid)}}]
        for (pid, tid), name in sorted(self.threads.items()):
            events += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                        "args": {"name": name}},
                       {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                        "args": {"sort_index": tid}}]
        return events


def worker_track(worker: int) -> str:
    """A worker's thread name, unless the run names it."""
    return f"worker {worker}"


def chrome_trace(slices: list[tuple[int, str, float, float, bool]], workers: int,
                 notes: TraceNotes, flows: Any = None,
                 link_name: Callable[[int], str] = str,
                 worker_name: Callable[[int], str] = worker_track) -> dict[str, Any]:
    """The trace of a run (times in microseconds): ``slices`` (worker, kind, start s, end s,
    overlapped) of ``workers`` workers (their threads named by ``worker_name``) with their
    ``notes``, and the link flows of ``flows`` (a :class:`~sim.network.linklog.FlowLog`;
    what it left out is marked by ``otherData.link_flows`` and a global instant event)."""
    trace = _Trace()
    args, sends, named = notes.span_args()
    own: list[_Item] = []  # on the worker's own track
    lapped: list[_Item] = []  # beside its compute
    for i, (w, kind, start, end, overlapped) in enumerate(slices):
        (lapped if overlapped else own).append(_Item(start, end, (w,), named.get(i, kind), kind,
                                                     args.get(i, {}), i))
    trace.slices(WORKERS, [(item.tracks[0], item) for item in own], sends)
    trace.handoffs(notes.handoff_pairs(), {item.key: item for item in own})
    trace.threads.update({(WORKERS, w): worker_name(w) for w in range(workers)})
    tid, placed = _place(lapped)
    trace.slices(OVERLAPPED, placed, sends)
    trace.threads.update(_threads(OVERLAPPED, tid, worker_name))
    if notes.servers:
        tid, placed = _place(notes.work_items(), range(notes.servers))
        trace.slices(SERVERS, placed, {})
        trace.threads.update(_threads(SERVERS, tid, lambda s: f"server {s}"))
        trace.counters(SERVERS, "pushes queued", ((f"server {shard}", time_s, length)
                                                  for shard, time_s, length
                                                  in notes.queue_samples()))
    result: dict[str, Any] = {"displayTimeUnit": "ms"}
    if flows is not None:
        _links(trace, flows, link_name, {send: args.get(span, {}).get("message", "flow")
                                         for span, ids in sends.items() for send in ids})
        result["otherData"] = {"link_flows": link_flows_note(flows)}
    result["traceEvents"] = trace.metadata() + trace.events
    return result


def _links(trace: _Trace, flows: Any, link_name: Callable[[int], str],
           messages: dict[int, str]) -> None:
    """The link tracks: the kept flows (named after their message), arrows from the spans
    that sent them, the utilisation and flows-in-flight counters, and where it was cut."""
    kept = [_Item(start, end, links, messages.get(send, "flow"), "flow",
                  {"bytes": _number(nbytes), "flow": send, "part": part}, i)
            for i, (start, end, nbytes, links, send, part) in enumerate(flows.flows)]
    tid, placed = _place(kept)
    trace.slices(LINKS, placed, {})
    trace.threads.update(_threads(LINKS, tid, link_name))
    hops: dict[int, list[int]] = {}  # a flow's link threads in route order
    for n, item in placed:
        hops.setdefault(item.key, []).append(n)
    for item in kept:
        trace.arrows(item.key, item.args["flow"], item.start, item.end, hops[item.key])
    names = {link: link_name(link) for link in set(flows.link_samples["link"])}
    trace.counters(LINKS, "utilisation", ((names[link], time_s, value) for time_s, link, value
                                          in _rows(flows.link_samples)))
    trace.counters(LINKS, "flows in flight", (("network", time_s, count) for time_s, count
                                              in _rows(flows.in_flight)))
    if flows.samples_cut_s is not None:
        trace.pids.add(LINKS)
        trace.events.append({"ph": "i", "s": "g", "pid": LINKS,
                             "ts": flows.samples_cut_s * 1e6,
                             "name": f"trace cut: the link counters stop here after "
                                     f"{flows.sample_limit} samples (run.trace_samples)"})
    if flows.left_out:
        trace.pids.add(LINKS)
        trace.events.append({"ph": "i", "s": "g", "pid": LINKS,
                             "ts": flows.first_left_out_s * 1e6,
                             "name": f"trace cut: {flows.left_out} of {flows.finished} link "
                                     "flows left out from here (run.trace_flows, "
                                     "run.trace_window_s)"})


def link_flows_note(flows: Any) -> dict[str, Any]:
    """What the trace's link tracks hold: flows finished, kept, left out, and the limits."""
    window = [float(w) for w in flows.window_s]
    return {"finished": flows.finished, "kept": len(flows.flows), "left_out": flows.left_out,
            "limit": flows.limit, "window_s": [window[0], window[1] if math.isfinite(window[1])
                                               else None],
            "samples": flows.samples, "sample_limit": flows.sample_limit,
            "samples_cut_s": flows.samples_cut_s}
