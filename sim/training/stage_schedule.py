"""Schedules of pipeline stages: the order of each stage's forward and backward passes in one
step, and the step's time when only computation costs time.

Stages are counted from 0 (stage 0 holds the model's input layer), microbatches from 0.

- ``gpipe`` (Huang et al. 2019): every stage runs all m forwards, then all m backwards, both
  in microbatch order 0..m-1 (the order Narayanan et al. 2021, Fig. 3, draw).
- ``1f1b``, PipeDream-Flush (Narayanan et al. 2021, Sec. 2.2.1, Fig. 4; Megatron-LM's
  ``forward_backward_pipelining_without_interleaving``): stage i runs min(p - i - 1, m)
  warm-up forwards, then one forward and one backward in turn, then the backwards left.
- ``interleaved`` 1F1B with v model chunks per stage (Narayanan et al. 2021, Sec. 2.2.2,
  Fig. 4 bottom; Megatron-LM's ``forward_backward_pipelining_with_interleaving``, its
  ``get_pp_rank_microbatches`` and ``get_schedule_table`` with the default group of p
  microbatches): stage i holds chunks c = 0..v-1, the virtual stages c p + i of p v
  contiguous layer groups; activations go virtual stage u -> u + 1, so from stage p - 1
  back to stage 0 for the next chunk. Its m v passes each way run in the table's order
  (for each group of p microbatches, chunk 0's, then chunk 1's, ...; backwards with the
  chunks reversed): min(2 (p - i - 1) + (v - 1) p, m v) warm-up forwards, one forward and
  one backward in turn, then the backwards left. m must be a multiple of p (Megatron-LM
  refuses a last group of fewer than p microbatches). With v = 1 it is ``1f1b`` (Megatron-LM
  drops a virtual pipeline size of 1 and runs the schedule without interleaving).

A stage keeps a microbatch's activations from its forward until its backward, so its peak
of microbatches in flight is m under GPipe and min(p - i, m) under 1F1B (Narayanan et al.
2021, Sec. 2.2.1, bound the microbatches in flight by p: stage 0's count, with i from 0).
Interleaved, a stage keeps each chunk's: its peak counts (microbatch, chunk) pairs, at most
min(2 (p - i - 1) + (v - 1) p + 1, m v).

With balanced stages both take (m + p - 1)(t_f + t_b) per step. The bubble here is the idle
share of the stages' time, (p - 1)/(m + p - 1), GPipe's O((K - 1)/(M + K - 1)) (Huang et al.
2019, Sec. 2.3); Narayanan et al. 2021 divide the same idle time by the busy time instead:
(p - 1)/m. Interleaving with v chunks of 1/v of a stage's time each cuts that idle time to
(p - 1)(t_f + t_b)/v, where t_f and t_b are a whole stage's (all its chunks') seconds per
microbatch: the step is (m + (p - 1)/v)(t_f + t_b) (Narayanan et al. 2021, Sec. 2.2.2).

:func:`evaluate` times one step from per-stage forward and backward seconds and a fixed
delay per message between stages (0: computation only); it imports no simulator and is the
reference the simulated executor is tested against.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

SCHEDULES = ("gpipe", "1f1b", "interleaved")


@dataclass(frozen=True, order=True)
class Op:
    """One pass of one microbatch through a stage: ``"F"`` forward or ``"B"`` backward, of
    the stage's model chunk ``chunk`` (0 but for the interleaved schedule)."""

    kind: Literal["F", "B"]
    microbatch: int
    chunk: int = 0

    def __str__(self) -> str:
        return f"{self.kind}{self.microbatch}" + (f".{self.chunk}" if self.chunk else "")


def virtual_stage(op: Op, stages: int, stage: int) -> int:
    """The virtual stage ``op`` runs on stage ``stage``: chunk x p + stage."""
    return op.chunk * stages + stage


def stage_ops(schedule: str, stages: int, stage: int, microbatches: int,
              chunks: int = 1) -> tuple[Op, ...]:
    """Stage ``stage``'s passes in the order it runs them; ``chunks`` (v) model chunks per
    stage, more than 1 only for ``interleaved``. Raises ValueError for an unknown schedule,
    a stage outside 0..stages-1, chunks > 1 with another schedule, or interleaved
    microbatches that are not a multiple of the stages."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule: expected one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if not (0 <= stage < stages and microbatches >= 1 and chunks >= 1):
        raise ValueError(f"stage {stage} of {stages} with {microbatches} microbatches and "
                         f"{chunks} chunks")
    if chunks > 1 and schedule != "interleaved":
        raise ValueError(f"{chunks} chunks per stage: only the interleaved schedule has them")
    m = microbatches
    forwards = [Op("F", k) for k in range(m)]
    backwards = [Op("B", k) for k in range(m)]
    if schedule == "gpipe":
        return tuple(forwards + backwards)
    if schedule == "interleaved" and chunks > 1:
        if m % stages:
            raise ValueError(f"interleaved: {m} microbatches are not a multiple of "
                             f"{stages} stages")
        table = [(k, c) for g in range(0, m, stages) for c in range(chunks)
                 for k in range(g, g + stages)]
        forwards = [Op("F", k, c) for k, c in table]
        backwards = [Op("B", k, chunks - 1 - c) for k, c in table]
        warm = min(2 * (stages - stage - 1) + (chunks - 1) * stages, m * chunks)
    else:
        warm = min(stages - stage - 1, m)
    n = len(forwards)
    steady = [op for k in range(n - warm) for op in (forwards[warm + k], backwards[k])]
    return tuple(forwards[:warm] + steady + backwards[n - warm:])


def schedule_ops(schedule: str, stages: int, microbatches: int,
                 chunks: int = 1) -> tuple[tuple[Op, ...], ...]:
    """Every stage's passes, stage 0 first."""
    return tuple(stage_ops(schedule, stages, s, microbatches, chunks) for s in range(stages))


def peak_in_flight(ops: Sequence[Op]) -> int:
    """The most (microbatch, chunk) pairs whose forward has run and backward has not, along
    ``ops`` (microbatches, with one chunk)."""
    return round(peak_stash(ops, lambda chunk: 1.0))


def peak_stash(ops: Sequence[Op], size: Callable[[int], float]) -> float:
    """The most a stage stashes at once along ``ops``, when a microbatch's forward of chunk
    c keeps ``size(c)`` (e.g. bytes) until its backward."""
    peak = live = 0.0
    for op in ops:
        live += size(op.chunk) if op.kind == "F" else -size(op.chunk)
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

    With v chunks per stage (v = 1 + the largest ``Op.chunk``), virtual stage u = c p + s
    is chunk c of stage s. F(k) on virtual stage u waits for F(k) on u - 1; B(k) on u
    waits for B(k) on u + 1 and F(k) on u; every pass waits for the one before it on its
    stage. A message between two stages takes ``send_s`` (none between chunks of one
    stage). ``forward_s[u]`` and ``backward_s[u]`` are virtual stage u's seconds per
    microbatch (per stage when v = 1). Raises ValueError if the lengths disagree, a time
    is negative, a stage does not run each microbatch's F and B of each chunk exactly once,
    or the order deadlocks (a pass waits on one that can never run).
    """
    p = len(ops)
    v = 1 + max((op.chunk for order in ops for op in order), default=0)
    if not (len(forward_s) == len(backward_s) == p * v):
        raise ValueError(f"{p} stages of {v} chunks but {len(forward_s)} forward and "
                         f"{len(backward_s)} backward times")
    if min([*forward_s, *backward_s, send_s], default=0.0) < 0:
        raise ValueError("times must be >= 0")
    m = len(ops[0]) // (2 * v) if p else 0
    every = sorted(Op(kind, k, c) for kind in "FB" for k in range(m) for c in range(v))
    for s, order in enumerate(ops):
        if sorted(order) != every:
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
                ready = _ready(end, s, op, p, v, send_s)
                if ready is None:
                    break
                start = max(ready, slots[s][-1].end_s if slots[s] else 0.0)
                u = virtual_stage(op, p, s)
                cost = forward_s[u] if op.kind == "F" else backward_s[u]
                slots[s].append(Slot(s, op, start, start + cost))
                end[(s, op)] = start + cost
                done[s] += 1
                moved = True
        if not moved:
            waiting = ", ".join(f"stage {s}: {ops[s][done[s]]}" for s in range(p)
                                if done[s] < len(ops[s]))
            raise ValueError(f"the schedule deadlocks ({waiting} can never run)")
    return Timeline(tuple(tuple(s) for s in slots))


def _ready(end: dict[tuple[int, Op], float], s: int, op: Op, p: int, v: int,
           send_s: float) -> float | None:
    """When ``op``'s inputs on stage ``s`` are there, or None while one has not run."""
    k, u = op.microbatch, virtual_stage(op, p, s)

    def at(w: int, kind: Literal["F", "B"]) -> tuple[int, Op, float]:
        """Virtual stage w's pass of microbatch k: its stage, the op, the message's delay."""
        return w % p, Op(kind, k, w // p), send_s if w % p != s else 0.0

    if op.kind == "F":
        needs = [at(u - 1, "F")] if u > 0 else []
    else:
        needs = [(s, Op("F", k, op.chunk), 0.0)] + ([at(u + 1, "B")] if u < p * v - 1 else [])
    times = []
    for stage, dep, delay in needs:
        if (stage, dep) not in end:
            return None
        times.append(end[(stage, dep)] + delay)
    return max(times, default=0.0)
