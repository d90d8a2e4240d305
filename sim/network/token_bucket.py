"""Token-bucket links (Linux ``tc tbf``), as fluid buckets over the flow model's links.

A shaped link of rate r (its capacity, bytes/s) holds a bucket of up to D = r x burst_s
bytes of tokens that fills at r. While the bucket holds tokens the link sends at its peak
P, the rate of what lies beneath the shaper (a veth pair, a NIC), and the bucket drains at
(use - r); once empty it sends at r. This is tbf's rule per packet (tc-tbf(8): a packet
leaves when the bucket holds its bytes) taken as a fluid, as the flow model takes packets:
a full bucket lets a message of n bytes through at P while ``n <= D P / (P - r)`` and then
at r, and an idle link's bucket refills in D / r.

Each link's capacity is therefore P or r, and changes only when its bucket runs dry
(:meth:`TokenBuckets.next_empty` tells the clock when) or, back from r to P, once it holds a
frame's tokens again; a link below r is not a bottleneck, so raising its capacity then moves
no rate (max-min), and the flow model looks at it at its next change. The max-min solver
owns the rates; this module only moves capacities (:meth:`IncrementalMaxMin.set_capacity`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

# A bucket sends a packet only when it holds the packet's bytes (tc-tbf(8)): one Ethernet
# frame of tokens (1,514 bytes at MTU 1500) turns a dry bucket back to its peak, which also
# keeps a saturated link from switching between P and r at every event.
FRAME_BYTES = 1514.0
# Tokens below this share of the depth are rounding of rate x time: the bucket is dry.
_DRY = 1e-9
# A bucket due to run dry within this many seconds is dry now (SimGrid's default timing
# precision): the clock then never waits for a time it cannot tell from the present.
_DRY_S = 1e-9


class TokenBuckets:
    """Buckets on ``links`` (rates ``rate_Bps``, depth ``burst_s`` of each rate, peak
    ``peak_Bps``), full at time 0. ``rate_of(link)`` is the bytes/s a link carries now and
    ``set_capacity(link, Bps)`` moves its capacity in the solver. Raises ValueError for a
    depth that is not positive or a peak not above a rate."""

    def __init__(self, links: Sequence[int], rate_Bps: Sequence[float], burst_s: float,
                 peak_Bps: float, rate_of: Callable[[int], float],
                 set_capacity: Callable[[int, float], None]) -> None:
        if not (math.isfinite(burst_s) and burst_s > 0):
            raise ValueError(f"token bucket: burst_s must be > 0, got {burst_s}")
        if not all(peak_Bps > rate for rate in rate_Bps):
            raise ValueError(f"token bucket: peak_Bps ({peak_Bps:g}) must be above every "
                             f"link's rate (up to {max(rate_Bps):g})")
        self.links = list(links)
        self.rate = dict(zip(self.links, map(float, rate_Bps), strict=True))
        self.depth = {link: rate * burst_s for link, rate in self.rate.items()}
        self.peak = float(peak_Bps)
        self.tokens = dict(self.depth)  # bytes, as of ``self.since``
        self.dry: set[int] = set()  # links sending at their rate (bucket empty)
        self.since = 0.0
        self._rate_of, self._set_capacity = rate_of, set_capacity
        for link in self.links:
            set_capacity(link, self.peak)

    def advance(self, now: float) -> bool:
        """Count the tokens up to ``now`` at the rates carried since the last call, and
        switch the links whose bucket ran dry to their rate and those holding a frame again
        to the peak; whether any capacity changed. Call it before rates change at ``now``
        (again at the same instant, it only switches a bucket due to run dry now)."""
        elapsed = now - self.since
        self.since = now
        changed = False
        for link in self.links:
            rate, depth = self.rate[link], self.depth[link]
            drain = self._rate_of(link) - rate
            tokens = self.tokens[link]
            if elapsed > 0:
                tokens = min(depth, tokens - drain * elapsed)
            if tokens <= _DRY * depth or tokens <= drain * _DRY_S:
                tokens = 0.0
            self.tokens[link] = tokens
            if link in self.dry:
                if tokens >= min(FRAME_BYTES, depth):
                    self.dry.discard(link)
                    self._set_capacity(link, self.peak)
                    changed = True
            elif tokens == 0.0:
                self.dry.add(link)
                self._set_capacity(link, rate)
                changed = True
        return changed

    def next_empty(self, now: float) -> float:
        """Seconds from ``now`` until the next bucket runs dry at the rates carried now
        (inf if none drains); rates must be settled."""
        first = math.inf
        for link in self.links:
            if link in self.dry:
                continue
            drain = self._rate_of(link) - self.rate[link]
            if drain > 0:
                first = min(first, self.tokens[link] / drain)
        return max(0.0, first - (now - self.since)) if first < math.inf else first
