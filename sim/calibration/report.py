"""What a calibration says: each phase's fitted values and errors, the warnings (a fit off by
more than :data:`MAX_ERROR`, other processes on the CPUs), and the config line that uses the
profile.

:func:`sim.calibration.sequence.calibrate` tells a report when a phase starts and what it
measured; :class:`Printed` prints everything (``sim calibrate``: the lines on stdout, the
warnings on stderr), :class:`Progress` says which phase runs (``sim validate`` and
``sim real --twin``, whose reports come later). The host's lines are
:mod:`sim.calibration.host_report`'s.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sim.training.compute_model import describe_rates

MAX_ERROR = 0.10  # a fit whose error is larger gets a warning
# the phases warned of when other processes were busy (the host's lines carry their own
# warning, busy_warning)
LOAD_WARNED = ("compute", "network", "transport")


class Progress:
    """Says (``say``) which phase starts, and the restarts' lines once measured."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say

    def starting(self, phase: str, what: Any) -> None:
        """``phase`` starts; ``what``: the workloads, the network or the configs."""
        self.say({"compute": lambda: f"calibrating compute on {len(what)} workload(s)",
                  "network": lambda: f"calibrating network {what}",
                  "host": lambda: "calibrating the host's CPU costs",
                  "recovery": lambda: f"calibrating checkpoints and restarts ({len(what)} "
                                      "config(s))",
                  "transport": lambda: "calibrating the gRPC transport"}[phase]())

    def measured(self, phase: str, found: dict[str, Any]) -> None:
        """``phase`` measured ``found`` (:func:`~sim.calibration.sequence.calibrate`'s)."""
        if phase == "recovery":
            for line in found["lines"]:
                self.say(line)


class Printed:
    """Prints each phase's values, points and config line (stdout) and warnings (stderr);
    ``phase``: the phase running (that a failure is reported against)."""

    phase: str | None = None

    def starting(self, phase: str, what: Any) -> None:
        self.phase = phase

    def measured(self, phase: str, found: dict[str, Any]) -> None:
        if phase in LOAD_WARNED:
            warn_load(phase, found["other_load"])
        if phase == "compute":
            device_lines(found["device"], found["points"], found["path"])
        elif phase == "network":
            network_lines(found["net"], found["fit"], found["fabric"], found["path"])
        else:
            print("\n".join(found["lines"]))
        if phase == "transport":
            warn_fit("transport", found["errors"])


def device_lines(device: dict[str, Any], points: list[dict[str, Any]], path: Path) -> None:
    """Print the device fitted to microbenchmarks: its rates, each point's error, the
    config line; warnings when a point is off or the fit is not determined."""
    rates = describe_rates(device["flops_per_s"], device["overhead_s"], device["memory_Bps"],
                           device["lookup_s"], device["activation_Bps"])
    print(f"compute: {rates} "
          f"(fit errors {min(device['errors']):+.1%} .. {max(device['errors']):+.1%})")
    for p in points:
        print(f"  {p['workload']:<34} {p['seconds'] * 1e6:9.1f} us  {p['error']:+.1%}")
    warn_fit("compute", [(p["workload"], p["error"]) for p in points])
    warn_undetermined(device, len(points))
    print(f'  compute.device = "calibrated:{path}"')


def network_lines(net: str, fit: dict[str, Any], fabric: Any, path: Path) -> None:
    """Print the fabric fitted on ``net``: alpha, bandwidth, o and latency, each point's
    error, the config line; a warning when a fitted point is off."""
    errors = [p["error"] for p in fit["points"] if "not fitted" not in p["what"]]
    buckets = (f", token buckets of {fabric.burst_s * 1e3:.3g} ms at a peak of "
               f"{fabric.peak_Bps / 1e9:.3f} GB/s" if fabric.shaped else "")
    print(f"network ({net}): alpha {fit['alpha_s'] * 1e6:.2f} us, "
          f"{fabric.bandwidth_Bps / 1e9:.3f} GB/s{buckets}, o {fit['overhead_s'] * 1e6:.2f} us, "
          f"latency {fit['latency_s'] * 1e6:.2f} us/hop "
          f"(fit errors {min(errors):+.0%} .. {max(errors):+.0%})")
    for p in fit["points"]:
        print(f"  {p['what']:<41} {p['measured_s'] * 1e6:11.1f} us  {p['error']:+.0%}")
    warn_fit("network", [(p["what"], p["error"]) for p in fit["points"]
                         if "not fitted" not in p["what"]])
    print(f'  cluster.fabric = "calibrated:{path}"')


def recovery_lines(fits: dict[str, dict[str, Any]], points: list[dict[str, Any]],
                   restart_s: float, restarts: list[dict[str, Any]], out: Path) -> list[str]:
    """The storage fits with their points, the restarts, warnings and the config lines."""
    lines, warnings = ["storage (checkpoint files):"], []
    for kind, fit in fits.items():
        lines.append(f"  {kind:<5} {fit['latency_s'] * 1e6:9.1f} us + bytes / "
                     f"{fit['rate_Bps'] / 1e6:9.1f} MB/s (fit errors {min(fit['errors']):+.1%}"
                     f" .. {max(fit['errors']):+.1%})")
        if fit["max_error"] > MAX_ERROR:
            warnings.append(f"warning: the checkpoint {kind} fit is off by up to "
                            f"{fit['max_error']:.0%} (over {MAX_ERROR:.0%}); its figures are "
                            "rough ones")
    for p in points:
        lines.append(f"    {p['bytes']:>10} B  write {p['write_s'] * 1e3:8.3f} ms "
                     f"{p['write_error']:+6.1%}  read {p['read_s'] * 1e3:8.3f} ms "
                     f"{p['read_error']:+6.1%}")
    lines.append(f"restart: {restart_s:.3f} s (kill to the resumed job's start, minus the read)")
    for p in restarts:
        spans = p["restart_time_s"]
        lines.append(f"  {p['workload']:<34} {p['ranks']} ranks: {p['restart_s']:.3f} s "
                     f"(measured {min(spans):.3f} .. {max(spans):.3f} s, read "
                     f"{p['read_s'] * 1e3:.2f} ms)")
    return lines + warnings + [f'  checkpoint.storage = "calibrated:{out / "storage.json"}"',
                               f"  faults.restart_s = {restart_s:.3f}"]


def from_runs_lines(device: dict[str, Any], prior: Path | None, path: Path) -> None:
    """Print the device fitted to real runs' in-run gradient times (``prior``: the device
    it was pulled towards), each point's error and runs, the config line."""
    rates = describe_rates(device["flops_per_s"], device["overhead_s"], device["memory_Bps"],
                           device["lookup_s"], device["activation_Bps"])
    print(f"compute, from in-run gradient times: {rates}"
          + (f" (pulled weakly towards {prior})" if prior else ""))
    for p in device["points"]:
        print(f"  {p['workload']:<34} {p['seconds'] * 1e6:9.1f} us  {p['error']:+.1%}  "
              f"({p['runs']} run(s))")
    warn_fit("compute", [(p["workload"], p["error"]) for p in device["points"]])
    print(f'  compute.device = "calibrated:{path}"')


def serving_lines(fit: dict[str, Any], cases: int, prior: Path, out: Path) -> None:
    """Print the server's code fitted to real runs (``cases`` of them, the rest of the host
    as in ``prior``): each constant, each case's error, the config line."""
    print(f"host, the server's code from the servers' time per update in {cases} "
          f"case(s) (the rest as in {prior}):")
    for name, value in fit["values"].items():
        print(f"  {name:<14} {value * 1e6:7.1f} us")
    for p in fit["points"]:
        real = sum(p["real_s"].values())
        print(f"  {p['runs']:<50} {real * 1e6:8.1f} us an update  {p['error']:+.1%}")
    warn_fit("server's code", [(p["runs"], p["error"]) for p in fit["points"]])
    print(f'  cluster.host = "calibrated:{out}"')


def warn_fit(name: str, errors: list[tuple[str, float]]) -> None:
    """A warning on stderr when a fit misses a measured point by more than ``MAX_ERROR``."""
    what, worst = max(errors, key=lambda e: abs(e[1]), default=("", 0.0))
    if abs(worst) > MAX_ERROR:
        print(f"warning: the {name} fit is off by {worst:+.0%} at {what} (more than "
              f"{MAX_ERROR:.0%}): the machine may have been busy, or the model does not "
              "fit this machine; rerun (without --quick) before trusting it", file=sys.stderr)


def warn_undetermined(device: dict, points: int) -> None:
    """A warning on stderr when the device fit has as many terms as points: it then goes
    through them whatever the terms' values, and a rate may be far from the device's."""
    terms = 1 + (device["overhead_s"] > 0) + sum(
        device[key] is not None for key in ("memory_Bps", "activation_Bps", "lookup_s"))
    if points <= terms:
        print(f"warning: the compute fit has {terms} terms for {points} points, so its rates "
              "are not each determined (it only reproduces the workloads timed); time more "
              "workloads (the default set, or more --workload) before simulating others",
              file=sys.stderr)


def warn_load(name: str, other: float) -> None:
    """A warning on stderr when other processes took more than ``MAX_OTHER_LOAD`` of the
    CPUs while ``name`` was measured (their time would be measured as this machine's)."""
    from sim.real.launch.other_load import MAX_OTHER_LOAD

    if other > MAX_OTHER_LOAD:
        print(f"warning: other processes used {other:.0%} of the CPUs while the {name} "
              "costs were measured; rerun on a quiet machine", file=sys.stderr)
