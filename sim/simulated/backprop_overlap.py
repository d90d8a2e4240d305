"""Layer-wise pipelining: gradient communication overlapped with backprop, in simulated time.

(Not pipeline stages: a model split over ranks is :mod:`sim.simulated.strategies.model_parallel`.)

A step on a worker is: forward through layers 0..L-1, then backward from L-1 down to 0.
The gradient leaves in *messages*, groups of consecutive layers planned by
:func:`sim.training.messages.plan_messages` (none, wfbp, bucket, fusion).

A message may go once backward has produced all its layers (on every worker, for an
allreduce). Messages share one communication channel, one at a time, in the order they
became ready, or, with ``priority``, lowest layer first (P3, Jayarajan et al. 2019;
ByteScheduler, Peng et al. 2019). Layer l's forward in the next step waits for the
message that carries layer l: that is what lets priority ordering pay off.

The channel is pluggable: an allreduce channel (one global queue of collectives) or a
parameter-server channel (each worker pushes on its own; the servers aggregate each
message once every worker has pushed it; each worker then pulls it back).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
import simpy

from sim.trace import Facts
from sim.training.messages import Message, StepCosts, next_tick


class BackpropOverlap:
    """Runs ``steps`` pipelined steps on ``workers`` workers over a channel.

    ``costs(worker, step)`` gives the layer times of that worker's step;
    ``span(worker, kind, start, end, overlapped)`` receives its compute, wait and
    communication intervals. With one message per step, a worker's time splits exactly
    into compute, communication and wait. With several, communication runs beside compute
    (``overlapped``: shown, not counted in the worker's time) and the time a forward layer
    sits idle for its message is split: waiting for the other workers (``wait``: they had
    not yet produced or pushed it, :attr:`blocked`) and exposed communication (``wire``).
    Either way the worker's activities add up to its time.
    ``step_done(step)`` is called when every message of the step has been delivered.
    ``span`` also gets the :class:`~sim.trace.Facts` of the idle spans (the message
    awaited), and ``tag(message, overlapped)``, if given, is a context in which the spans
    recorded are that message's (a collective's, which the channel does not make itself).
    A message's CPU work (its sends, receives and sums, the update) runs on the worker's
    thread and is charged as the worker's time by its kind, in every mode: ``own(worker,
    start, end)`` gives the parts of [start, end) the thread spent on none of it
    (:meth:`sim.simulated.hosts.Hosts.own_parts`), and the worker's compute and idle spans
    cover only those.
    """

    def __init__(self, env: simpy.Environment, workers: int, messages: list[Message],
                 channel: AllreduceChannel | ParameterServerChannel,
                 costs: Callable[[int, int], StepCosts],
                 span: Callable[[int, str, float, float, bool], None],
                 step_done: Callable[[int], None],
                 busy: Callable[[int, float], Generator[simpy.Event, Any, None]] | None = None,
                 prologue: Callable[[int], Generator[simpy.Event, Any, None]] | None = None,
                 tag: Callable[[Message, bool], AbstractContextManager] | None = None,
                 own: Callable[[int, float, float], list[tuple[float, float]]] | None = None,
                 cycle_s: float = 0.0) -> None:
        self.env, self.workers, self.messages, self.channel = env, workers, messages, channel
        self.costs, self.span, self.step_done = costs, span, step_done
        # busy(worker, seconds): a layer's compute (on the worker's core, or a plain delay);
        # prologue(worker): what a step does before its forward (the batch, the loop's code),
        # once layer 0's message of the previous step is back
        self.busy = busy or self._delay
        self.prologue = prologue
        self.tag = tag or (lambda msg, overlapped: nullcontext())
        self.own = own or (lambda w, start, end: [(start, end)])
        # Horovod's coordinator cycle: a produced message goes to the channel on the next
        # tick, k x cycle_s after its worker's backward pass started (0: at once)
        self.cycle_s = cycle_s
        n_layers = messages[0].hi + 1 if messages else 0
        self.message_of = np.empty(n_layers, np.int64)
        for m, msg in enumerate(messages):
            self.message_of[msg.lo:msg.hi + 1] = m
        # delivered[worker][m]: the event of message m's latest delivery to that worker
        self.delivered: list[list[simpy.Event | None]] = [[None] * len(messages)
                                                          for _ in range(workers)]
        # when each worker's latest copy of message m started to communicate
        self.comm_start = np.zeros((workers, len(messages)))
        # [from, until) in which worker w's latest message m waited for the other workers
        # (the channel fills it in)
        self.blocked = np.zeros((workers, len(messages), 2))
        self.stopped = False
        self.overlapped = len(messages) > 1
        channel.attach(self)

    def _delay(self, w: int, seconds: float) -> Generator[simpy.Event, Any, None]:
        yield self.env.timeout(seconds)

    def own_span(self, w: int, kind: str, start: float, end: float,
                 facts: Facts | None = None) -> None:
        """Worker ``w`` itself spent [start, end) on ``kind``, but for the CPU work of
        messages its thread ran meanwhile (recorded as theirs)."""
        for begun, ended in self.own(w, start, end):
            self.span(w, kind, begun, ended, False, facts)

    def idle_spans(self, w: int, m: int, start: float, end: float) -> None:
        """Worker ``w`` sat idle in [start, end) for message ``m``: ``wait`` while the
        message waited for the other workers, ``wire`` (exposed communication) otherwise."""
        a, b = np.clip(self.blocked[w, m], start, end)
        facts = self.awaited(m)
        self.own_span(w, "wire", start, a, facts)
        self.own_span(w, "wait", a, b, facts)
        self.own_span(w, "wire", b, end, facts)

    def awaited(self, m: int) -> Facts:
        """What a worker idle for message ``m`` waits for: its layers."""
        msg = self.messages[m]
        return Facts(layers=(msg.lo, msg.hi))

    def landed(self, w: int, m: int) -> None:
        """Message m is back at worker w: the layers it carries may run."""
        self.delivered[w][m].succeed()

    def start(self, steps: int) -> simpy.Process:
        """Start every worker and the channel; the returned process ends with the last step."""
        for w in range(self.workers):
            self.env.process(self.worker(w, steps))
        return self.env.process(self.channel.run(self, steps))

    def worker(self, w: int, steps: int) -> Generator[simpy.Event, Any, None]:
        env = self.env
        for step in range(steps):
            if self.stopped:
                return
            cost = self.costs(w, step)
            for layer in range(len(self.message_of)):
                m = self.message_of[layer]
                waiting = self.delivered[w][m]
                if waiting is not None and not waiting.processed:
                    start = env.now
                    yield waiting
                    if self.overlapped:
                        self.idle_spans(w, m, start, env.now)
                    else:  # idle until it started moving; the channel spans the rest
                        self.own_span(w, "wait", start, max(start, self.comm_start[w, m]),
                                      self.awaited(m))
                if layer == 0 and self.prologue is not None:  # once the parameters it reads
                    yield from self.prologue(w)  # are in, as in the real runner
                start = env.now
                yield from self.busy(w, cost.forward_s[layer])
                self.own_span(w, "compute", start, env.now)
            backward_start = env.now
            for layer in range(len(self.message_of) - 1, -1, -1):
                start = env.now
                yield from self.busy(w, cost.backward_s[layer])
                self.own_span(w, "compute", start, env.now)
                m = self.message_of[layer]
                if self.messages[m].lo == layer:
                    self.delivered[w][m] = env.event()
                    self.release(w, step, m, env.now - backward_start)

    def release(self, w: int, step: int, m: int, elapsed_s: float) -> None:
        """Worker ``w`` has produced message ``m``, ``elapsed_s`` into its backward pass: to
        the channel now, or on the coordinator's next cycle tick (:attr:`cycle_s`)."""
        if self.cycle_s <= 0:
            self.channel.ready(self, w, step, m)
            return
        delay = next_tick(elapsed_s, self.cycle_s) - elapsed_s
        self.env.timeout(max(0.0, delay)).callbacks.append(
            lambda _: self.channel.ready(self, w, step, m))


class AllreduceChannel:
    """One global queue: message m is reduced once every worker has produced it.

    ``reduce(step, message)`` runs the collective and records every worker's spans."""

    def __init__(self, env: simpy.Environment, priority: bool,
                 reduce: Callable[[int, Message], Generator[simpy.Event, Any, Any]]) -> None:
        self.env, self.priority, self.reduce = env, priority, reduce
        self.waiting: dict[int, int] = {}  # message -> workers that produced it
        self.queue: list[int] = []  # messages ready on every worker, not yet sent
        self.wakeup = env.event()

    def attach(self, overlap: BackpropOverlap) -> None:
        """Get ready for ``overlap`` (nothing per worker for a global queue)."""

    def ready(self, overlap: BackpropOverlap, worker: int, step: int, m: int) -> None:
        self.waiting[m] = self.waiting.get(m, 0) + 1
        overlap.blocked[worker, m, 0] = self.env.now  # produced here: waits for the others
        if self.waiting[m] == overlap.workers:
            overlap.blocked[:, m, 1] = self.env.now
            del self.waiting[m]
            self.queue.append(m)
            if not self.wakeup.triggered:
                self.wakeup.succeed()

    def next_message(self, overlap: BackpropOverlap) -> int:
        pick = min(self.queue, key=lambda m: overlap.messages[m].lo) if self.priority \
            else self.queue[0]
        self.queue.remove(pick)
        return pick

    def run(self, overlap: BackpropOverlap, steps: int) -> Generator[simpy.Event, Any, None]:
        for step in range(steps):
            for _ in overlap.messages:
                while not self.queue:
                    yield self.wakeup
                    self.wakeup = self.env.event()
                m = self.next_message(overlap)
                overlap.comm_start[:, m] = self.env.now
                with overlap.tag(overlap.messages[m], overlap.overlapped):
                    yield from self.reduce(step, overlap.messages[m])  # records its spans
                for w in range(overlap.workers):
                    overlap.landed(w, m)
            overlap.step_done(step)
            if overlap.stopped:
                return


class ParameterServerChannel:
    """Each worker pushes its ready messages one at a time; once every worker has pushed
    message m the servers apply it and every worker pulls it back.

    ``push(worker, message)`` and ``pull(worker, message)`` record the worker's spans."""

    def __init__(self, env: simpy.Environment, priority: bool,
                 push: Callable[[int, Message], Generator[simpy.Event, Any, Any]],
                 apply: Callable[[int, Message], None],
                 pull: Callable[[int, Message], Generator[simpy.Event, Any, Any]]) -> None:
        self.env, self.priority = env, priority
        self.push, self.apply, self.pull = push, apply, pull

    def attach(self, overlap: BackpropOverlap) -> None:
        """One send queue per worker (workers may call ready() before run() starts)."""
        self.queues: list[list[int]] = [[] for _ in range(overlap.workers)]
        self.wakeups = [self.env.event() for _ in range(overlap.workers)]

    def ready(self, overlap: BackpropOverlap, worker: int, step: int, m: int) -> None:
        self.queues[worker].append(m)
        if not self.wakeups[worker].triggered:
            self.wakeups[worker].succeed()

    def run(self, overlap: BackpropOverlap, steps: int) -> Generator[simpy.Event, Any, None]:
        for step in range(steps):
            self.pushed = [0] * len(overlap.messages)
            self.pushed_at = np.zeros((overlap.workers, len(overlap.messages)))
            self.pulls: list[simpy.Event] = []
            senders = [self.env.process(self.sender(overlap, w, step))
                       for w in range(overlap.workers)]
            yield simpy.AllOf(self.env, senders)
            yield simpy.AllOf(self.env, self.pulls)
            overlap.step_done(step)
            if overlap.stopped:
                return

    def sender(self, overlap: BackpropOverlap, w: int,
               step: int) -> Generator[simpy.Event, Any, None]:
        for _ in overlap.messages:
            while not self.queues[w]:
                yield self.wakeups[w]
                self.wakeups[w] = self.env.event()
            queue = self.queues[w]
            m = min(queue, key=lambda k: overlap.messages[k].lo) if self.priority else queue[0]
            queue.remove(m)
            overlap.comm_start[w, m] = self.env.now
            yield from self.push(w, overlap.messages[m])  # records its spans
            self.pushed_at[w, m] = self.env.now
            overlap.blocked[w, m, 0] = self.env.now  # pushed: waits for the others' pushes
            self.pushed[m] += 1
            if self.pushed[m] == overlap.workers:
                overlap.blocked[:, m, 1] = self.env.now
                self.apply(step, overlap.messages[m])
                self.pulls += [self.env.process(self.pull_to(overlap, v, m))
                               for v in range(overlap.workers)]

    def pull_to(self, overlap: BackpropOverlap, w: int,
                m: int) -> Generator[simpy.Event, Any, None]:
        start = self.env.now
        if not overlap.overlapped:  # idle between its push and the others' (the barrier)
            overlap.span(w, "wait", float(self.pushed_at[w, m]), start, False)
        yield from self.pull(w, overlap.messages[m])  # records its spans
        overlap.landed(w, m)
