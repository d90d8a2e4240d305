"""Hosts: the cores that ranks' CPU work runs on, shared in time slices.

Every rank (workers first, then server shards) lives on a host with ``cores`` cores. A rank
is one thread: its CPU tasks run one after another. Ranks that outnumber their host's cores
take turns in round-robin time slices of ``slice_s``: a task holds a core for at most one
slice, then queues behind the others (first come, first served). This is how Linux shares
cores, measured here (2 cores, Linux 6.18 EEVDF): tasks shorter than a slice (~3 ms) run to
completion in wake-up order, and long ones end together as under processor sharing (k
tasks of T on c cores all end near k T / c). Round robin covers both; processor sharing is
its limit for slices much shorter than the tasks.

A waiting rank either sleeps (its core is free) or spins (MPI busy polling): a spinning
rank stays runnable, so on a shared host it takes slices from the others until what it
waits for has happened and it has had a slice to notice it.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import simpy


class Hosts:
    """Cores of each host and the thread of each rank. ``rank_hosts[r]`` is rank r's host."""

    def __init__(self, env: simpy.Environment, rank_hosts: Sequence[int], cores: int,
                 slice_s: float, spin: bool) -> None:
        self.env, self.slice_s = env, slice_s
        self.rank_hosts = list(rank_hosts)
        ranks_on = {h: self.rank_hosts.count(h) for h in set(self.rank_hosts)}
        self.cores = {h: simpy.Resource(env, cores) for h in ranks_on}
        self.shared = {h: ranks_on[h] > cores for h in ranks_on}  # ranks outnumber cores
        self.threads = [simpy.Resource(env, 1) for _ in self.rank_hosts]
        self.free_at = [0.0] * len(self.rank_hosts)  # ranks with a core of their own
        self.spin = spin

    def run(self, rank: int, seconds: float) -> Generator[simpy.Event, Any, None]:
        """Run ``seconds`` of CPU work on ``rank``'s thread (after its earlier tasks)."""
        if seconds <= 0:
            return
        if not self.shared[self.rank_hosts[rank]]:
            yield from self._run_alone(rank, seconds)
            return
        with self.threads[rank].request() as thread:
            yield thread
            host = self.rank_hosts[rank]
            left = seconds
            while left > 0:
                with self.cores[host].request() as core:
                    yield core
                    ran = min(left, self.slice_s)
                    yield self.env.timeout(ran)
                    left -= ran

    def _run_alone(self, rank: int, seconds: float) -> Generator[simpy.Event, Any, None]:
        """A core of its own: the thread is a FIFO queue, so the task ends ``seconds`` after
        the rank's earlier tasks (one event, no slices)."""
        end = max(self.env.now, self.free_at[rank]) + seconds
        self.free_at[rank] = end
        try:
            yield self.env.timeout(end - self.env.now)
        except simpy.Interrupt:
            if self.free_at[rank] == end:  # cancelled last task: the thread is free now
                self.free_at[rank] = self.env.now
            raise

    def wait(self, rank: int, event: simpy.Event) -> Generator[simpy.Event, Any, Any]:
        """Wait for ``event``; a spinning rank on a shared host holds cores while it waits.
        Returns the event's value."""
        host = self.rank_hosts[rank]
        if not (self.spin and self.shared[host]):
            return (yield event)
        while True:
            with self.cores[host].request() as core:
                yield core
                yield event | self.env.timeout(self.slice_s)
                if event.triggered:  # noticed during the slice it was spinning in
                    return event.value
