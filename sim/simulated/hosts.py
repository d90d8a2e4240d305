"""Hosts: the cores that ranks' CPU work runs on, shared in time slices.

Every rank (workers first, then server shards) lives on a host with ``cores`` cores. A rank
is one thread: its CPU tasks run one after another. Ranks that outnumber their host's cores
take turns in round-robin time slices of ``slice_s``: a task holds a core for at most one
slice, then queues behind the others (first come, first served). This is how Linux's EEVDF
scheduler shares cores (docs/measurements/hosts.md): tasks shorter than a slice run to
completion in wake-up order, and long ones end together as under processor sharing (k
tasks of T on c cores all end near k T / c). Round robin covers both; processor sharing is
its limit for slices much shorter than the tasks.

A waiting rank either spins (MPI busy polling) or sleeps, as ``sim real --wait`` chooses. A
spinning rank yields between polls (MPICH's blocking wait calls sched_yield), so it holds no
core against work: it notices what it waits for at once while a core is free of work, else
when one frees. A sleeping rank polls
as the real runner's waiter does (:class:`sim.real.executors.rank_clock.Waiter`): it spins
``poll_spin_s`` first (holding a core), then naps and checks, noticing the event only at
the end of a nap, every ``poll_s`` (the nap plus the kernel's wake-up latency, measured).

Under the ``fifo`` discipline (``cluster.sched``, ``sim real --sched fifo``) each rank is
pinned to a core (its index among the host's ranks, modulo ``cores``) and holds it from
the moment it runs until it waits: no time slices, no waiters sharing a busy core (a
napping waiter woken while its core is held queues behind the holder). Every wait naps
as a sleeping one does, without holding its core through the spin first (the real waiter
yields it to a rank queued for it), noticing at the end of a nap (where ranks outnumber
the cores, after the measured notice delay); a rendezvous's legs wait as measured and,
for each napping end, for what is left of the task of the rank holding its core (it
answers only once it runs). The notice and rendezvous constants were measured under the
default scheduler; real fifo runs here are slower still. A woken rank's task queues first
in, first out for its own core.

A rank's first task after a gap in its CPU activity (a modelled gradient that sleeps, a
nap; a spinning wait where the profile measured its reload) takes longer: it refetches what
the gap displaced (:mod:`sim.simulated.core_reload`).
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from typing import Any

import numpy as np
import simpy

from sim.simulated.core_reload import Reload
from sim.training.host_costs import HostProfile
from sim.training.host_sched import SCHEDS


class Hosts:
    """Cores of each host and the thread of each rank. ``rank_hosts[r]`` is rank r's host."""

    def __init__(self, env: simpy.Environment, rank_hosts: Sequence[int], cores: int,
                 costs: HostProfile, spin: bool, idle_waiters: Sequence[int] = (),
                 sched: str = "default") -> None:
        """``costs``: the host profile whose time slice, polling, notice, rendezvous,
        waiters' share and reload constants these cores keep (its rates are
        :class:`sim.training.host_costs.CpuCosts`'). ``sched``: ``default`` or ``fifo``
        (the module's docstring); raises ValueError for another, or for ``fifo`` with
        ``spin``."""
        if sched not in SCHEDS or (sched == "fifo" and spin):
            raise ValueError(f"host discipline {sched!r} (spin={spin}): expected one of "
                             f"{SCHEDS}, fifo without spinning waits")
        self.fifo = sched == "fifo"
        # a fifo rank keeps its core until it waits: one slice as long as any task
        self.env, self.slice_s = env, math.inf if self.fifo else costs.slice_s
        # what gaps in ranks' CPU activity cost their next task (None: nothing)
        self.reloads = (Reload(env, rank_hosts, cores, costs.reload_s, costs.reload_tau_s,
                               costs.reload_base_s, costs.reload_spin_base_s)
                        if costs.reload_s > 0 or costs.reload_base_s > 0 else None)
        self.poll_spin_s, self.poll_s = costs.poll_spin_s, costs.poll_s
        self.message_reload = (costs.message_reload_s, costs.message_reload_tau_s)
        # CPU seconds of each rank's other work since its last message task
        self.other_work = [0.0] * len(rank_hosts)
        self.notice_base_s, self.notice_s = costs.notice_base_s, costs.notice_s
        self.rendezvous_bytes, self.rendezvous_s = costs.rendezvous_bytes, costs.rendezvous_s
        self.rendezvous_base_s = costs.rendezvous_base_s
        self.rank_hosts = list(rank_hosts)
        ranks_on = {h: self.rank_hosts.count(h) for h in set(self.rank_hosts)}
        self.cores = {h: simpy.Resource(env, cores) for h in ranks_on}
        self.shared = {h: ranks_on[h] > cores for h in ranks_on}  # ranks outnumber cores
        # fifo: rank -> its pinned core (index on its host mod cores), ranks sharing it queue
        self.pinned = self._pin(cores) if self.fifo else {}
        self.excess = {h: max(ranks_on[h] - cores, 0) for h in ranks_on}
        # whether any message can need a handshake: spared on every message otherwise
        # (under fifo also a leg's wait for its end's core: a finite eager limit suffices)
        self.handshakes = ((self.rendezvous_s > 0 or self.rendezvous_base_s > 0
                            or (self.fifo and math.isfinite(self.rendezvous_bytes)))
                           and not spin and self.poll_s > 0
                           and any(self.shared.values()))
        self.holding: dict[Any, tuple[int, float]] = {}  # fifo: core -> (rank, its task's end)
        self.threads = [simpy.Resource(env, 1) for _ in self.rank_hosts]
        self.free_at = [0.0] * len(self.rank_hosts)  # when each rank's thread is next idle
        # rank -> [start, end] of the work its thread runs beside its own process (run's
        # beside), oldest first, until own_parts has passed it
        self.besides: dict[int, list[list[float]]] = {}
        self.lingering: dict[int, Any] = {}  # rank -> the core it ran on until now
        # waiters take a share of the cores they share with work (:meth:`stretch`)
        # (none under fifo: a woken waiter queues behind its core's holder, never beside it)
        self.wait_share = 0.0 if self.fifo else costs.spin_share if spin else costs.nap_share
        self.working = [False] * len(self.rank_hosts)  # has a task on its thread
        self.busy = dict.fromkeys(ranks_on, 0)  # ranks with a task, per host
        self.waiting = dict.fromkeys(ranks_on, 0)  # ranks waiting (spinning or napping)
        # ranks that wait for messages whenever they have no task (parameter servers)
        self.idle_waiters = {h: [r for r in idle_waiters if self.rank_hosts[r] == h]
                             for h in ranks_on}
        self.spin = spin
        self.spins_waiting = spin or self.poll_s <= 0  # waits spin (else: spin, then nap)
        for rank in idle_waiters:  # a server waits for messages from the start
            self._rest(rank)

    def _pin(self, cores: int) -> dict[int, simpy.Resource]:
        """Each rank's pinned core under fifo: the (index among its host's ranks mod
        ``cores``)-th core of its host, as ``sim real --sched fifo`` pins rank i to core
        i mod cores (every real rank on one host)."""
        pinned, seen = {}, dict.fromkeys(set(self.rank_hosts), 0)
        host_cores = {h: [simpy.Resource(self.env, 1) for _ in range(cores)] for h in seen}
        for rank, host in enumerate(self.rank_hosts):
            pinned[rank] = host_cores[host][seen[host] % cores]
            seen[host] += 1
        return pinned

    def run(self, rank: int, seconds: float, woken: bool = False,
            handshake_s: float = 0.0, beside: list[float] | None = None,
            message: bool = False) -> Generator[simpy.Event, Any, float]:
        """Run ``seconds`` of CPU work on ``rank``'s thread (after its earlier tasks).
        ``woken``: the work is handling a message that just arrived, which an idle sleeping
        rank notices only when it next polls (:meth:`woken_at`). ``handshake_s``: the thread
        first waits this long in a receive (a rendezvous, :meth:`handshake_s`) on no core.
        ``beside``: the task is work beside the rank's own process (a pipelined step's
        messages, started by its channel while the rank computes or waits): it gets
        [start, end] of the time the task holds the thread, each as soon as known
        (inf until then), and :meth:`own_parts` leaves that time out of the rank's own.
        ``message``: the task is the rank's end of a message (its reload after other work,
        :meth:`_task_starts`). Returns the CPU seconds the task took: ``seconds`` and its
        reloads."""
        if seconds <= 0 and handshake_s <= 0:
            return 0.0
        if beside is not None:
            self.besides.setdefault(rank, []).append(beside)
        if woken and (late := self.woken_at(rank) - self.env.now) > 0:
            self.free_at[rank] = self.env.now + late  # asleep until then: nothing else runs
            yield self.env.timeout(late)
        if not self.shared[self.rank_hosts[rank]]:
            reload_s = yield from self._run_alone(rank, seconds + handshake_s, beside, message)
            return seconds + reload_s
        with self.threads[rank].request() as thread:
            try:
                yield thread
            except simpy.Interrupt:
                if beside is not None:  # never held the thread
                    beside[:] = [self.env.now, self.env.now]
                raise
            if beside is not None:
                beside[0] = self.env.now
            if handshake_s > 0:
                yield self.env.timeout(handshake_s)
            host = self.rank_hosts[rank]
            seconds += self._task_starts(rank, seconds, message)
            self._work(rank, host, True)
            try:
                yield from self._slices(rank, host, seconds)
            finally:
                self._work(rank, host, False)
                self._rest(rank)
                if beside is not None:
                    beside[1] = self.env.now
            self.free_at[rank] = self.env.now
        return seconds

    def own_parts(self, rank: int, start: float, end: float) -> list[tuple[float, float]]:
        """The parts of [start, end) (s) in which ``rank``'s thread ran none of the work
        beside its own process (:meth:`run`'s ``beside``): what the rank itself did then, its
        compute or its idle waits, in order. Forgets that work once it ended by ``end`` (the
        rank's own spans come in time order)."""
        log = self.besides.get(rank)
        if not log:
            return [(start, end)]
        parts, at = [], start
        for begun, ended in log:  # in the thread's (first come, first served) order
            if begun >= end or at >= end:
                break
            if ended <= at:
                continue
            if begun > at:
                parts.append((at, begun))
            at = max(at, ended)
        if at < end:
            parts.append((at, end))
        log[:] = [held for held in log if held[1] > end]
        return parts

    def _spin(self, rank: int) -> None:
        """``rank`` spins from now on: it keeps its core, if not all its caches
        (:mod:`sim.simulated.core_reload`)."""
        if self.reloads:
            self.reloads.spin(rank)

    def _release(self, rank: int, after_s: float = 0.0) -> None:
        """``rank`` sleeps from ``after_s`` on (spinning until then): a gap grows."""
        if self.reloads:
            self.reloads.idle(rank, after_s)

    def _task_starts(self, rank: int, seconds: float, message: bool) -> float:
        """Seconds ``rank``'s task of ``seconds`` starting now spends reloading: after its
        gaps (:mod:`sim.simulated.core_reload`) and, a ``message`` task, after the rank's
        own other work since its last one: the message path that work displaced,
        ``message_reload_s`` x (1 - exp(-t / message_reload_tau_s)) for t seconds of it
        (:mod:`sim.calibration.message_reload_bench` measures the curve)."""
        reload_s = self.reloads.work(rank) if self.reloads else 0.0
        amount, tau = self.message_reload
        if not amount:
            return reload_s
        if not message:
            self.other_work[rank] += seconds
            return reload_s
        worked, self.other_work[rank] = self.other_work[rank], 0.0
        return reload_s - amount * math.expm1(-worked / tau)

    def _rest(self, rank: int) -> None:
        """``rank`` waits for what it does next as real ranks wait in MPI: spinning, or
        spinning ``poll_spin_s`` and then napping."""
        if self.spins_waiting:
            self._spin(rank)
        else:
            self._release(rank, self.poll_spin_s)

    def sleep(self, rank: int, seconds: float) -> Generator[simpy.Event, Any, None]:
        """``rank`` sleeps ``seconds`` off its core (a modelled gradient, which the real
        runner sleeps out), then waits as it waits for messages."""
        self._release(rank)
        yield self.env.timeout(seconds)
        self._rest(rank)

    def _slices(self, rank: int, host: int,
                seconds: float) -> Generator[simpy.Event, Any, None]:
        """``seconds`` of work on a shared host's cores, a slice at a time; each slice takes
        longer by :meth:`stretch` while waiters share the cores."""
        left = seconds
        while left > 0:
            core = yield from self._core(rank, host)
            ran = min(left, self.slice_s)
            if self.fifo:
                self.holding[core.resource] = (rank, self.env.now + ran)
            try:
                yield self.env.timeout(ran * self.stretch(host))
            except simpy.Interrupt:
                core.resource.release(core)
                raise
            left -= ran
            if left > 0:  # the slice is over: to the back of the queue
                core.resource.release(core)
            else:
                self._linger(rank, host, core)

    def _work(self, rank: int, host: int, working: bool) -> None:
        self.working[rank] = working
        self.busy[host] += 1 if working else -1

    def stretch(self, host: int) -> float:
        """How much longer work takes on ``host`` now than on a core of its own (>= 1).

        Ranks that wait for messages, spinning in MPI (which yields between polls) or
        napping (waking every poll), still take CPU from work on their core: with k
        waiters per busy core, work runs 1 + k x ``spin_share`` (or ``nap_share``) times
        slower (measured: :func:`sim.calibration.measure_host.measure_wait_share`). Waiters
        take the cores that no work uses first."""
        working = self.busy[host]
        if not working or not self.wait_share:
            return 1.0
        idle = sum(not self.working[r] for r in self.idle_waiters[host])
        cores = self.cores[host].capacity
        waiters = max(0, self.waiting[host] + idle - max(0, cores - working))
        return 1.0 + self.wait_share * waiters / min(working, cores)

    def _core(self, rank: int, host: int) -> Generator[simpy.Event, Any, Any]:
        """A core of ``host`` for ``rank``: the one it is still on (:meth:`_linger`), else
        the next free one (first come, first served). Returns the granted request."""
        core = self.lingering.pop(rank, None)
        if core is not None:
            return core
        core = (self.pinned[rank] if self.fifo else self.cores[host]).request()
        try:
            yield core
        except simpy.Interrupt:
            core.cancel()
            raise
        return core

    def _linger(self, rank: int, host: int, core: Any) -> None:
        """``rank`` stays on ``core`` for what it does next at this instant (more work, or
        the spin before a nap), as a Linux thread keeps its CPU until its slice ends or it
        sleeps; the core is given up if nothing follows at once."""
        self.lingering[rank] = core

        def give_up(turns: int) -> None:
            if self.lingering.get(rank) is not core:
                return
            if turns:  # the rank's next task first takes a turn to get its thread
                self.env.timeout(0).callbacks.append(lambda _: give_up(turns - 1))
                return
            del self.lingering[rank]
            core.resource.release(core)

        give_up(2)

    def _run_alone(self, rank: int, seconds: float, beside: list[float] | None = None,
                   message: bool = False) -> Generator[simpy.Event, Any, float]:
        """A core of its own: the thread is a FIFO queue, so the task ends ``seconds`` after
        the rank's earlier tasks (one event, no slices). Returns its reload (s).
        ``beside`` and ``message``: as :meth:`run`'s, ``beside`` filled in at once."""
        reload_s = self._task_starts(rank, seconds, message)
        begin = max(self.env.now, self.free_at[rank])
        end = begin + seconds + reload_s
        self.free_at[rank] = end
        if beside is not None:
            beside[:] = [begin, end]
        try:
            yield self.env.timeout(end - self.env.now)
        except simpy.Interrupt:
            if beside is not None:
                beside[1] = min(end, self.env.now)
            if self.free_at[rank] == end:  # cancelled last task: the thread is free now
                self.free_at[rank] = self.env.now
                self._rest(rank)
            raise
        if self.free_at[rank] == end:  # no later task queued behind it
            self._rest(rank)
        return reload_s

    def wait(self, rank: int, event: simpy.Event) -> Generator[simpy.Event, Any, Any]:
        """Wait for ``event``; a spinning rank on a shared host holds cores while it waits,
        a sleeping one polls. Returns the event's value."""
        event = self._plain(event)
        host = self.rank_hosts[rank]
        if not self.spin and self.poll_s > 0:
            return (yield from self._poll(rank, host, event))
        self._spin(rank)
        value = yield from self._waiting(host, event)
        if self.spin and self.shared[host] and self._all_cores_working(host):
            # MPICH's blocking wait calls sched_yield between polls, so spinners pass
            # cores among themselves at once and hold none
            # against work; the spinner notices once a core is free of work
            with self.cores[host].request() as core:
                yield core
        return value

    def _waiting(self, host: int, event: simpy.Event) -> Generator[simpy.Event, Any, Any]:
        """Wait for ``event``, counted among ``host``'s waiters (:meth:`stretch`) where its
        ranks share cores. Returns the event's value."""
        if not self.shared[host]:
            return (yield event)
        self.waiting[host] += 1
        try:
            return (yield event)
        finally:
            self.waiting[host] -= 1

    def _all_cores_working(self, host: int) -> bool:
        """Whether every core of ``host`` runs a rank's work (spinners hold no cores)."""
        cores = self.cores[host]
        return cores.count >= cores.capacity

    def _plain(self, event: simpy.Event) -> simpy.Event:
        """``event``, or a plain event that follows it if it is a condition (AllOf...):
        ``condition | timeout`` would flatten it, and its own check would be dropped when
        the timeout wins (SimPy removes nested conditions' callbacks)."""
        if not isinstance(event, simpy.events.Condition) or event.callbacks is None:
            return event
        plain = self.env.event()

        def follow(done: simpy.Event) -> None:
            if done.ok:
                plain.succeed(done.value)
            else:
                done.defused = True
                plain.fail(done.value)

        event.callbacks.append(follow)
        return plain

    def _poll(self, rank: int, host: int,
              event: simpy.Event) -> Generator[simpy.Event, Any, Any]:
        """Spin ``poll_spin_s`` (on a core: on a shared host the one the rank is on, else
        the queue's next), then nap until the end of the nap in which ``event`` fires."""
        if event.processed:  # (a timeout is "triggered" as soon as it is made)
            return (yield event)
        self._spin(rank)  # before it naps
        if self.shared[host] and not self.fifo:
            core = yield from self._core(rank, host)
            yield event | self.env.timeout(self.poll_spin_s)
            if event.processed:  # noticed while spinning: it goes on on that core
                self._linger(rank, host, core)
                return event.value
            self.cores[host].release(core)
            self._release(rank)
            napping_from = self.env.now
        else:
            napping_from = self.env.now + self.poll_spin_s
            self._release(rank, self.poll_spin_s)
        value = yield from self._waiting(host, event)
        late = self._noticed(host, napping_from, self.env.now) - self.env.now
        if late > 0:
            yield self.env.timeout(late)
        return value

    def _noticed(self, host: int, napping_from: float, fired: float) -> float:
        """When a waiter napping since ``napping_from`` notices what happened at ``fired``:
        the end of that nap; where ranks outnumber the host's cores, ``notice_base_s`` and
        ``notice_s`` for every rank beyond them later (the nap, then waiting for a core:
        measured as one)."""
        if fired <= napping_from:
            return fired
        if self.shared[host] and (self.notice_s > 0 or self.notice_base_s > 0):
            return fired + self.notice_base_s + self.notice_s * self.excess[host]
        return napping_from + math.ceil((fired - napping_from) / self.poll_s) * self.poll_s

    def woken_at(self, rank: int) -> float:
        """When an idle ``rank`` that sleeps while it waits notices a message arriving now
        (now, if it is busy, spinning or spins while it waits)."""
        now = self.env.now
        if self.spin or self.poll_s <= 0 or self.free_at[rank] >= now:
            return now
        return self._noticed(self.rank_hosts[rank], self.free_at[rank] + self.poll_spin_s,
                             now)

    def sleeps_shared(self, rank: int) -> bool:
        """Whether ``rank`` naps while it waits, on a host whose ranks outnumber its cores."""
        return not self.spin and self.poll_s > 0 and self.shared[self.rank_hosts[rank]]

    def handshake_s(self, src: int, dst: int, nbytes: float) -> float:
        """The rendezvous of a message of ``nbytes`` from rank ``src`` to ``dst`` beyond the
        eager limit: its legs wait for napping ranks' polls, ``rendezvous_base_s`` +
        ``rendezvous_s`` per rank its ends' hosts have beyond their cores (measured) where
        either end sleeps on a shared host; 0 otherwise (a spinning peer answers within the
        wire's latency)."""
        if not self.handshakes or nbytes <= self.rendezvous_bytes:
            return 0.0
        ends = [r for r in (src, dst) if self.sleeps_shared(r)]
        measured = max((self.rendezvous_base_s + self.rendezvous_s
                        * self.excess[self.rank_hosts[r]] for r in ends), default=0.0)
        return measured + sum(self._queued_s(r) for r in ends) if self.fifo else measured

    def _queued_s(self, rank: int) -> float:
        """fifo: how long ``rank`` waits to run on its pinned core, as a rendezvous leg
        must: what is left of the task of another rank holding it (0 if none)."""
        holder = self.holding.get(self.pinned[rank])
        if holder is None or holder[0] == rank:
            return 0.0
        return max(0.0, holder[1] - self.env.now)

    def slowest_handshake_s(self, src: Any, dst: Any, nbytes: Any) -> float:
        """The longest :meth:`handshake_s` of messages ``src[i] -> dst[i]`` of
        ``nbytes[i]`` (arrays, or a scalar end shared by all); 0 for none."""
        if not self.handshakes:
            return 0.0
        src, dst, nbytes = np.broadcast_arrays(src, dst, nbytes)
        return max((self.handshake_s(int(s), int(d), float(n))
                    for s, d, n in zip(src.flat, dst.flat, nbytes.flat, strict=True)),
                   default=0.0)
