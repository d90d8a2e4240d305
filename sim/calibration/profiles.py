"""Every profile a calibration writes, one writer per kind, each through
:func:`sim.calibrated.write_profile` (the one writer of profiles): the device (from
microbenchmarks and from runs alike), the fabric, the host, the storage, the recovery and the
transport. Each kind's fields come from its dataclass; what follows them is how it was
measured (points, fits, samples), kept for people."""

from __future__ import annotations

import datetime as dt
import os
import platform
from pathlib import Path
from typing import Any

from sim.calibrated import write_profile
from sim.calibration.fit_device import DeviceFit
from sim.calibration.recovery_profile import RECOVERY_FORMAT, RecoveryProfile
from sim.faults.storage import Storage, save_storage_profile
from sim.network.fabrics import Fabric, save_profile
from sim.network.transports import Transport, save_transport
from sim.training.compute_model import save_device_profile
from sim.training.host_costs import HostProfile, save_host_profile


def stamp() -> str:
    """When and where a profile was measured: the date, this machine's name and CPUs."""
    return f"{dt.date.today().isoformat()}, {platform.node()}, {os.cpu_count()} CPUs"


def write_device(path: Path, fit: DeviceFit, points: list[dict[str, Any]], source: str, *,
                 name: str, concurrency: int, **extra: Any) -> None:
    """The device profile of ``fit`` at ``path``, with the ``points`` it was fitted to (each
    given its ``error``), ``concurrency`` (processes timed at once) and ``extra`` (how it was
    measured). Raises OSError."""
    for point, error in zip(points, fit.errors, strict=True):
        point["error"] = error
    save_device_profile(path, fit.flops_per_s, fit.overhead_s, source, fit.memory_Bps,
                        fit.lookup_s, fit.activation_Bps, name=name, points=points,
                        concurrency=concurrency, **extra)


def write_fabric(path: Path, net: str, measured: dict[str, Any],
                 fit: dict[str, Any]) -> Fabric:
    """The fabric profile of ``fit`` (:func:`~sim.calibration.fit_fabric.fit_network`'s) on
    ``net`` at ``path``, with the raw measurements; the fabric. Raises OSError."""
    shaped = {"burst_s": fit["burst_s"], "peak_Bps": fit["peak_Bps"]} if "burst_s" in fit \
        else {}
    fits = "ping-pong fits on token-bucket links" if shaped else \
        f"ping-pong, stream and {measured['algorithm']} allreduce fits"
    fabric = Fabric(f"calibrated-{net}", 8 * fit["bandwidth_Bps"], fit["latency_s"],
                    fit["overhead_s"], source=f"sim calibrate --net {net}: {fits}; {stamp()}",
                    **shaped)
    save_profile(path, fabric, source=fabric.source,
                 measurements={"raw": measured, "fit": fit})
    return fabric


def write_host(path: Path, profile: HostProfile, **measurements: Any) -> None:
    """The host profile ``profile`` at ``path``, with ``measurements`` (fits, samples, ...:
    :data:`sim.training.host_costs.MEASUREMENTS`). Raises OSError."""
    save_host_profile(path, profile, **measurements)


def write_storage(path: Path, storage: Storage, fits: dict[str, dict[str, Any]],
                  points: list[dict[str, Any]]) -> None:
    """The storage profile ``storage`` at ``path``, with its write and read latencies
    (``fits``) and the ``points`` they were fitted to. Raises OSError."""
    save_storage_profile(path, storage, write_latency_s=fits["write"]["latency_s"],
                         read_latency_s=fits["read"]["latency_s"], points=points)


def write_recovery(path: Path, profile: RecoveryProfile, points: list[dict[str, Any]]) -> None:
    """The recovery profile ``profile`` at ``path``, with each config's restart
    (``points``). Raises OSError."""
    write_profile(path, profile, RECOVERY_FORMAT, points=points)


def write_transport(path: Path, transport: Transport, measured: dict[str, Any],
                    fits: dict[str, Any]) -> None:
    """The transport profile ``transport`` at ``path``, with its measurements and fits.
    Raises OSError."""
    save_transport(path, transport, measurements=measured, fits=fits)
