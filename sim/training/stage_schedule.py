"""Schedules of pipeline stages: the order of each stage's forward and backward passes in one
step, and the step's time when only computation costs time.

Stages are counted from 0 (stage 0 holds the model's input layer), microbatches from 0.

- ``gpipe`` (Huang et al. 2019): every stage runs all m forwards, then all m backwards, both
  in microbatch order 0..m-1 (the order Narayanan et al. 2021, Fig. 3, draw).
- ``1f1b``, PipeDream-Flush (Narayanan et al. 2021, Sec. 2.2.1, Fig. 4; Megatron-LM's
  ``forward_backward_pipelining_without_interleaving``): stage i runs min(p - i - 1, m)
  warm-up forwards, then one forward and one backward in turn, then the backwards left.

A stage keeps a microbatch's activations from its forward until its backward, so its peak
of microbatches in flight is m under GPipe and min(p - i, m) under 1F1B (Narayanan et al.
2021, Sec. 2.2.1, bound the microbatches in flight by p: stage 0's count, with i from 0).

With balanced stages both take (m + p - 1)(t_f + t_b) per step. The bubble here is the idle
share of the stages' time, (p - 1)/(m + p - 1), GPipe's O((K - 1)/(M + K - 1)) (Huang et al.
2019, Sec. 2.3); Narayanan et al. 2021 divide the same idle time by the busy time instead:
(p - 1)/m.

:func:`evaluate` times one step from per-stage forward and backward seconds and a fixed
delay per message between stages (0: computation only); it imports no simulator and is the
reference the simulated executor is tested against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

SCHEDULES = ("gpipe", "1f1b")


@dataclass(frozen=True, order=True)
class Op:
    """One pass of one microbatch through a stage: ``"F"`` forward or ``"B"`` backward."""

    kind: Literal["F", "B"]
    microbatch: int

    def __str__(self) -> str:
        return f"{self.kind}{self.microbatch}"


def stage_ops(schedule: str, stages: int, stage: int, microbatches: int) -> tuple[Op, ...]:
    """Stage ``stage``'s passes in the order it runs them. Raises ValueError for an unknown
    schedule or a stage outside 0..stages-1."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule: expected one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if not (0 <= stage < stages and microbatches >= 1):
        raise ValueError(f"stage {stage} of {stages} with {microbatches} microbatches")
    m = microbatches
    forwards = [Op("F", k) for k in range(m)]
    backwards = [Op("B", k) for k in range(m)]
    if schedule == "gpipe":
        return tuple(forwards + backwards)
    warm = min(stages - stage - 1, m)
    steady = [op for k in range(m - warm) for op in (forwards[warm + k], backwards[k])]
    return tuple(forwards[:warm] + steady + backwards[m - warm:])


def schedule_ops(schedule: str, stages: int, microbatches: int) -> tuple[tuple[Op, ...], ...]:
    """Every stage's passes, stage 0 first."""
    return tuple(stage_ops(schedule, stages, s, microbatches) for s in range(stages))


def peak_in_flight(ops: Sequence[Op]) -> int:
    """The most microbatches whose forward has run and backward has not, along ``ops``."""
    peak = live = 0
    for op in ops:
        live += 1 if op.kind == "F" else -1
        peak = max(peak, live)
    return peak


@dataclass(frozen=True)
class Slot:
    """One pass on the timeline: ``op`` on ``stage`` from ``start_s`` to ``end_s``."""

    stage: int
    op: Op
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Timeline:
    """One step's passes, each stage's in its order, and what they add up to."""

    slots: tuple[tuple[Slot, ...], ...]  # per stage, in the stage's order

    @property
    def step_s(self) -> float:
        """From the first pass's start (0) to the last one's end."""
        return max((s[-1].end_s for s in self.slots if s), default=0.0)

    @property
    def busy_s(self) -> tuple[float, ...]:
        """Seconds each stage computes."""
        return tuple(sum(x.end_s - x.start_s for x in s) for s in self.slots)

    @property
    def bubble_fraction(self) -> float:
        """The stages' idle share of their time within the step: 1 - busy / (p x step)."""
        total = len(self.slots) * self.step_s
        return 1.0 - sum(self.busy_s) / total if total > 0 else 0.0


def evaluate(ops: Sequence[Sequence[Op]], forward_s: Sequence[float],
             backward_s: Sequence[float], send_s: float = 0.0) -> Timeline:
    """Run each stage's passes in order, each as early as its inputs allow.

    F(k) on stage s waits for F(k) on stage s - 1; B(k) on stage s waits for B(k) on stage
    s + 1 and F(k) on stage s; every pass waits for the one before it on its stage. A
    message between stages takes ``send_s``. ``forward_s[s]`` and ``backward_s[s]`` are
    stage s's seconds per microbatch. Raises ValueError if the lengths disagree, a time is
    negative, a stage does not run each microbatch's F and B exactly once, or the order
    deadlocks (a pass waits on one that can never run).
    """
    p = len(ops)
    if not (len(forward_s) == len(backward_s) == p):
        raise ValueError(f"{p} stages but {len(forward_s)} forward and {len(backward_s)} "
                         "backward times")
    if min([*forward_s, *backward_s, send_s], default=0.0) < 0:
        raise ValueError("times must be >= 0")
    m = len(ops[0]) // 2 if p else 0
    for s, order in enumerate(ops):
        if sorted(order) != sorted([Op("F", k) for k in range(m)] + [Op("B", k) for k in range(m)]):
            raise ValueError(f"stage {s} does not run F and B of microbatches 0..{m - 1} "
                             "once each")
    end: dict[tuple[int, Op], float] = {}
    slots: list[list[Slot]] = [[] for _ in range(p)]
    done = [0] * p
    while any(done[s] < len(ops[s]) for s in range(p)):
        moved = False
        for s in range(p):
            while done[s] < len(ops[s]):
                op = ops[s][done[s]]
                ready = _ready(end, s, op, p, send_s)
                if ready is None:
                    break
                start = max(ready, slots[s][-1].end_s if slots[s] else 0.0)
                cost = forward_s[s] if op.kind == "F" else backward_s[s]
                slots[s].append(Slot(s, op, start, start + cost))
                end[(s, op)] = start + cost
                done[s] += 1
                moved = True
        if not moved:
            waiting = ", ".join(f"stage {s}: {ops[s][done[s]]}" for s in range(p)
                                if done[s] < len(ops[s]))
            raise ValueError(f"the schedule deadlocks ({waiting} can never run)")
    return Timeline(tuple(tuple(s) for s in slots))


def _ready(end: dict[tuple[int, Op], float], s: int, op: Op, p: int,
           send_s: float) -> float | None:
    """When ``op``'s inputs on stage ``s`` are there, or None while one has not run."""
    k = op.microbatch
    if op.kind == "F":
        needs = [(s - 1, Op("F", k), send_s)] if s > 0 else []
    else:
        needs = [(s, Op("F", k), 0.0)] + ([(s + 1, Op("B", k), send_s)] if s < p - 1 else [])
    times = []
    for stage, dep, delay in needs:
        if (stage, dep) not in end:
            return None
        times.append(end[(stage, dep)] + delay)
    return max(times, default=0.0)
