"""What ``sim calibrate`` prints of a host calibration: each fit with its errors and samples,
the step, waits, reload and server's code, the repeats' spread, and the warnings (a fit
off by more than :data:`~sim.calibration.report.MAX_ERROR`, other processes on the CPU)."""

from __future__ import annotations

from typing import Any

from sim.calibration.fit_host import numbers
from sim.calibration.report import MAX_ERROR
from sim.training.host_costs import HostProfile

BUSY_LOAD = 0.5  # 1-minute load average above which other processes use the CPU


def busy_warning(load: float, cpu_s: float, wall_s: float) -> list[str]:
    """Warnings when other processes were using the CPU."""
    out = []
    if load > BUSY_LOAD:
        out.append(f"warning: the 1-minute load average was {load:.2f} before calibrating "
                   "(other processes were using the CPU); the host profile may be slow")
    if wall_s > 0 and cpu_s < 0.8 * wall_s:
        out.append(f"warning: the measuring process got {cpu_s / wall_s:.0%} of a core "
                   f"({cpu_s:.2f} s CPU in {wall_s:.2f} s); other processes were using "
                   "the CPU")
    return out


def repeat_lines(profiles: list[HostProfile], median: HostProfile) -> list[str]:
    """With more than one repeat: every number whose repeats differ by more than 20%, as
    the profile's (fitted to the medians) and the repeats' range."""
    if len(profiles) == 1:
        return []
    lines = [f"  repeats  {len(profiles)}: every point above is the median of the repeats' "
             "and each fit is to the medians; numbers whose repeats differ by more than 20% "
             "(the profile's, the repeats' range):"]
    each = [numbers(p) for p in profiles]
    for name, value in numbers(median).items():
        seen = [found[name] for found in each if name in found]
        low, high = min(seen), max(seen)
        if high > 1.2 * low or (low == 0 < high):
            lines.append(f"    {name:<20} {value:.4g} ({low:.4g} .. {high:.4g})")
    return lines


def summary_line(profile: HostProfile, fabric_overhead_s: float) -> str:
    """The profile's rates and constants on one line."""
    return (f"host: copy {profile.copy_Bps / 1e9:.2f} GB/s, update "
            f"{profile.update_Bps / 1e9:.2f} GB/s, reduce {profile.reduce_Bps / 1e9:.2f} GB/s,"
            f" message {profile.message_s * 1e6:.2f} us + bytes / "
            f"{profile.message_Bps / 1e9:.2f} GB/s"
            + (f" (+ the fabric's o {fabric_overhead_s * 1e6:.2f} us)" if fabric_overhead_s
               else "")
            + f", step {profile.step_s * 1e6:.2f} us, slice {profile.slice_s * 1e3:.0f} ms"
              " (not measured)")


def fit_lines(fits: dict[str, dict[str, Any]]) -> list[str]:
    """Each size fit with its errors, then its samples."""
    lines = []
    for name, f in fits.items():
        per_row = f" + rows x {f['row_s'] * 1e6:.3f} us" if "row_s" in f else ""
        lines.append(f"  {name:<8} {f['constant_s'] * 1e6:8.2f} us{per_row} + bytes / "
                     f"{f['rate_Bps'] / 1e9:6.2f} GB/s   fit error max {f['max_error']:.1%}"
                     f" rms {f['rms_error']:.1%}")
        for s in f["samples"]:
            rows = f" ({s['rows']} rows)" if "rows" in s else ""
            lines.append(f"    {s['bytes']:>10} B{rows} {s['seconds'] * 1e6:11.2f} us  "
                         f"{s['error']:+.1%}")
    return lines


def step_and_wait_lines(profile: HostProfile, m: dict[str, Any]) -> list[str]:
    """The step, the poll, the notice and rendezvous, and the waiters' shares."""
    step, poll, rendezvous, share = m["step"], m["poll"], m["rendezvous"], m["share"]
    lines = [f"  step     {step['step_s'] * 1e6:8.2f} us per update (asp, "
             f"{step['iterations']} updates, {step['iteration_s'] * 1e6:.1f} us each)",
             f"  poll     {poll['poll_s'] * 1e6:8.2f} us per nap of a sleeping waiter "
             f"(asked {poll['nap_requested_s'] * 1e6:.0f} us; 10-90%: "
             f"{poll['p10_s'] * 1e6:.1f}-{poll['p90_s'] * 1e6:.1f} us), after "
             f"{poll['poll_spin_s'] * 1e6:.0f} us of spinning"]
    limit = profile.rendezvous_bytes
    lines.append(f"  notice   {profile.notice_base_s * 1e6:8.2f} us + "
                 f"{profile.notice_s * 1e6:.2f} us per rank beyond the cores for a "
                 f"napping rank to have a message, fit error max "
                 f"{rendezvous['notice_fit']['max_error']:.1%}; eager limit "
                 + ("none found" if limit == float("inf") else f"{limit:.0f} B")
                 + f", rendezvous +{profile.rendezvous_s * 1e6:.2f} us per rank beyond the "
                 f"cores, fit error max {rendezvous['rendezvous_fit']['max_error']:.1%}")
    for wait, name in (("spin", "spin_share"), ("sleep", "nap_share")):
        fit_ = share[wait]
        lines.append(f"  {name:<9}{fit_['share']:7.2f}    work beside k waiting ranks "
                     f"({wait}) runs 1 + k x {fit_['share']:.2f} times slower: measured "
                     + ", ".join(f"k={k}: {f:.2f}x" for k, f in zip(
                         share["waiters"], fit_["slowdowns"], strict=True))
                     + f", fit error max {fit_['max_error']:.1%}")
    return lines


def reload_lines(profile: HostProfile, reload: dict[str, Any]) -> list[str]:
    """The reload transient's fit and its points."""
    return [f"  reload   {profile.reload_base_s * 1e6:8.2f} us + "
            f"{profile.reload_s * 1e6:.2f} us x (1 - exp(-gap / "
            f"{profile.reload_tau_s * 1e3:.2f} ms)) more for the first work after a gap: "
            "measured " + ", ".join(
                f"{g * 1e3:g} ms: {e * 1e6:+.0f} us" for g, e in zip(
                    reload["gaps_s"], reload["extra_s"], strict=True))
            + f", fit error max {reload['max_error']:.1%}",
            f"  reload_spin {profile.reload_spin_base_s * 1e6:5.2f} us + the same curve "
            "after spinning as long: measured " + ", ".join(
                f"{g * 1e3:g} ms: {e * 1e6:+.0f} us" for g, e in zip(
                    reload["gaps_s"], reload["spin_extra_s"], strict=True))
            + f", fit error max {reload['spin_max_error']:.1%}"]


def message_reload_line(profile: HostProfile, measured: dict[str, Any]) -> str:
    """The message path's reload after a rank's own work: the fit and its points."""
    errors = [abs(e) for e in measured["errors"] if e is not None]
    return (f"  message reload {profile.message_reload_s * 1e6:.2f} us x (1 - exp(-work / "
            f"{profile.message_reload_tau_s * 1e3:.2f} ms)) more for a message after the "
            "rank's own work: measured " + ", ".join(
                f"{w * 1e3:g} ms: {e * 1e6:+.0f} us" for w, e in zip(
                    measured["works_s"], measured["extra_s"], strict=True))
            + f", fit error max {max(errors, default=0.0):.1%}")


def serving_line(profile: HostProfile, serving: dict[str, Any]) -> str:
    """A parameter server's own code per push, step and pull (``profile``'s), and the fit's
    error (``serving``: the measurement printed)."""
    return (f"  serve    {profile.serve_apply_s * 1e6:8.2f} us a push applied (asp), "
            f"{profile.serve_push_s * 1e6:.2f} us a push kept and "
            f"{profile.serve_step_s * 1e6:.2f} us a step closed (bsp-ps), "
            f"{profile.serve_pull_s * 1e6:.2f} us a pull, beyond their kernels; fit error "
            f"max {serving['max_error']:.1%}")


def fit_warnings(m: dict[str, Any]) -> list[str]:
    """A warning for every fit off by more than MAX_ERROR: the size fits, the waiters'
    shares, the reload, and notice and rendezvous."""
    warnings = []
    for name, f in m["fits"].items():
        if f["max_error"] > MAX_ERROR:
            warnings.append(f"warning: the {name} fit is off by up to {f['max_error']:.0%} "
                            f"(over {MAX_ERROR:.0%}); its rate is a rough one")
    for wait, name in (("spin", "spin_share"), ("sleep", "nap_share")):
        fit_ = m["share"][wait]
        if fit_["max_error"] > MAX_ERROR:
            warnings.append(f"warning: the {name} fit is off by up to "
                            f"{fit_['max_error']:.0%} (over {MAX_ERROR:.0%})")
    reload = m["reload"]
    if reload["max_error"] > MAX_ERROR:
        warnings.append(f"warning: the reload fit is off by up to {reload['max_error']:.0%} "
                        f"(over {MAX_ERROR:.0%})")
    for name in ("notice", "rendezvous"):
        fit_ = m["rendezvous"][f"{name}_fit"]
        if fit_["max_error"] > MAX_ERROR:
            warnings.append(f"warning: the {name} fit is off by up to "
                            f"{fit_['max_error']:.0%} (over "
                            f"{MAX_ERROR:.0%}): the delay does not grow in proportion to "
                            "the ranks beyond the cores here")
    return warnings

