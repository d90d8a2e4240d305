"""One calibration of this machine: :func:`calibrate` runs a :class:`Plan`'s phases in order,
each measured, fitted and written as a profile the simulator reads.

The phases, in this order (each later one may use an earlier one's profile):

* ``compute``: the device (:mod:`~sim.calibration.measure_device`,
  :mod:`~sim.calibration.fit_device`), ``device.json``;
* ``network``: a fabric per network (:mod:`~sim.calibration.measure_fabric`,
  :mod:`~sim.calibration.fit_fabric`), ``fabric.json``;
* ``host``: the host's CPU costs (:mod:`~sim.calibration.measure_host`,
  :mod:`~sim.calibration.fit_host`), ``host.json``, each message's cost less the fabric's of
  :attr:`Plan.host_net`;
* ``recovery``: checkpoint files and restarts (:mod:`~sim.calibration.measure_storage`,
  :mod:`~sim.calibration.measure_recovery`, :mod:`~sim.calibration.fit_recovery`),
  ``storage.json`` and ``recovery.json``;
* ``transport``: gRPC over loopback (:mod:`~sim.calibration.transport_bench`),
  ``transport.json``; last, as it loads grpc into this process.

``sim calibrate`` writes every profile in one directory; ``sim validate`` and
``sim real --twin`` each in a folder of its own (:attr:`Plan.folders`) with
``calibration.json`` beside them. Each phase is measured on a quiet machine
(:func:`~sim.real.launch.other_load.quietly`) and said by a report
(:mod:`~sim.calibration.report`).
"""

from __future__ import annotations

import dataclasses
import json
import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sim.calibrated import read_profile
from sim.config import Config
from sim.rundir import write_atomic

PHASES = ("compute", "network", "host", "recovery", "transport")


@dataclass(frozen=True)
class Plan:
    """What one calibration measures (``phases``, in :data:`PHASES`' order) and how.

    ``workloads``: the gradients the device is fitted to; ``nets``: the networks measured
    (``shm`` or ``emulate:RATE``), allreduces on ``ranks`` ranks with ``collective``,
    ranks waiting as ``wait``; ``concurrency``: processes timing kernels and the host's
    vector costs at once, each kernel for ``kernel_time_s`` at least; ``host_repeats``: the
    host's measurements taken this many times (None: 3, 1 when ``quick``); ``host_net``:
    the network whose fabric the host's message costs are net of (its profile in ``OUT``, if
    there; None: none); ``restarts``: the configs whose restarts are measured; ``quick``:
    fewer sizes and repetitions. ``quiet`` (the busy share of the CPUs to wait for, the
    longest wait in s) and ``retries``: each phase measured on a quiet machine, taken again
    up to ``retries`` times when disturbed. ``folders``: each profile in a folder of its
    own (``device/``, one per network, ``host/``, ``recovery/``, ``transport/``) and
    ``calibration.json`` (every phase's fit) beside them, else every file in ``OUT``."""

    workloads: list[Config]
    phases: tuple[str, ...] = PHASES
    nets: tuple[str, ...] = ("shm",)
    ranks: tuple[int, ...] = (2, 4)
    collective: str = "ring"
    wait: str = "auto"
    concurrency: int = 1
    kernel_time_s: float = 0.2
    host_repeats: int | None = None
    host_net: str | None = "shm"
    restarts: list[Config] = field(default_factory=list)
    quick: bool = False
    quiet: tuple[float, float] = (1.0, 0.0)
    retries: int = 0
    folders: bool = False

    def place(self, out: Path, profile: str) -> Path:
        """The directory of ``profile`` (device, host, recovery, transport or a network)."""
        return out / profile.replace(":", "-") if self.folders else out


class Report(Protocol):
    """What a calibration says (:mod:`sim.calibration.report`)."""

    def starting(self, phase: str, what: Any) -> None: ...

    def measured(self, phase: str, found: dict[str, Any]) -> None: ...


def calibrate(plan: Plan, out: Path, report: Report) -> dict[str, Path]:
    """Measure, fit and write the profiles of ``plan`` under ``out``; each profile's
    directory by name (``device``, each network, ``host``, ``recovery``, ``transport``).
    Raises RunFailed (a measurement's ranks failed), RuntimeError (gRPC's echo server),
    UserError (a restart job refused), OSError (the files)."""
    from sim.real.launch.other_load import quietly

    def measure(call: Callable[[], Any]) -> tuple[Any, float]:
        return quietly(call, plan.quiet, plan.retries)

    profiles: dict[str, Path] = {}
    summary: dict[str, Any] = {}
    for phase in (p for p in PHASES if p in plan.phases):
        for name, place, found in PHASE_STEPS[phase](plan, out, report, measure):
            profiles[name], summary[name] = place, found.pop("summary")
            report.measured(phase, found)
    if plan.folders:  # a record of the fits beside the profiles, not one itself
        write_atomic(out / "calibration.json", json.dumps(summary, indent=2) + "\n")
    return profiles


Measure = Callable[[Callable[[], Any]], tuple[Any, float]]
Step = tuple[str, Path, dict[str, Any]]  # a profile's name, its directory, what was found


def compute(plan: Plan, out: Path, report: Report, measure: Measure) -> list[Step]:
    """The device, fitted to the gradients of ``plan.workloads``."""
    from sim.calibration.fit_device import fit_device
    from sim.calibration.measure_device import measure_kernels
    from sim.calibration.profiles import stamp, write_device

    report.starting("compute", plan.workloads)
    points, load = measure(lambda: measure_kernels(plan.workloads, plan.concurrency,
                                                   plan.kernel_time_s))
    place = plan.place(out, "device")
    place.mkdir(parents=True, exist_ok=True)
    fit = fit_device(points)
    write_device(place / "device.json", fit, points,
                 f"sim calibrate: gradient times of {len(points)} workloads, "
                 f"{plan.concurrency} process(es) at once; {stamp()}",
                 name=f"calibrated-{platform.node()}", concurrency=plan.concurrency)
    device = fit.rates() | {"errors": fit.errors}
    return [("device", place, {"device": device, "points": points, "other_load": load,
                               "path": place / "device.json",
                               "summary": device | {"points": points}})]


def network(plan: Plan, out: Path, report: Report, measure: Measure) -> list[Step]:
    """A fabric for each of ``plan.nets``."""
    from sim.calibration.fit_fabric import fit_network
    from sim.calibration.measure_fabric import measure_network
    from sim.calibration.profiles import write_fabric
    from sim.real.launch.real_run import network as emulated
    from sim.real.launch.real_run import terminated_cleanly

    steps = []
    for net in plan.nets:
        report.starting("network", net)
        place = plan.place(out, net)
        place.mkdir(parents=True, exist_ok=True)
        with terminated_cleanly(), emulated(net, max(plan.ranks)) as emulation:
            measured, load = measure(lambda e=emulation: measure_network(
                e, list(plan.ranks), plan.wait, plan.collective, plan.quick))
        fit = fit_network(measured)
        fabric = write_fabric(place / "fabric.json", net, measured, fit)
        steps.append((net, place, {"net": net, "fit": fit, "fabric": fabric,
                                   "other_load": load, "path": place / "fabric.json",
                                   "summary": fit}))
    return steps


def host(plan: Plan, out: Path, report: Report, measure: Measure) -> list[Step]:
    """The host's CPU costs, each message's less the fabric's of ``plan.host_net``."""
    from sim.network.fabrics import PROFILE_FORMAT

    report.starting("host", None)
    overhead_s, fabric_Bps = 0.0, float("inf")
    if plan.host_net is not None and (
            fabric := plan.place(out, plan.host_net) / "fabric.json").exists():
        # calibrated now, or before (a calibration of the host alone)
        data = read_profile(fabric, PROFILE_FORMAT, "fabric profile")
        overhead_s, fabric_Bps = data["overhead_s"], data["bandwidth_Bps"]
    place = plan.place(out, "host")
    lines, _ = measure(lambda: calibrate_host(place / "host.json", plan.quick, plan.wait,
                                              overhead_s, fabric_Bps, plan.concurrency,
                                              plan.host_repeats))
    return [("host", place, {"lines": lines, "summary": lines})]


def recovery(plan: Plan, out: Path, report: Report, measure: Measure) -> list[Step]:
    """Checkpoint files and the restarts of ``plan.restarts`` (nothing without one)."""
    if not plan.restarts:
        return []
    report.starting("recovery", plan.restarts)
    place = plan.place(out, "recovery")
    lines, _ = measure(lambda: calibrate_recovery(place, plan.restarts, plan.quick))
    return [("recovery", place, {"lines": lines, "summary": lines})]


def transport(plan: Plan, out: Path, report: Report, measure: Measure) -> list[Step]:
    """gRPC's costs over loopback."""
    from sim.calibration.transport_bench import calibrate_transport

    report.starting("transport", None)
    place = plan.place(out, "transport")
    (found, lines, errors), load = measure(lambda: calibrate_transport(
        place / "transport.json", plan.quick))
    return [("transport", place, {
        "lines": lines, "errors": errors, "other_load": load,
        "summary": {"rpc_s": found.rpc_s, "copy_Bps": found.copy_Bps,
                    "serialize_Bps": found.serialize_Bps,
                    "deserialize_Bps": found.deserialize_Bps}})]


PHASE_STEPS: dict[str, Callable[[Plan, Path, Report, Measure], list[Step]]] = {
    "compute": compute, "network": network, "host": host, "recovery": recovery,
    "transport": transport}


def calibrate_host(path: Path, quick: bool = False, wait: str = "auto",
                   fabric_overhead_s: float = 0.0, fabric_Bps: float = float("inf"),
                   concurrency: int = 1, repeats: int | None = None) -> list[str]:
    """Measure, fit and write the host profile to ``path``; the lines to print (fits with
    their errors, warnings, and the config line).

    ``fabric_overhead_s``: the o of the fabric profile calibrated with it, which the
    simulator adds to every message's CPU (:func:`sim.training.host_costs.cpu_costs`); the
    measured per-message constant includes it, so ``message_s`` is the rest. Likewise
    ``fabric_Bps``, its bandwidth, is taken out of the messages' per-byte time: what is left
    is ``message_Bps``. ``concurrency``: gather, update and sum are timed in this many
    processes at once (as ``sim calibrate --concurrency`` times the kernels).
    ``repeats``: the whole measurement is taken this many times, one after another, and
    the profile is fitted to each timed point's median over them
    (:func:`~sim.calibration.fit_host.median_measurement`); None:
    :data:`~sim.calibration.measure_host.REPEATS`, 1 when ``quick``. Raises ValueError for
    ``repeats`` < 1."""
    from sim.calibration import host_report as R
    from sim.calibration.fit_host import host_profile, median_measurement, numbers
    from sim.calibration.measure_host import (
        REPEATS,
        load_average,
        measure_host,
        measured_through,
    )
    from sim.calibration.profiles import write_host

    if repeats is None:
        repeats = 1 if quick else REPEATS
    if repeats < 1:
        raise ValueError(f"host calibration: repeats must be >= 1, got {repeats}")
    path.parent.mkdir(parents=True, exist_ok=True)
    load = load_average()
    taken = [measure_host(quick, wait, concurrency) for _ in range(repeats)]
    m = median_measurement(taken)
    each = [host_profile(t, fabric_overhead_s, fabric_Bps) for t in taken]
    profile = each[0] if repeats == 1 else dataclasses.replace(
        host_profile(m, fabric_overhead_s, fabric_Bps),
        source=f"{each[0].source}; fitted to each point's median over {repeats} calibrations")
    lines = [R.summary_line(profile, fabric_overhead_s), *R.fit_lines(m["fits"]),
             *R.step_and_wait_lines(profile, m), *R.reload_lines(profile, m["reload"]),
             R.message_reload_line(profile, m["message_reload"]),
             R.serving_line(profile, m["serving"]), *R.repeat_lines(each, profile)]
    warnings = R.busy_warning(load, m["cpu_s"], m["wall_s"]) + R.fit_warnings(m)
    write_host(path, profile, fits=m["fits"], step=m["step"], poll=m["poll"],
               rendezvous=m["rendezvous"], share=m["share"], reload=m["reload"],
               message_reload=m["message_reload"], serving=m["serving"],
               measured_through=measured_through(concurrency, m["reload"]),
               load_average=load,
               cpu_fraction=m["cpu_s"] / m["wall_s"] if m["wall_s"] else None,
               fabric_overhead_s=fabric_overhead_s, fabric_Bps=fabric_Bps,
               quick=quick, concurrency=concurrency, repeats=[numbers(p) for p in each])
    return lines + warnings + [f'  cluster.host = "calibrated:{path}"']


def calibrate_recovery(out: Path, configs: list[Config], quick: bool = False) -> list[str]:
    """Measure and write ``out/storage.json`` and ``out/recovery.json`` (the files are
    timed in ``out``); the lines to print: fits with their errors, warnings, config lines.
    Raises RunFailed or UserError (a restart job failed), OSError (the files)."""
    import shutil

    from sim.calibration.fit_recovery import fit_recovery, fit_storage
    from sim.calibration.measure_recovery import measure_restart
    from sim.calibration.measure_storage import QUICK_SIZES, SIZES, measure_storage, where
    from sim.calibration.profiles import write_recovery, write_storage
    from sim.calibration.report import recovery_lines
    from sim.faults.storage import get_storage

    out.mkdir(parents=True, exist_ok=True)
    probe = out / ".probe"
    sizes, repeats = (QUICK_SIZES, 3) if quick else (SIZES, 7)
    try:
        points = measure_storage(probe, sizes, repeats)
        storage, fits = fit_storage(points, where(out), repeats)
        write_storage(out / "storage.json", storage, fits, points)
        storage = get_storage(f"calibrated:{out / 'storage.json'}")
        restarts = [measure_restart(c, probe, storage, 1 if quick else 3) for c in configs]
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    profile = fit_recovery(restarts, 1 if quick else 3)
    write_recovery(out / "recovery.json", profile, restarts)
    return recovery_lines(fits, points, profile.restart_s, restarts, out)
