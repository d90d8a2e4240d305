"""Max-min fair rates by progressive filling, vectorised over (flow, link) pairs.

All unfrozen flows grow at the same pace; when a link runs out of capacity, the flows
through it freeze at the current level (it is their bottleneck) and the others keep
growing. Each round costs one ``bincount`` over the pairs and there is one round per
distinct bottleneck level, so a thousand flows on disjoint links take a single round.
This is the allocation SimGrid's flow models compute (Casanova et al., "Versatile,
scalable, and accurate simulation of distributed applications and platforms", 2014).
"""

from __future__ import annotations

import numpy as np

# Links whose fair share is within this relative distance of the smallest saturate together;
# it absorbs rounding so equal shares computed in different orders still tie.
_TIE = 1e-12


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
        saturated = used & (share <= step * (1 + _TIE))
        left[saturated] = 0.0
        frozen = flow[open_pair & saturated[link]]
        rate[frozen] = level
        unfrozen[frozen] = False
        open_pair &= unfrozen[flow]
    return rate
