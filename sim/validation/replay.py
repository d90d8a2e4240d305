"""``sim compare --replay`` and the validation's second error: each real run simulated again
with its own compute replayed (:mod:`sim.simulated.replayed`), so what is left of the error is
the model's coordination (messages' CPU, the wire, waiting, the servers), not the machine's
speed on the day.

A real run's trace (``trace.json``, one track a rank) gives each rank's steps: a step is
what lies between two of its ``data`` spans (a worker gathers its batch once a step), or,
on a pipeline stage that gathers none, from one first forward pass (``F0``) to the next.
Its compute is the sum of its ``compute`` spans there. The host's data and update work is
replayed per rank as its mean per step: a first simulation with the compute replayed gives
the model's, and each rank's charges are scaled by real / model in the second. A job
killed and started again also has its restarts' spans replayed (:func:`replayed_restart`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from sim.config import Config
from sim.errors import UserError
from sim.results import Run, iteration_s, load_repeats
from sim.simulated.replayed import REPLAYED_KINDS, MeasuredTimes
from sim.trace import WORKERS

FIRST_PASS = "F0"  # a pipeline stage's first forward pass of a step


def track_spans(trace: dict[str, Any]) -> dict[str, list[tuple[str, str, float, float]]]:
    """Each worker track's slices (kind, name, start s, seconds), in time order, by the
    track's name. Raises UserError for a trace without worker tracks."""
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        raise UserError("trace.json: no traceEvents list (a damaged or foreign trace)")
    names = {e.get("tid"): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"
             and e.get("pid") == WORKERS}
    spans: dict[str, list[tuple[str, str, float, float]]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("pid") == WORKERS and e.get("tid") in names:
            spans[names[e["tid"]]].append((e.get("cat", ""), e.get("name", ""),
                                           e["ts"] * 1e-6, e["dur"] * 1e-6))
    for track in spans.values():
        track.sort(key=lambda s: s[2])
    return dict(spans)


def step_compute_s(spans: list[tuple[str, str, float, float]]) -> np.ndarray:
    """Seconds of compute in each step of one track (module docstring); steps that
    computed nothing (a gather the run ended after) are left out. A track with neither
    gathers nor first passes (a simulated one on the ideal host) takes each run of
    back-to-back compute spans as a step."""
    kinds, labels = {k for k, *_ in spans}, {label for _, label, *_ in spans}
    steps: list[float] = []
    current, previous, end = None, None, -np.inf
    for kind, label, start, seconds in spans:
        if "data" in kinds:
            opens = kind == "data"
        elif FIRST_PASS in labels:
            opens = kind == "compute" and label == FIRST_PASS and previous != FIRST_PASS
        else:
            opens = kind == "compute" and not np.isclose(start, end, rtol=0, atol=1e-9)
        if opens:
            if current:
                steps.append(current)
            current = 0.0
        if kind == "compute":
            current = (current or 0.0) + seconds
            previous, end = label, start + seconds
    if current:
        steps.append(current)
    return np.array(steps)


def _per_step(spans: dict[str, list[tuple[str, str, float, float]]],
              steps: dict[str, np.ndarray] | None = None) -> dict[tuple[str, str], float]:
    """Each track's seconds of each replayed kind per step (tracks with steps only;
    ``steps``: each track's :func:`step_compute_s`, when already found)."""
    out = {}
    for track, slices in spans.items():
        steps_n = (step_compute_s(slices) if steps is None else steps[track]).size
        # a gather after the last compute began a step the run ended in: left out, as is
        # that step
        last = max((start + s for k, _, start, s in slices if k == "compute"), default=0.0)
        for kind in REPLAYED_KINDS:
            total = sum(s for k, _, start, s in slices
                        if k == kind and (kind != "data" or start < last))
            if steps_n and total > 0:
                out[(track, kind)] = total / steps_n
    return out


def measured_times(run_dir: Path) -> MeasuredTimes:
    """A real run's compute by rank and step, from its trace. Raises UserError naming the
    file when it is missing or holds no compute."""
    path = Path(run_dir) / "trace.json"
    try:
        trace = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: cannot read the real run's trace to replay ({exc})") from None
    spans = track_spans(trace)
    steps = {track: step_compute_s(slices) for track, slices in spans.items()}
    if not any(s.size for s in steps.values()):
        raise UserError(f"{path}: no compute spans on any rank's track; nothing to replay")
    return MeasuredTimes(str(run_dir), steps, _per_step(spans, steps),
                         _time_sliced(Path(run_dir)))


def _time_sliced(run_dir: Path) -> bool:
    """Whether the real run's ranks outnumbered its CPUs under the default scheduler (its
    compute spans then hold waits for a core): its summary's ``ranks``, ``cpus`` and
    ``sched``; False for a simulated run or one that did not record them."""
    summary = _summary(run_dir)
    ranks, cpus = summary.get("ranks"), summary.get("cpus")
    return (summary.get("clock") == "wall" and summary.get("sched", "default") == "default"
            and isinstance(ranks, int) and isinstance(cpus, int) and ranks > cpus)


def simulate_replayed(config: Config, real_dir: Path) -> Any:
    """``config`` simulated with real run ``real_dir``'s compute replayed by rank and step,
    its data and update work by rank, and its restarts' spans (two simulations; the
    second's :class:`sim.simulated.engine.Result`)."""
    from sim.simulated.engine import simulate

    real = measured_times(real_dir)
    first = simulate(config, measured=replace(real, scales={}))
    model = _per_step(track_spans(first.trace))
    scales = {key: real.scales[key] / model[key] for key in real.scales if key in model}
    config = replayed_restart(config, first.summary, _summary(Path(real_dir)))
    return simulate(config, measured=replace(real, scales=scales))


def replayed_restart(config: Config, simulated: dict[str, Any],
                     real: dict[str, Any]) -> Config:
    """``config`` with ``faults.restart_s`` moved by the real run's restart span less the
    simulated one, per failure: from a kill to the new job's clock start (mpiexec, imports,
    building the workload) is the machine's work, as compute is, and drifts with it (the
    same restart measured 0.74-1.30 s within an hour here), so the replay takes it from the
    run; the checkpoints, their read and the work done again stay modelled. ``config``
    as it is where either run restarted no job or they restarted a different number."""
    failures = real.get("failures") or 0
    spans = real.get("restart_time_s"), simulated.get("restart_time_s")
    if not failures or failures != simulated.get("failures") or None in spans:
        return config
    moved = config.faults.restart_s + (spans[0] - spans[1]) / failures
    faults = config.faults.model_copy(update={"restart_s": max(moved, 0.0)})
    return config.model_copy(update={"faults": faults})


def _summary(run_dir: Path) -> dict[str, Any]:
    """A run's summary.json ({} where it cannot be read: nothing of it is replayed)."""
    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}


def replay_against(config: Config, reals: list[Run], out: Path | None = None
                   ) -> dict[str, Any]:
    """Each of ``reals`` (the repeats of one real run) simulated with its own compute
    replayed: the time per update, simulated (mean over the repeats) against real (mean),
    each repeat's own error, and each activity's simulated minus real seconds per update.
    Writes the replayed runs to ``out/r<K>`` when given."""
    from sim.rundir import write_run

    sims, rows = [], []
    for i, real in enumerate(reals):
        result = simulate_replayed(config, real.path)
        if out is not None:
            write_run(out / f"r{i}", result.files())
        simulated, measured = iteration_s(result.summary), real.iteration_s
        if simulated is None or measured is None:
            raise UserError(f"{real.path}: the run applied no updates; nothing to replay")
        sims.append(result.summary)
        rows.append({"sim": simulated, "real": measured, "error": simulated / measured - 1,
                     "steps_drawn": result.summary["replayed"]["steps_drawn"]})
    sim_mean = float(np.mean([r["sim"] for r in rows]))
    real_mean = float(np.mean([r["real"] for r in rows]))
    return {"iteration_s": {"sim": sim_mean, "real": real_mean,
                            "error": sim_mean / real_mean - 1},
            "repeats": rows, "activities": _activities(sims, reals)}


def _activities(sims: list[dict[str, Any]], reals: list[Run]) -> dict[str, float]:
    """Each activity's simulated minus real seconds per update, mean over the repeats."""
    out = {}
    for kind in ("compute", "data", "update", "overhead", "wire", "wait"):
        diffs = [(s.get(f"{kind}_s") or 0.0) / s["iterations"]
                 - (r.summary.get(f"{kind}_s") or 0.0) / r.summary["iterations"]
                 for s, r in zip(sims, reals, strict=True)]
        out[kind] = float(np.mean(diffs))
    return out


def replay_dirs(sim_dir: Path, real_dir: Path, out: Path | None = None) -> dict[str, Any]:
    """:func:`replay_against` for ``sim compare SIM_DIR REAL_DIR --replay``: the simulated
    run's resolved config against the real run's repeats. Raises UserError."""
    from sim.training.validator import load_config

    config = load_config(Path(sim_dir) / "config.toml")
    return replay_against(config, load_repeats(real_dir), out)


def replay_case(config: Config, real_dir: Path, out: Path) -> dict[str, Any] | str:
    """A validation case's :func:`replay_against` of its real repeats, or why there is none
    (one line: a run that recorded no compute, or a config the replay cannot time)."""
    try:
        return replay_against(config, load_repeats(real_dir), out)
    except (UserError, ValueError) as exc:
        return str(exc)
