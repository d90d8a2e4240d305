"""What the trace's link tracks hold: the finished link flows, each link's utilisation over
time and the number of flows in flight.

:class:`FlowLog` keeps the first ``limit`` flows that lie within ``window_s`` (counting every
finished flow, so that what was left out is known) and, over the same span, samples of each
busy link's utilisation (its flows' max-min rates over its capacity) and of the flows in
flight, taken whenever the rates change (a flow starts or ends). Max-min rates are constant
between such instants, so the samples are exact. Once the log is full or past the window, or
has taken ``sample_limit`` samples, it stops sampling, and its counters drop to 0 there: a
flow's start or end can change the rate of every flow sharing its bottleneck (a parameter
server's NIC with a thousand workers: a thousand links per event), so the samples, unlike
the flows, need a budget of their own.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

# (start s, end s, bytes, directed links, send id, part): one finished flow. The send id is
# the network send that made it (FlowNetwork.sent counts them), the part its index there.
LoggedFlow = tuple[float, float, float, tuple[int, ...], int, int]


@dataclass
class FlowLog:
    """The finished flows kept for the trace (:data:`LoggedFlow` each): the first ``limit``
    that lie within ``window_s``; and the link utilisation and flows-in-flight samples of
    the same span (:attr:`link_samples`, :attr:`in_flight`: typed columns)."""

    limit: int
    window_s: tuple[float, float] = (0.0, math.inf)
    sample_limit: int = 200_000
    flows: list[LoggedFlow] = field(default_factory=list)
    finished: int = 0
    first_left_out_s: float | None = None
    samples_cut_s: float | None = None  # where the sample budget ran out, if it did

    def __post_init__(self) -> None:
        self.sampling = self.limit > 0 and self.sample_limit > 0  # rates still followed
        self.link_samples = {"time_s": array("d"), "link": array("q"),
                             "utilisation": array("d")}
        self.in_flight = {"time_s": array("d"), "flows": array("q")}
        self._shown: dict[int, tuple[float, int]] = {}  # link -> (value, its sample's row)
        self.opened = False  # whether it has sampled inside the window (every link, first)

    @property
    def left_out(self) -> int:
        return self.finished - len(self.flows)

    @property
    def samples(self) -> int:
        """Counter samples taken (utilisation and flows in flight)."""
        return len(self.link_samples["time_s"]) + len(self.in_flight["time_s"])

    def keep(self, now: float, finished: Iterable[tuple[float, float, tuple[int, ...], int,
                                                       int]], n: int) -> None:
        """``n`` flows finished now: (start s, bytes, links, send id, part) of each, in
        order."""
        self.finished += n
        kept = 0
        if now <= self.window_s[1]:
            for started, size, links, send, part in finished:
                if len(self.flows) >= self.limit:
                    break
                if started >= self.window_s[0]:
                    self.flows.append((float(started), float(now), float(size), links, int(send),
                                       int(part)))
                    kept += 1
        if kept < n and self.first_left_out_s is None:
            self.first_left_out_s = now
        if self.sampling and len(self.flows) >= self.limit:
            self._stop(now)

    def sample(self, now: float, links: list[int],
               link_rates: Callable[[list[int]], Sequence[float]],
               capacity: Sequence[float], flows: int) -> None:
        """The rates settled at ``now``: record each of ``links`` (every link whose rate
        may have changed since the last sample, sorted) whose utilisation changed
        (``link_rates(links)``: bytes/s on each, ``capacity``: bytes/s of every link, Python
        floats), and the ``flows`` in flight."""
        if now > self.window_s[1]:
            self._stop(self.window_s[1])
            return
        if now < self.window_s[0]:
            return
        self.opened = True
        for link, rate in zip(links, link_rates(links), strict=True):
            # max-min never loads a link beyond capacity; the rounding of a sum of shares
            # can (by an ulp or so)
            self._show(now, link, min(round(rate / capacity[link], 12), 1.0))
        self._count(now, flows)
        if self.samples >= self.sample_limit:
            self.samples_cut_s = now
            self._stop(now)

    def _show(self, now: float, link: int, value: float) -> None:
        """Sample ``link`` at ``value`` if it changed (a link never shown starts at 0; a
        second sample at one instant replaces the first: only the settled rate counts)."""
        shown = self._shown.get(link)
        if shown is None and value == 0 or shown is not None and shown[0] == value:
            return
        samples = self.link_samples
        if shown is not None and samples["time_s"][shown[1]] == now:
            samples["utilisation"][shown[1]] = value
            self._shown[link] = (value, shown[1])
            return
        self._shown[link] = (value, len(samples["time_s"]))
        samples["time_s"].append(now)
        samples["link"].append(link)
        samples["utilisation"].append(value)

    def _count(self, now: float, flows: int) -> None:
        counts = self.in_flight
        if counts["flows"] and counts["flows"][-1] == flows:
            return
        if counts["time_s"] and counts["time_s"][-1] == now:
            counts["flows"][-1] = flows
            return
        counts["time_s"].append(now)
        counts["flows"].append(flows)

    def _stop(self, now: float) -> None:
        """Stop sampling: the counters drop to 0 at ``now``, where the link tracks end."""
        self.sampling = False
        if self._shown or len(self.in_flight["time_s"]):
            for link in sorted(self._shown):
                self._show(now, link, 0.0)
            self._count(now, 0)
