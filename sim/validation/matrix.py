"""The validation matrix: every case simulated and run for real, compared, tabulated.

``experiments/validation/matrix.toml`` names a base config, the axes (workers, strategy,
network, and any others whose levels set config keys), optionally blocks (the cases are the
union of the blocks' products; without blocks, the full product) and the real repeats. For
each network the machine is calibrated first (:mod:`sim.calibration`): the
simulation of a case uses the calibrated fabric of its network and the calibrated device,
the real run uses that network. Each case's comparison (:mod:`sim.validation.sim_vs_real`)
becomes a row of the README (:mod:`sim.validation.validate_report`). Before each case
the machine must be quiet: other load on its cores would be timed as part of the real run:
each real repeat waits (a while) for the machine to be quiet, measures the other load during
it, is taken again when that load was too high, and the table reports the load the kept
repeats saw.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.calibration.recovery_profile import simulation_sets
from sim.config import Config, apply_overrides, read_toml
from sim.errors import UserError
from sim.real.launch.emulate import unavailable
from sim.real.launch.launcher import RunFailed
from sim.real.launch.other_load import OtherLoad, quietly, wait_for_quiet
from sim.results import iteration_s
from sim.rundir import write_atomic
from sim.training.strategies import row_of
from sim.training.validator import RealRun, validate, validate_real

if TYPE_CHECKING:
    from sim.calibration.sequence import Plan

SPECIAL_AXES = ("workers", "strategy", "network")


@dataclass
class Matrix:
    path: Path
    base: dict[str, Any]
    axes: dict[str, list[Any]]
    levels: dict[str, dict[str, dict[str, Any]]]
    repeat: int = 3
    blocks: list[dict[str, list[Any]]] = field(default_factory=list)  # [] = the full product
    unnamed: dict[str, str] = field(default_factory=dict)  # axis -> level left out of names


@dataclass
class Case:
    levels: dict[str, Any]
    overrides: dict[str, Any] = field(default_factory=dict)
    unnamed: tuple[str, ...] = ()  # axes whose level the name leaves out

    @property
    def name(self) -> str:
        parts = []
        for axis, level in self.levels.items():
            if axis in self.unnamed:
                continue
            text = str(level).replace("emulate:", "")
            parts.append(f"w{text}" if axis == "workers" else text)
        return "-".join(parts)

    @property
    def net(self) -> str:
        return str(self.levels.get("network", "shm"))


def load_matrix(path: Path) -> Matrix:
    """Read matrix.toml. Raises UserError naming what is wrong."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: no such matrix file") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML: {exc}") from None
    axes, levels = data.get("axes"), data.get("levels", {})
    if not isinstance(axes, dict) or not axes or not all(
            isinstance(v, list) and v for v in axes.values()):
        raise UserError(f"{path}: [axes] must map each axis to a non-empty list of levels")
    for axis, values in axes.items():
        if axis in SPECIAL_AXES:
            continue
        for value in values:
            if str(value) not in levels.get(axis, {}):
                raise UserError(f"{path}: axis {axis!r} level {value!r} has no "
                                f"[levels.{axis}.{value}] table")
    blocks = data.get("blocks", [])
    for block in blocks:
        for axis, values in block.items():
            unknown = [v for v in values if v not in axes.get(axis, [])]
            if axis not in axes or unknown:
                raise UserError(f"{path}: [[blocks]] {axis} = {values}: every axis and level "
                                "of a block must be in [axes]")
    unnamed = data.get("unnamed", {})
    for axis, level in unnamed.items():
        if level not in axes.get(axis, []):
            raise UserError(f"{path}: [unnamed] {axis} = {level!r}: expected an axis of [axes] "
                            "and one of its levels")
    base = read_toml(path.parent / data.get("base", "base.toml"))
    return Matrix(path, base, axes, levels, int(data.get("repeat", 3)), blocks, unnamed)


def expand(matrix: Matrix, only: list[str] | None = None,
           option: str = "--only") -> list[Case]:
    """Every combination of levels, keeping those that match all ``AXIS=LEVEL`` filters
    (given as ``option``, which a bad one's error names)."""
    wanted: dict[str, set[str]] = {}
    for text in only or []:
        axis, sep, level = text.partition("=")
        if not sep or axis not in matrix.axes:
            raise UserError(f"{option} {text!r}: expected AXIS=LEVEL with AXIS one of "
                            f"{', '.join(matrix.axes)}")
        wanted.setdefault(axis, set()).add(level)
    cases, seen = [], set()
    combos = itertools.chain.from_iterable(
        itertools.product(*(block.get(a, v) for a, v in matrix.axes.items()))
        for block in (matrix.blocks or [{}]))
    for combo in combos:
        levels = dict(zip(matrix.axes, combo, strict=True))
        if combo in seen or any(str(levels[a]) not in allowed for a, allowed in wanted.items()):
            continue
        seen.add(combo)
        overrides: dict[str, Any] = {}
        for axis, level in levels.items():
            if axis == "workers":
                overrides["cluster.workers"] = level
            elif axis == "strategy":
                overrides["strategy.kind"] = level
            elif axis != "network":
                overrides.update(matrix.levels[axis][str(level)])
        cases.append(Case(levels, overrides, tuple(
            a for a, level in matrix.unnamed.items() if str(levels[a]) == str(level))))
    if not cases:
        raise UserError("--only: no case of the matrix matches")
    return cases


def toml_value(value: Any) -> str:
    """``value`` as a TOML value for ``--set`` (tables inline)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}"
                               for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value)


def overrides_of(case: Case) -> list[str]:
    return [f"{key}={toml_value(value)}" for key, value in case.overrides.items()]


def case_config(matrix: Matrix, case: Case, profiles: dict[str, Path],
                sched: str = "default") -> Config:
    """The case's resolved config, simulated on the calibrated profiles of its network (and,
    under ``[faults]`` or ``[checkpoint]``, the calibrated storage and restart delay), its
    host's cores under ``sched``, the discipline of its real runs."""
    where = f"{matrix.path} case {case.name}"
    data = apply_overrides(matrix.base, overrides_of(case))
    return twin_config(data, validate(data, where), profiles, case.net, where, sched)


def twin_config(data: dict[str, Any], config: Config, profiles: dict[str, Path], net: str,
                where: str, sched: str = "default") -> Config:
    """The simulated twin of real run ``config`` (its raw ``data``) on network ``net``: the
    calibrated device and fabric, and, when the host was calibrated, this machine's host
    costs, cores and every rank on it; under ``[faults]`` or ``[checkpoint]`` the
    calibrated storage and restart delay; the cores shared as the real ranks shared them
    (``sched``: ``sim real --sched``). Raises UserError (naming ``where``)."""
    sets = [f"cluster.sched={json.dumps(sched)}"] if sched != "default" else []
    sets += [f'cluster.fabric="calibrated:{profiles[net] / "fabric.json"}"',
            f'compute.device="calibrated:{profiles["device"] / "device.json"}"']
    try:  # with failures or checkpoints: the calibrated storage and restart delay
        sets += simulation_sets(config, profiles.get("recovery"))
    except ValueError as exc:
        raise UserError(f"{where}: {exc}") from None
    if (profiles["host"] / "host.json").exists():  # every real rank runs on this machine
        ranks = row_of(config).ranks(config)
        sets += [f'cluster.host="calibrated:{profiles["host"] / "host.json"}"',
                 f"cluster.cores={os.cpu_count() or 1}", f"cluster.ranks_per_host={ranks}"]
    if config.cluster.transport != "mpi":  # this machine's grpcio, measured
        if "transport" not in profiles:
            raise UserError(f"{where}: cluster.transport = {config.cluster.transport!r} needs "
                            "a calibrated transport (sim calibrate --only transport)")
        sets.append(f'cluster.transport="calibrated:{profiles["transport"] / "transport.json"}"')
    return validate(apply_overrides(data, sets), where)


# ---- the machine -----------------------------------------------------------------------

def calibrate_all(matrix: Matrix, cases: list[Case], out: Path, say: Callable,
                  quick: bool = False, quiet: tuple[float, float] = (1.0, 0.0),
                  retries: int = 0) -> dict:
    """Calibrate the device (the matrix's workloads), each network the cases use, and gRPC
    when a case runs over it; the profiles (:func:`stored_profiles`' shape) and the
    workloads (``"workloads"``, for :func:`device_drift`)."""
    from sim.calibration.report import Progress
    from sim.calibration.sequence import calibrate

    configs, rpc = {}, False
    for case in cases:  # one config per distinct workload
        config = validate(apply_overrides(matrix.base, overrides_of(case)), str(matrix.path))
        configs[config.workload.model_dump_json()] = config
        rpc = rpc or config.cluster.transport != "mpi"
    # an allreduce of one rank sends nothing: no point for the fabric's fit
    ranks = sorted({int(w) for w in matrix.axes.get("workers", [2]) if int(w) > 1} | {2})
    plan = calibration_plan(list(configs.values()), sorted({case.net for case in cases}),
                            ranks, quick, quiet, retries, recovered_configs(matrix, cases), rpc)
    profiles: dict[str, Any] = calibrate(plan, out, Progress(say))
    profiles["workloads"], profiles["plan"] = plan.workloads, plan
    return profiles


def calibration_plan(configs: list[Config], nets: list[str], ranks: list[int],
                     quick: bool = False, quiet: tuple[float, float] = (1.0, 0.0),
                     retries: int = 0, faulty: list[Config] | None = None,
                     transport: bool = False) -> Plan:
    """What a validation calibrates under its ``profiles/``: the device (on ``configs``'
    workloads), each of ``nets`` (allreduces on ``ranks`` ranks), the host's CPU costs
    (net of the shared-memory fabric's), checkpoints and restarts of ``faulty``, and
    (``transport``) gRPC's costs; each measured on a quiet machine (``quiet``,
    ``retries``), two processes at once as in a 2-worker run, each profile in its folder."""
    from sim.calibration.sequence import PHASES, Plan

    return Plan(workloads=configs,
                phases=tuple(p for p in PHASES if transport or p != "transport"),
                nets=tuple(nets), ranks=tuple(ranks),
                concurrency=min(2, os.cpu_count() or 1),  # as in a 2-worker run: both busy
                kernel_time_s=0.05 if quick else 0.3,
                host_net="shm" if "shm" in nets else None, restarts=faulty or [],
                quick=quick, quiet=quiet, retries=retries, folders=True)


def stored_profiles(place: Path, nets: list[str]) -> dict[str, Path]:
    """The profiles a previous calibration left in ``place`` (its device/, host/, one
    folder per network, and recovery/ and transport/ when there)."""
    profiles = {"device": place / "device", "host": place / "host"}
    profiles |= {net: place / net.replace(":", "-") for net in nets}
    for name in ("recovery", "transport"):
        if (place / name).is_dir():
            profiles[name] = place / name
    return profiles


def recovered_configs(matrix: Matrix, cases: list[Case]) -> list[Config]:
    """One config per distinct restart (workload, ranks) among the cases whose real runs
    restart from checkpoints."""
    from sim.calibration.recovery_profile import config_key

    found: dict[str, Config] = {}
    for case in cases:
        config = validate(apply_overrides(matrix.base, overrides_of(case)), str(matrix.path))
        try:
            restarts = validate_real(config, case.net).recovery == "restart"
        except UserError:  # refused for real: the case fails on its own, saying why
            continue
        if restarts:
            found.setdefault(config_key(config), config)
    return list(found.values())


def device_drift(profiles: dict[str, Any], quiet: tuple[float, float],
                 retries: int) -> list[dict[str, Any]]:
    """The calibrated kernel times measured again now: how far the machine's speed moved."""
    from sim.calibration.measure_device import measure_kernels

    before = json.loads((profiles["device"] / "device.json").read_text())["points"]
    configs = profiles.get("workloads")
    if not configs:
        return []
    concurrency = int(json.loads((profiles["device"] / "device.json").read_text())
                      .get("concurrency", 1))
    now, _ = quietly(lambda: measure_kernels(configs, concurrency, 0.3), quiet, retries)
    return [{"workload": b["workload"], "start_s": b["seconds"], "end_s": n["seconds"],
             "change": n["seconds"] / b["seconds"] - 1} for b, n in zip(before, now,
                                                                          strict=True)]


# ---- the run -----------------------------------------------------------------------------

def run_repeats(config: Config, case: Case, real: RealRun, real_dir: Path, repeat: int,
                quiet: tuple[float, float], retries: int,
                sched: str = "default") -> dict[str, Any]:
    """The real repeats, each taken again (up to ``retries`` times) when other load took
    more than ``quiet[0]`` of the CPUs during it; the least disturbed attempt is kept.
    Under ``[faults]`` / ``[checkpoint]`` each attempt is restarted or carried on as by
    ``sim real``, its checkpoints in a directory of its own beside ``real_dir`` (removed)."""
    from sim.real.launch.real_run import RealOptions, network, run_faulty, run_once, write_repeats

    options = RealOptions(net=case.net, hang_s=120, sched=sched)
    kept, loads, discarded = [], [], []

    def attempt(emulation: Any, i: int) -> dict[str, str]:
        if real.recovery is None:
            return run_once(config, real, options, emulation, i)
        real_dir.parent.mkdir(parents=True, exist_ok=True)
        place = Path(tempfile.mkdtemp(prefix=".checkpoints-", dir=real_dir.parent))
        try:
            return run_faulty(config, real, options, emulation, i, place)
        finally:
            shutil.rmtree(place, ignore_errors=True)

    with network(case.net, real.ranks) as emulation:
        for i in range(repeat):
            attempts = []
            for _ in range(1 + retries):
                wait_for_quiet(*quiet)
                with OtherLoad() as load:
                    files = attempt(emulation, i)
                attempts.append((load.fraction, files))
                if load.fraction <= quiet[0]:
                    break
            attempts.sort(key=lambda a: a[0])
            kept.append(attempts[0][1])
            loads.append(attempts[0][0])
            discarded += [{"repeat": i, "other_load": f, "iteration_s": iteration_s(
                json.loads(files["summary.json"]))} for f, files in attempts[1:]]
    write_repeats(real_dir, config, kept)
    return {"other_load": loads, "discarded": discarded}


def run_case(matrix: Matrix, case: Case, profiles: dict[str, Path], out: Path, repeat: int,
             quiet: tuple[float, float], retries: int = 2,
             sched: str = "default") -> dict[str, Any]:
    """Simulate and run one case; its row for the README (with ``error`` if it failed).
    ``sched``: the real repeats' discipline (``sim real --sched``) where the case's ranks
    can keep to it and the machine grants it, else the default; the row's ``sched`` says
    which, and its twin shares cores the same way."""
    from sim.validation.replay import replay_case
    from sim.validation.sim_vs_real import compare

    row: dict[str, Any] = {"case": case.name, "levels": case.levels}
    try:
        config = case_config(matrix, case, profiles)
        real = validate_real(config, case.net)
        row["sched"] = case_sched(sched, real)
        if row["sched"] != "default":
            config = case_config(matrix, case, profiles, row["sched"])
        row["ranks"] = real.ranks
        sim_dir, real_dir = out / case.name / "sim", out / case.name / "real"
        simulate_into(config, sim_dir)
        started = time.monotonic()
        row |= run_repeats(config, case, real, real_dir, repeat, quiet, retries,
                           row["sched"])
        row["real_s"] = time.monotonic() - started
        row["real_at"] = started + row["real_s"] / 2  # for the calibration nearest in time
        row["report"] = compare(sim_dir, real_dir)
        row["replay"] = replay_case(config, real_dir, out / case.name / "replay")
    except (UserError, RunFailed) as exc:
        row["error"] = str(exc)
    return row


def recorded_sched(real_dir: Path) -> str:
    """The discipline the real run in ``real_dir`` (a run directory, or repeats ``r0/``...)
    had, as its summary recorded it (runs from before ``sched`` existed: the default)."""
    for summary in (real_dir / "summary.json", real_dir / "r0" / "summary.json"):
        if summary.is_file():
            return json.loads(summary.read_text()).get("sched", "default")
    return "default"


def case_sched(sched: str, real: RealRun) -> str:
    """The discipline a case's real repeats get: ``sched``, or the default where its ranks
    cannot keep to it or the machine refuses it (:func:`sim.real.launch.real_run.check_sched`
    warns of that once)."""
    from sim.real.launch.real_run import RealOptions, check_sched, sched_unsupported

    if sched == "default" or sched_unsupported(real):
        return "default"
    return check_sched(RealOptions(sched=sched), real).sched


def simulate_into(config: Config, sim_dir: Path, replace: bool = False) -> None:
    """Simulate ``config`` and write the run directory ``sim_dir`` (``replace``: over the
    run already there)."""
    from sim.rundir import write_run
    from sim.simulated.engine import simulate

    result = simulate(config)
    write_run(sim_dir, {"config.toml": result.config_toml,
                        "summary.json": json.dumps(result.summary, indent=2) + "\n",
                        "metrics.csv": result.metrics_csv,
                        "trace.json": json.dumps(result.trace)}, replace)


def _say_case(say: Callable, i: int, n: int, case: Case, row: dict[str, Any]) -> None:
    if "error" in row:
        say(f"[{i + 1}/{n}] {case.name}: FAILED: {row['error']}")
        return
    it = row["report"]["iteration_s"]
    say(f"[{i + 1}/{n}] {case.name}: sim {it['sim'] * 1e3:.3f} ms, real "
        f"{it['real']['mean'] * 1e3:.3f} ms, error {it['error']:+.1%} (other load "
        f"<= {max(row['other_load']):.0%}, {len(row['discarded'])} repeat(s) taken again)")


def _nearest_again(matrix: Matrix, cases: list[Case], rows: list[dict[str, Any]],
                   group: range, profiles: dict[str, Any],
                   calibrations: list[tuple[float, Path]], out: Path) -> None:
    """The cases of ``group`` whose real repeats lie nearer in time to a later calibration
    than to the one they were simulated on, simulated again on that one (their replayed
    error stands: the replay takes the run's own compute, not the device's)."""
    from sim.validation import drift
    from sim.validation.sim_vs_real import compare

    for k in group:
        row, case = rows[k], cases[k]
        if "error" in row or "real_at" not in row:
            continue
        device = drift.nearest(calibrations, row["real_at"])
        row["device"] = str(device)
        if device == calibrations[-2][1]:
            continue
        sim_dir = out / "cases" / case.name / "sim"
        try:
            simulate_into(case_config(matrix, case, {**profiles, "device": device}), sim_dir,
                          replace=True)
            row["report"] = compare(sim_dir, out / "cases" / case.name / "real")
        except UserError as exc:
            row["error"] = str(exc)


def run_matrix(matrix_path: Path, out: Path, readme: Path, only: list[str] | None,
               repeat: int | None, profiles_dir: Path | None, quiet: tuple[float, float],
               say: Callable = print, quick: bool = False,
               retries: int = 2, recalibrate_every: int = 15,
               sched: str = "default") -> list[dict[str, Any]]:
    from sim.validation import drift, reproducibility
    from sim.validation.validate_report import write_readme

    matrix = load_matrix(matrix_path)
    cases = expand(matrix, only)
    skipped: list[str] = []
    reason = unavailable() if any(c.net != "shm" for c in cases) else None
    if reason:
        skipped = [c.name for c in cases if c.net != "shm"]
        cases = [c for c in cases if c.net == "shm"]
        say(f"skipping {len(skipped)} emulated-network case(s): {reason}")
    if (out / "cases").exists() and any((out / "cases").iterdir()):
        raise UserError(f"{out}/cases: already holds results; choose another --out")
    started = time.monotonic()
    if profiles_dir is None:
        profiles = calibrate_all(matrix, cases, out / "profiles", say, quick, quiet, retries)
    else:
        profiles = stored_profiles(profiles_dir, sorted({c.net for c in cases}))
    # the device measured again after every group of cases (not on reused profiles)
    every = recalibrate_every if profiles_dir is None and "plan" in profiles else 0
    calibrations = [(time.monotonic(), profiles["device"])]
    rows: list[dict[str, Any]] = []
    first = 0  # the group's first case
    for i, case in enumerate(cases):
        now = {**profiles, "device": calibrations[-1][1]}
        row = run_case(matrix, case, now, out / "cases", repeat or matrix.repeat, quiet,
                       retries, sched)
        rows.append(row)
        _say_case(say, i, len(cases), case, row)
        if every and ((i + 1) % every == 0 or i + 1 == len(cases)):
            place = out / "profiles" / f"again-{len(calibrations)}"
            calibrations.append(drift.recalibrate(profiles["plan"], place, say))
            _nearest_again(matrix, cases, rows, range(first, i + 1), profiles, calibrations,
                           out)
            first = i + 1
    write_atomic(out / "rows.json", json.dumps(rows, indent=2) + "\n")
    moved = [] if every else device_drift(profiles, quiet, retries)
    profiles.pop("workloads", None)
    profiles.pop("plan", None)
    real_json = readme.with_name("real.json")
    write_readme(readme, rows, skipped, {"drift": moved,
        "recalibrations": drift.drift(calibrations),
        "matrix": matrix, "out": out, "profiles": profiles, "only": only,
        "repeat": repeat or matrix.repeat, "elapsed_s": time.monotonic() - started,
        "quiet": quiet, "retries": retries, "before": reproducibility.load(real_json)})
    if not only:  # a subset (--only) compares with it but leaves the whole matrix's be
        reproducibility.save(real_json, rows)
    return rows
