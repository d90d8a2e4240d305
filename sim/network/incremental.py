"""Incremental max-min: fair rates kept up to date one flow start or end at a time.

Only flows that share a link with a changed flow, transitively (its connected component),
can change rate, so a start or an end recomputes that component alone: SimGrid's selective
update of its max-min system (Casanova et al. 2014). Plain Python throughout: components
are small, and numpy's per-call cost would dominate them. Two shortcuts make the common
cases cost O(route length), whatever the number of flows:

* a flow alone on its links runs at its slowest link's capacity;
* a *hub* component, every flow of which crosses one link that is their common bottleneck
  (a parameter server's NIC under incast), stays one while each start or end leaves the
  hub's fair share C / n the smallest share of the component's links; a heap of the other
  links' shares checks that. (A flow alone has its slowest link as hub; the first flow to
  join through another link it shares may move the hub there.)

Flows that froze in the same round of progressive filling share one rate, and form a
group whose progress is one number, the bytes each member has been sent since the group
formed (processor sharing's virtual time): a rate change costs O(1) whatever the group's
size, and members finish in the order of their marks (the value of that number at which
each is through). The rates are exactly those :func:`sim.network.maxmin.max_min_rates`
computes for each component alone (the same arithmetic, in the same order).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Iterable, Sequence
from itertools import count
from typing import Any

from sim.network.maxmin import TIE, fill

# A flow is finished when this fraction of its bytes is left: it absorbs the rounding of
# rate * time so that flows ending together finish in the same event.
DONE = 1e-12
# Marks are rebased once a group's virtual time passes this many times the size of a flow
# that joins it, so that a long-lived group keeps that flow's bytes to ~1e-13 relative
# precision (a rebase costs O(members) and resets the virtual time to 0).
_REBASE_SIZES = 1e3


class Flow:
    """One active flow: ``key`` is the caller's, ``route`` its directed links."""

    __slots__ = ("key", "route", "size", "started", "group", "mark", "comp", "bound")

    def __init__(self, key: Any, route: tuple[int, ...], size: float, started: float,
                 bound: float = math.inf) -> None:
        self.key, self.route, self.size, self.started = key, route, size, started
        self.bound = bound  # the most it may send (bytes/s): a transport's window / RTT
        self.group: _Group | None = None  # None until its component is solved
        self.mark = 0.0  # the group's virtual time at which it is through
        self.comp: _Component | None = None


class _Group:
    """Flows sharing one rate (bytes/s); ``served`` bytes each at time ``since`` (s)."""

    __slots__ = ("rate", "served", "since", "queue", "version")

    def __init__(self, rate: float, now: float) -> None:
        self.rate, self.served, self.since = rate, 0.0, now
        # (-mark, -tiebreak, flow), sorted: the next member through is the last one, and
        # the finish times fall along the list (a suffix is through by any given time)
        self.queue: list[tuple[float, int, Flow]] = []
        self.version = 0  # bumped whenever its first finish may have moved

    def served_at(self, now: float) -> float:
        return self.served + self.rate * (now - self.since)

    def set_rate(self, rate: float, now: float) -> None:
        self.served, self.since, self.rate = self.served_at(now), now, rate

    def finish_of(self, mark: float) -> float:
        """When a member with this mark is through (absolute s)."""
        return self.since + (mark - self.served) / self.rate

    def left(self, flow: Flow, now: float) -> float:
        """Bytes ``flow`` has still to send at ``now``."""
        return flow.mark - self.served_at(now)

    def first_finish(self) -> float:
        return self.finish_of(-self.queue[-1][0])

    def latest_finish(self, limit: float) -> float:
        """The latest finish (s) of the members through by ``limit``; -inf if none is."""
        queue = self.queue
        if not queue:
            return -math.inf
        if len(queue) < 2 or self.finish_of(-queue[-2][0]) > limit:  # the usual case
            first = self.finish_of(-queue[-1][0])
            return first if first <= limit else -math.inf
        i = bisect.bisect_left(queue, -limit, key=lambda entry: -self.finish_of(-entry[0]))
        return self.finish_of(-queue[i][0])


class _Component:
    """Flows connected through shared links, and those links. ``hub``: a link every flow
    crosses and bottlenecks on, with ``shares`` a heap of (C / n, link) of the others."""

    __slots__ = ("flows", "links", "hub", "group", "shares", "dirty")

    def __init__(self) -> None:
        # dicts as ordered sets: the order flows are solved and finish in must not depend
        # on where objects live in memory, or runs would not repeat
        self.flows: dict[Flow, None] = {}
        self.links: dict[int, None] = {}
        self.hub: int | None = None
        self.group: _Group | None = None  # the hub's group
        self.shares: list[tuple[float, int]] = []
        self.dirty = False  # its rates wait for the settling pass


class IncrementalMaxMin:
    """Active flows on links of the given capacities (bytes/s), with max-min fair rates.

    :meth:`add` starts a flow and :meth:`take_done` ends the flows that are through; each
    change applies at once where a shortcut holds, else marks the component for
    :meth:`settle` (at the end of the instant, so that many changes cost one solve).
    :meth:`first_finish` and :meth:`latest_finish` tell the clock when to wake up. Times are
    absolute simulated seconds; :meth:`extract` hands whole components over to another
    engine (:mod:`sim.network.bulk`).
    """

    def __init__(self, capacity: Sequence[float]) -> None:
        self.capacity = [float(c) for c in capacity]
        n = len(self.capacity)
        self.count = [0] * n  # flows on each link
        self.members: list[dict[Flow, None] | None] = [None] * n  # flows on each busy link
        self.comp_of: list[_Component | None] = [None] * n
        self.n_flows = 0
        self._dirty: list[_Component] = []
        self._due: list[tuple[float, int, _Group, int]] = []  # (first finish, tiebreak, ...)
        self._tiebreak = count()
        # links whose rate may have changed since take_changed(), while someone asks: a
        # hub's rate change touches every link of the component, O(flows) per event
        self._changed: set[int] | None = None

    def follow_changes(self, on: bool) -> None:
        """Start (or stop) noting the links whose rates change, for :meth:`take_changed`."""
        self._changed = set() if on else None

    def take_changed(self) -> set[int]:
        """The links whose rates may have changed since the last call (once settled); empty
        unless :meth:`follow_changes` is on."""
        changed = self._changed
        if changed is None:
            return set()
        self._changed = set()
        return changed

    def _note_changed(self, links: Iterable[int]) -> None:
        """The rates on ``links`` may have changed (noted while someone follows them)."""
        if self._changed is not None:
            self._changed.update(links)

    @property
    def pending(self) -> bool:
        """Whether some component waits for :meth:`settle`."""
        return bool(self._dirty)

    def set_capacity(self, link: int, capacity: float) -> None:
        """Give ``link`` a new capacity (bytes/s); the flows on it get their rates at the
        next :meth:`settle` (a token bucket's link: :mod:`sim.network.token_bucket`)."""
        self.capacity[link] = float(capacity)
        comp = self.comp_of[link]
        if comp is not None:
            self._mark_dirty(comp)

    def busy(self, links: Iterable[int]) -> bool:
        """Whether any of ``links`` carries a flow here."""
        count_ = self.count
        return any(count_[link] for link in links)

    # ---- changes -----------------------------------------------------------------------

    def add(self, flow: Flow, now: float) -> None:
        """Start ``flow`` now (its route must be non-empty)."""
        route, comp_of = flow.route, self.comp_of
        touched = []
        for link in route:
            comp = comp_of[link]
            if comp is not None and comp not in touched:
                touched.append(comp)
        self._attach(flow)
        bounded = flow.bound < math.inf  # the shortcuts assume links alone set rates
        if not touched and not bounded:
            self._start_alone(flow, now)
            return
        merged = len(touched) > 1
        comp = _Component() if not touched else (self._merge(touched) if merged
                                                 else touched[0])
        comp.flows[flow] = None
        flow.comp = comp
        for link in route:
            if comp_of[link] is None:
                comp_of[link] = comp
                comp.links[link] = None
        if merged or bounded or comp.dirty or not self._join_hub(comp, flow, now):
            self._mark_dirty(comp)

    def _remove(self, flow: Flow, now: float) -> None:
        """End ``flow`` now (taken out of its group's queue already)."""
        comp = flow.comp
        self._detach(flow)
        del comp.flows[flow]
        self._note_changed(flow.route)
        for link in flow.route:
            if not self.count[link]:
                self.comp_of[link] = None
                del comp.links[link]
        flow.comp = None
        if comp.dirty:
            return
        if comp.hub is not None and self._leave_hub(comp, flow, now):
            return
        self._mark_dirty(comp)

    def settle(self, now: float) -> None:
        """Recompute the rates of every component marked since the last settling."""
        dirty, self._dirty = self._dirty, []
        for comp in dirty:
            for part in self._split(comp):
                self._solve(part, now)

    # ---- the clock ---------------------------------------------------------------------

    def first_finish(self) -> float:
        """When the next flow is through (s; inf if none is running)."""
        due = self._due
        while due:
            _, _, group, version = due[0]
            if group.version == version:
                return due[0][0]
            heapq.heappop(due)
        return math.inf

    def latest_finish(self, limit: float) -> float:
        """The latest finish (s) of the flows through by ``limit``; -inf if none is."""
        latest = -math.inf
        for group in self._groups_due_by(limit):
            finish = group.latest_finish(limit)
            if finish > latest:
                latest = finish
        return latest

    def take_done(self, now: float, window: float) -> list[Flow]:
        """Remove and return the flows through at ``now`` (checking those due within
        ``window`` s of it), in the order they were started within each group."""
        done, touched = [], []
        for group in self._groups_due_by(now + window):
            queue = group.queue
            while queue and _through(group, queue[-1][2], now):
                done.append(queue.pop()[2])
            group.version += 1  # its first finish moved
            touched.append((group, group.version))
        for flow in done:
            self._remove(flow, now)
        for group, version in touched:
            if group.version == version:  # a rate change would have pushed it already
                self._push_due(group)
        return done

    # ---- reading the state -------------------------------------------------------------

    def flows(self) -> list[Flow]:
        """The active flows (any order)."""
        seen: dict[Flow, None] = {}
        for flows in self.members:
            if flows:
                seen.update(flows)
        return list(seen)

    def rate(self, flow: Flow) -> float:
        """``flow``'s rate now (bytes/s); NaN while its component waits for settling."""
        return math.nan if flow.group is None or flow.comp.dirty else flow.group.rate

    def link_rate(self, link: int) -> float:
        """Bytes/s the flows on ``link`` send now (0 if none). Before a settling pass it is
        what they sent until now: a component waiting for it keeps its old rates, and a
        flow started at this instant has none yet (0)."""
        members = self.members[link]
        if not members:
            return 0.0
        comp = self.comp_of[link]
        if comp.group is not None:  # a hub: every flow at the one rate (n x r, not n sums)
            return self.count[link] * comp.group.rate
        return sum(flow.group.rate for flow in members if flow.group is not None)

    def left(self, flow: Flow, now: float) -> float:
        """Bytes ``flow`` has still to send at ``now`` (its size until it has a rate)."""
        return flow.size if flow.group is None else flow.group.left(flow, now)

    def extract(self, links: Iterable[int], now: float) -> list[tuple[Flow, float]]:
        """Remove every component that uses one of ``links``; (flow, bytes left) each."""
        comps = list(dict.fromkeys(comp for link in links if (comp := self.comp_of[link])))
        taken = []
        for comp in comps:
            for flow in comp.flows:
                taken.append((flow, self.left(flow, now)))
                if flow.group is not None:
                    flow.group.version += 1  # its due entries go stale
        for flow, _ in taken:
            self._detach(flow)
            self._note_changed(flow.route)
            for link in flow.route:
                self.comp_of[link] = None
            flow.comp = flow.group = None
        for comp in comps:
            comp.flows.clear()
            comp.links.clear()
            comp.dirty = True  # settling skips it: it is empty
        return taken

    # ---- bookkeeping -------------------------------------------------------------------

    def _attach(self, flow: Flow) -> None:
        count_, members = self.count, self.members
        for link in flow.route:
            count_[link] += 1
            if members[link] is None:
                members[link] = {flow: None}
            else:
                members[link][flow] = None
        self.n_flows += 1

    def _detach(self, flow: Flow) -> None:
        count_, members = self.count, self.members
        for link in flow.route:
            count_[link] -= 1
            if count_[link]:
                del members[link][flow]
            else:
                members[link] = None
        self.n_flows -= 1

    def _merge(self, comps: list[_Component]) -> _Component:
        """One component holding all of ``comps`` (the largest absorbs the others)."""
        ordered = sorted(comps, key=lambda c: len(c.flows), reverse=True)  # stable
        into = ordered[0]
        for comp in ordered[1:]:
            into.flows.update(comp.flows)
            into.links.update(comp.links)
            for flow in comp.flows:
                flow.comp = into
            for link in comp.links:
                self.comp_of[link] = into
            comp.flows, comp.links = {}, {}
            comp.dirty = True  # settling skips it: it is empty
        return into

    def _mark_dirty(self, comp: _Component) -> None:
        if not comp.dirty:
            comp.dirty = True
            self._dirty.append(comp)
        comp.hub = comp.group = None
        comp.shares = []

    def _push_due(self, group: _Group) -> None:
        if group.queue:
            entry = (group.first_finish(), next(self._tiebreak), group, group.version)
            heapq.heappush(self._due, entry)
            if len(self._due) > 64 + 4 * self.n_flows:
                self._due = [e for e in self._due if e[2].version == e[3]]
                heapq.heapify(self._due)

    def _groups_due_by(self, limit: float) -> list[_Group]:
        """The groups whose first finish is at or before ``limit`` (each once)."""
        due = self._due
        if self.first_finish() > limit:  # also drops stale entries from the top
            return []
        # the usual case: the next entries (the root's children) are due later
        if all(child >= len(due) or due[child][0] > limit for child in (1, 2)):
            return [due[0][2]]
        found, popped = [], []
        while due and due[0][0] <= limit:
            entry = heapq.heappop(due)
            if entry[2].version == entry[3]:
                popped.append(entry)
                found.append(entry[2])
        for entry in popped:
            heapq.heappush(due, entry)
        return found

    # ---- shortcuts ---------------------------------------------------------------------

    def _start_alone(self, flow: Flow, now: float) -> None:
        """A flow on idle links: its own component, at its slowest link's capacity."""
        comp = _Component()
        comp.flows[flow] = None
        flow.comp = comp
        capacity = self.capacity
        hub = min(flow.route, key=capacity.__getitem__)
        for link in flow.route:
            self.comp_of[link] = comp
        comp.links.update(dict.fromkeys(flow.route))
        group = _Group(capacity[hub], now)
        self._enter(group, flow, flow.size)
        self._make_hub(comp, group, hub)
        self._push_due(group)
        self._note_changed(flow.route)

    def _make_hub(self, comp: _Component, group: _Group, hub: int) -> None:
        capacity, count_ = self.capacity, self.count
        comp.hub, comp.group = hub, group
        comp.shares = [(capacity[link] / count_[link], link) for link in comp.links
                       if link != hub]
        heapq.heapify(comp.shares)

    def _enter(self, group: _Group, flow: Flow, left: float) -> None:
        flow.group, flow.mark = group, group.served + left
        bisect.insort(group.queue, (-flow.mark, -next(self._tiebreak), flow))

    def _join_hub(self, comp: _Component, flow: Flow, now: float) -> bool:
        """``flow`` (already counted on its links) joins a hub component; False if the
        component stops being one (its rates then need a full solve)."""
        hub = comp.hub
        if hub is None:
            return False
        capacity, count_ = self.capacity, self.count
        if hub not in flow.route:
            hub = self._new_hub(comp, flow)
            if hub is None:
                return False
            self._make_hub(comp, comp.group, hub)
        share = capacity[hub] / count_[hub]
        others = [(capacity[link] / count_[link], link) for link in flow.route if link != hub]
        if any(other < share for other, _ in others):
            return False  # the other links' shares only grew: only the new route can bind
        for entry in others:
            heapq.heappush(comp.shares, entry)
        group = comp.group
        group.set_rate(share, now)
        self._enter(group, flow, flow.size)
        if group.served > _REBASE_SIZES * flow.size:
            self._rebase(group)
        group.version += 1
        self._push_due(group)
        self._note_changed(comp.links)
        return True

    def _new_hub(self, comp: _Component, flow: Flow) -> int | None:
        """A link of ``flow``'s route (which missed the hub) that every flow of the
        component now crosses and whose share is the smallest there, or None. The flow
        that started a component picked one of its slowest links as hub, and the flows
        that join may share another (a server's link, where the first used its own)."""
        capacity, count_, n = self.capacity, self.count, len(comp.flows)
        shared = [link for link in flow.route if count_[link] == n]
        if not shared:
            return None
        smallest = min(capacity[link] / count_[link] for link in comp.links)
        return next((link for link in shared if capacity[link] / n == smallest), None)

    def _leave_hub(self, comp: _Component, flow: Flow, now: float) -> bool:
        """``flow`` (no longer counted) has left a hub component; False if the hub's new,
        larger share is no longer the smallest (a full solve is needed)."""
        hub, capacity, count_ = comp.hub, self.capacity, self.count
        if not count_[hub]:
            comp.hub = comp.group = None  # empty: every flow crossed the hub
            return True
        share = capacity[hub] / count_[hub]
        shares = comp.shares
        if len(shares) > 16 + 4 * len(comp.links):
            self._make_hub(comp, comp.group, hub)  # drop the stale entries
        for link in flow.route:  # their shares grew; the old entries go stale
            if link != hub and count_[link]:
                heapq.heappush(shares, (capacity[link] / count_[link], link))
        while shares:
            smallest, link = shares[0]
            if count_[link] and self.comp_of[link] is comp and \
                    capacity[link] / count_[link] == smallest:
                if smallest < share:
                    return False
                break
            heapq.heappop(shares)  # stale: that link's count changed or it left
        group = comp.group
        group.set_rate(share, now)
        group.version += 1
        self._push_due(group)
        self._note_changed(comp.links)
        return True

    def _rebase(self, group: _Group) -> None:
        """Count the group's virtual time from 0 again (marks keep their distance)."""
        base = group.served
        group.queue = [(mark + base, tie, flow) for mark, tie, flow in group.queue]
        for _, _, flow in group.queue:
            flow.mark -= base
        group.served = 0.0

    # ---- full solves -------------------------------------------------------------------

    def _split(self, comp: _Component) -> list[list[Flow]]:
        """The connected parts of a marked component's flows (none if it was emptied)."""
        left = dict(comp.flows)
        parts = []
        members = self.members
        while left:
            seed = next(iter(left))
            del left[seed]
            part, stack = [seed], [seed]
            while stack:
                for link in stack.pop().route:
                    for other in members[link]:
                        if other in left:
                            del left[other]
                            part.append(other)
                            stack.append(other)
            parts.append(part)
        return parts

    def _solve(self, flows: list[Flow], now: float) -> None:
        """Progressive filling over one connected set of flows; each round's flows become
        a group, and a one-round solve whose bottleneck every flow crosses is a hub."""
        left = [self.left(flow, now) for flow in flows]
        for flow in flows:
            if flow.group is not None:
                flow.group.version += 1  # the old group's due entry goes stale
        bounds = [flow.bound for flow in flows]
        rates, rounds = fill([flow.route for flow in flows], self.capacity, bounds)
        comp = _Component()
        comp.flows.update(dict.fromkeys(flows))
        for flow in flows:
            flow.comp = comp
            for link in flow.route:
                self.comp_of[link] = comp
                comp.links[link] = None
        groups: dict[int, _Group] = {}
        for flow, rate, rnd, remaining in zip(flows, rates, rounds, left, strict=True):
            group = groups.get(rnd)
            if group is None:
                group = groups[rnd] = _Group(rate, now)
            self._enter(group, flow, remaining)
        for group in groups.values():
            self._push_due(group)
        self._note_changed(comp.links)
        if len(groups) == 1 and min(bounds) == math.inf:  # a hub's rate is its share alone
            hub = self._hub_of(comp, rates[0])
            if hub is not None:
                self._make_hub(comp, groups[0], hub)

    def _hub_of(self, comp: _Component, rate: float) -> int | None:
        """A link of ``comp`` that every flow crosses whose share is the one rate (and so
        the smallest); None if there is none."""
        capacity, count_, n = self.capacity, self.count, len(comp.flows)
        return next((link for link in comp.links
                     if count_[link] == n and capacity[link] / n == rate), None)


def _through(group: _Group, flow: Flow, now: float) -> bool:
    """Whether ``flow`` has sent its bytes by ``now``: its finish time (which the clock
    waits for) has come, or what is left is rounding of rate x time."""
    if group.finish_of(flow.mark) <= now:
        return True
    left = group.left(flow, now)
    return left <= DONE * flow.size or now + left / group.rate <= now


__all__ = ["DONE", "TIE", "Flow", "IncrementalMaxMin"]
