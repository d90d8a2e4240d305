"""The reload transient: work after a gap refetches what the gap displaced from the caches.

A rank that sleeps (a modelled gradient, a nap) leaves its core to others: to other ranks'
work, whose footprints displace its cached lines (the indirect cost of a context switch,
Li, Ding and Shen 2007), or idle, when deep idle states flush the caches and, on a virtual
machine, the physical core serves other tenants. A rank's first task after such a gap
therefore takes longer, by Thiebaut and Stone's (1987) reload transient: if each cached
line survives a stretch t of foreign use with probability exp(-t / tau), refetching costs
``reload_s`` x (1 - exp(-t / tau)); any gap at all costs ``base_s`` more (what the first
foreign code displaces at once: TLBs, branch predictors, the first level of cache).

A rank is working, spinning, or idle. An idle rank's gap grows with the share of the host's
cores that something foreign may use: with c cores of which k hold spinning ranks (whose
tight polling loops displace little of each other's lines), at (c - k) / c per second. The
reload is charged to the rank's next task, for all the gap since its last task.

A spinning rank keeps its core, but not all its cache: on a virtual machine the physical
core and its caches also serve other tenants, whatever the guest runs. Where the profile
measured it (``spin_base_s`` not None), a spinning rank's gap grows at 1 per second and its
next task pays ``spin_base_s`` (what the polling loop itself displaces) instead of
``base_s`` (a sleep's wake-up) when it did not sleep; with ``spin_base_s`` None a spin is no
gap (profiles from before it was measured).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import simpy

IDLE, WORKING, SPINNING = 0, 1, 2


class Reload:
    """Each rank's state over time, the spinning ranks of every host, and each rank's
    pending reload (``rank_hosts[r]``: rank r's host of ``cores`` cores)."""

    def __init__(self, env: simpy.Environment, rank_hosts: Sequence[int], cores: int,
                 reload_s: float, tau_s: float, base_s: float = 0.0,
                 spin_base_s: float | None = None) -> None:
        self.env, self.reload_s, self.tau_s, self.cores = env, reload_s, tau_s, cores
        self.base_s, self.spin_base_s = base_s, spin_base_s
        self.rank_hosts = list(rank_hosts)
        hosts = set(self.rank_hosts)
        self.spinning = dict.fromkeys(hosts, 0)  # spinning ranks, per host
        self.area = dict.fromkeys(hosts, 0.0)  # foreign-use share integrated until `since`
        self.since = dict.fromkeys(hosts, 0.0)
        ranks = len(self.rank_hosts)
        self.state = [IDLE] * ranks
        self.mark = [0.0] * ranks  # the host's area when the rank went idle
        self.gap = [0.0] * ranks  # area of the rank's gaps since its last task
        self.pending: list[object | None] = [None] * ranks  # a release still to come
        self.spun_from = [0.0] * ranks  # when the rank began to spin
        self.slept = [False] * ranks  # whether its gap since its last task has a sleep

    def _area(self, host: int) -> float:
        """The share of the host's cores open to foreign use, integrated up to now (s)."""
        open_ = max(self.cores - self.spinning[host], 0) / self.cores
        return self.area[host] + (self.env.now - self.since[host]) * open_

    def _set(self, rank: int, state: int) -> None:
        old = self.state[rank]
        if old == state:
            return
        host = self.rank_hosts[rank]
        area = self._area(host)
        if SPINNING in (old, state):
            self.area[host], self.since[host] = area, self.env.now
            self.spinning[host] += 1 if state == SPINNING else -1
        if old == IDLE:
            self.gap[rank] += area - self.mark[rank]
            self.slept[rank] = True
        elif state == IDLE:
            self.mark[rank] = area
        if self.spin_base_s is not None:  # a spin is a gap too, at 1 per second
            if old == SPINNING:
                self.gap[rank] += self.env.now - self.spun_from[rank]
            elif state == SPINNING:
                self.spun_from[rank] = self.env.now
        self.state[rank] = state

    def spin(self, rank: int) -> None:
        """``rank`` spins from now on (a pending release is dropped)."""
        self.pending[rank] = None
        self._set(rank, SPINNING)

    def idle(self, rank: int, after_s: float = 0.0) -> None:
        """``rank`` sleeps from now on, or spins ``after_s`` first (the spin before a nap)
        unless it works or spins again meanwhile."""
        if after_s <= 0:
            self.pending[rank] = None
            self._set(rank, IDLE)
            return
        self.spin(rank)
        token = self.pending[rank] = object()

        def release(_: simpy.Event) -> None:
            if self.pending[rank] is token:
                self.idle(rank)

        self.env.timeout(after_s).callbacks.append(release)

    def work(self, rank: int) -> float:
        """``rank`` starts a task now: the seconds it spends reloading what its gaps since
        its last task displaced."""
        self.pending[rank] = None
        self._set(rank, WORKING)
        gap, self.gap[rank] = self.gap[rank], 0.0
        slept, self.slept[rank] = self.slept[rank], False
        if gap <= 1e-12:  # none (rounding of areas taken at one instant)
            return 0.0
        base = self.base_s if slept or self.spin_base_s is None else self.spin_base_s
        return base - (self.reload_s * math.expm1(-gap / self.tau_s) if self.reload_s
                       else 0.0)
