"""Max-min fair rates by progressive filling, vectorised over (flow, link) pairs.

All unfrozen flows grow at the same pace; when a link runs out of capacity, the flows
through it freeze at the current level (it is their bottleneck) and the others keep
growing. Each round costs one ``bincount`` over the pairs and there is one round per
distinct bottleneck level, so a thousand flows on disjoint links take a single round.
This is the allocation SimGrid's flow models compute (Casanova et al., "Versatile,
scalable, and accurate simulation of distributed applications and platforms", 2014).

:func:`fill` is the same computation in plain Python, for the few flows of one connected
component (:mod:`sim.network.incremental`), where numpy's per-call cost would dominate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# Links whose fair share is within this relative distance of the smallest saturate together;
# it absorbs rounding so equal shares computed in different orders still tie.
TIE = 1e-12


def max_min_rates(flow: np.ndarray, link: np.ndarray, n_flows: int,
                  capacity: np.ndarray) -> np.ndarray:
    """Rates (bytes/s) of ``n_flows`` flows whose paths are the (flow[i], link[i]) pairs.

    ``capacity`` is indexed by link id (bytes/s). A flow with no links is limited by
    nothing and gets ``inf``.
    """
    rate = np.full(n_flows, np.inf)
    unfrozen = np.zeros(n_flows, dtype=bool)
    unfrozen[flow] = True
    left = capacity.astype(np.float64, copy=True)  # capacity not yet handed out
    open_pair = np.ones(len(flow), dtype=bool)
    level = 0.0
    while open_pair.any():
        links = link[open_pair] if not open_pair.all() else link
        count = np.bincount(links, minlength=len(left))
        used = count > 0
        share = np.full(len(left), np.inf)
        share[used] = left[used] / count[used]
        step = share.min()
        level += step
        left[used] -= step * count[used]
        saturated = used & (share <= step * (1 + TIE))
        left[saturated] = 0.0
        frozen = flow[open_pair & saturated[link]]
        rate[frozen] = level
        unfrozen[frozen] = False
        open_pair &= unfrozen[flow]
    return rate


def fill(routes: Sequence[Sequence[int]], capacity: Sequence[float],
         bounds: Sequence[float] | None = None) -> tuple[list[float], list[int]]:
    """(rates in bytes/s, the round each flow froze in) of flows with these routes.

    The arithmetic of :func:`max_min_rates`, link by link in the same order of operations,
    so both give the same bits; a flow with no links gets ``inf`` and round -1.
    ``bounds[i]`` (bytes/s, inf: none) caps flow i's rate, as SimGrid bounds a TCP flow by
    its window over its round-trip time: the flow freezes at its bound when the level
    reaches it before any of its links saturates, and the capacity it leaves goes to the
    others.
    """
    users: dict[int, list[int]] = {}
    for i, route in enumerate(routes):
        for link in route:
            users.setdefault(link, []).append(i)
    left = {link: float(capacity[link]) for link in users}
    count = {link: len(flows) for link, flows in users.items()}
    rate = [math.inf] * len(routes)
    frozen_in = [-1] * len(routes)
    unfrozen = sum(1 for route in routes if route)
    level, rnd = 0.0, 0
    capped = sorted((b, i) for i, b in enumerate(bounds or ()) if b < math.inf and routes[i])
    while unfrozen:
        shares = {link: left[link] / n for link, n in count.items() if n}
        step = min(shares.values())
        while capped and frozen_in[capped[0][1]] >= 0:
            capped.pop(0)
        if capped and capped[0][0] - level < step:  # a bound comes before any link fills
            level = _freeze_at_bound(capped, level, rnd, routes, left, count, rate, frozen_in)
            unfrozen -= sum(1 for f in frozen_in if f == rnd)
            rnd += 1
            continue
        level += step
        bound = step * (1 + TIE)
        saturated = []
        for link, share in shares.items():
            left[link] -= step * count[link]
            if share <= bound:
                saturated.append(link)
        for link in saturated:
            left[link] = 0.0
        for link in saturated:
            for i in users[link]:
                if frozen_in[i] < 0:
                    frozen_in[i], rate[i] = rnd, level
                    unfrozen -= 1
                    for other in routes[i]:
                        count[other] -= 1
        rnd += 1
    return rate, frozen_in


def _freeze_at_bound(capped: list[tuple[float, int]], level: float, rnd: int,
                     routes: Sequence[Sequence[int]], left: dict[int, float],
                     count: dict[int, int], rate: list[float], frozen_in: list[int]) -> float:
    """Raise the level to the smallest bound among ``capped`` (sorted (bound, flow)
    pairs), charging the links for it, and freeze the flows whose bound it reaches (in
    round ``rnd``). Returns the new level."""
    bound = capped[0][0]
    step = bound - level
    for link, n in count.items():
        if n:
            left[link] -= step * n
    while capped and capped[0][0] <= bound * (1 + TIE):
        _, i = capped.pop(0)
        if frozen_in[i] < 0:
            frozen_in[i], rate[i] = rnd, bound
            for link in routes[i]:
                count[link] -= 1
    return bound
