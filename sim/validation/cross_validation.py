"""Cross-validation of profiles fitted to real runs (``sim validate --resimulate DIR
--fit-on AXIS=LEVEL``): fit on some cases, predict the others.

The device is fitted to the real runs of the cases with the ``--fit-on`` levels (as
``--only`` selects: levels of one axis add up, axes narrow;
:mod:`sim.calibration.from_runs`); every case of the earlier validation is then simulated
again on the microbenchmark profiles it was calibrated with, on the same profiles with the
fitted device, with the server's own code fitted to the same runs' server times too
(:mod:`sim.calibration.fit_serving`), and with the host's rendezvous cost fitted to their
wire times as well (:mod:`sim.calibration.fit_rendezvous`), and the errors are split into
the cases the fit saw (in-sample) and the rest (held out). A model change is judged by the
held-out column: a fit that only learns its own cases shows there. With ``--spread SEEDS``
each case with real kernels is also simulated SEEDS times on the fitted profiles, drawing
its gradients' times with the spread measured in the fit's runs and each run's machine speed
with the spread of their repeats (:mod:`sim.validation.run_speed`), and the report says how
often the real mean falls inside the predicted 90% interval (issue 31's item 4).
``OUT/README.md`` has the table; ``OUT/microbenchmarks/``, ``OUT/from-runs/``,
``OUT/from-runs-serving/`` and ``OUT/from-runs-rendezvous/`` each the full report of one
resimulation.
"""

from __future__ import annotations

import shutil
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sim.calibration.fit_rendezvous import fit_rendezvous, with_rendezvous
from sim.calibration.fit_serving import fit_serving, with_serving
from sim.errors import UserError
from sim.rundir import write_atomic
from sim.training.compute_model import describe_rates
from sim.validation.matrix import case_config, expand, load_matrix, stored_profiles
from sim.validation.resimulate import earlier_rows, resimulate_matrix
from sim.validation.run_speed import run_sigma

DEVICE = "device from runs"
SERVING = "device and server's code from runs"
BOTH = "device, server's code and rendezvous from runs"


def error_stats(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Cases, median and worst |error|, mean signed error, within 15% (None: no case)."""
    errors = [r["report"]["iteration_s"]["error"] for r in rows if "report" in r]
    if not errors:
        return None
    return {"cases": len(errors), "median": statistics.median(map(abs, errors)),
            "worst": max(map(abs, errors)), "mean": statistics.fmean(errors),
            "within_15": sum(abs(e) <= 0.15 for e in errors)}


def _cell(stats: dict[str, Any] | None) -> str:
    if stats is None:
        return "- | - | - | -"
    return (f"{stats['median']:.1%} | {stats['worst']:.1%} | {stats['mean']:+.1%} | "
            f"{stats['within_15']}/{stats['cases']}")


def _rendezvous_words(fit: dict[str, Any] | None) -> str:
    if not fit or fit["rendezvous_base_s"] is None:
        return "; no case of the fit had napping ranks on shared cores: no rendezvous fitted"
    return (f", and the host's rendezvous_base_s fitted to the wire per update of the "
            f"{len(fit['cases'])} case(s) whose ranks napped on shared cores: "
            f"{fit['rendezvous_base_s'] * 1e6:.1f} us a message beyond the eager limit "
            f"(rms log ratio {fit['error']:.2f})")


def _serving_words(fit: dict[str, Any] | None) -> str:
    if not fit or fit["values"] is None:
        return ("; no case of the fit had a parameter server with a core per rank: the "
                "server's code not fitted")
    values = ", ".join(f"{name} {value * 1e6:.1f} us" for name, value in fit["values"].items())
    errors = ", ".join(f"{Path(p['runs']).parent.name} {p['error']:+.1%}"
                       for p in fit["points"])
    return (f"; the server's own code fitted to the servers' time per update in "
            f"{len(fit['points'])} case(s) with a core per rank: {values} (each case's "
            f"error: {errors})")


def coverage(rows: list[dict[str, Any]]) -> tuple[int, int]:
    """(cases whose real mean lies inside their predicted 90% interval, cases with one)."""
    spread = [r["spread"] for r in rows if "spread" in r]
    return sum(s["inside"] for s in spread), len(spread)


def lines(runs: dict[str, list[dict[str, Any]]], fitted: set[str], fit_on: list[str],
          device: dict[str, Any]) -> list[str]:
    """The README: per profile, in-sample and held-out errors side by side."""
    out = ["# Cross-validation: profiles fitted to real runs", "",
           f"The device fitted to the real runs of the {len(fitted)} case(s) with "
           f"{', '.join(fit_on)}, pulled weakly towards the microbenchmark device "
           "(in-run gradient times: " + describe_rates(
               device["flops_per_s"], device["overhead_s"], device["memory_Bps"],
               device.get("lookup_s"), device.get("activation_Bps")) + "; each point's error: "
           + ", ".join(f"{p['workload']} {p['error']:+.1%}" for p in device["points"])
           + ")" + _serving_words(device.get("serving"))
           + _rendezvous_words(device.get("rendezvous"))
           + ", against the microbenchmark profiles of the same validation. Every case is "
           "simulated again on each; in-sample: the cases the fit saw; held out: the rest. "
           "Columns: median |error|, worst |error|, mean signed error, within 15%.", "",
           "| profiles | in-sample median | worst | mean | within 15% | held-out median | "
           "worst | mean | within 15% |", "|---|---|---|---|---|---|---|---|---|"]
    for label, rows in runs.items():
        inside = [r for r in rows if r["case"] in fitted]
        held = [r for r in rows if r["case"] not in fitted]
        out.append(f"| {label} | {_cell(error_stats(inside))} | {_cell(error_stats(held))} |")
    drawn = next((label for label in (SERVING, DEVICE) if any(
        "spread" in r for r in runs.get(label, []))), None)
    if drawn:
        spread = next(r["spread"] for r in runs[drawn] if "spread" in r)
        inside = [r for r in runs[drawn] if r["case"] in fitted]
        held = [r for r in runs[drawn] if r["case"] not in fitted]
        (a, n), (b, m) = coverage(inside), coverage(held)
        out += ["", f"Predicted spread ({drawn}): each case with real kernels simulated with "
                f"{spread['seeds']} seeds, every gradient's time drawn from a lognormal of "
                f"shape {spread['sigma']:.3f} (the spread of single gradients inside the "
                f"fit's real runs) and each run's host and device slower or faster by a "
                f"factor drawn from a lognormal of shape {spread['speed_sigma']:.3f} (the "
                "spread of the fit's repeats' CPU time per update around their case's mean): "
                f"the real mean lies inside the predicted 90% interval in **{a}/{n}** "
                f"in-sample and **{b}/{m}** held-out cases (target: 80-95%)."]
    return out + ["", "Full reports: `microbenchmarks/`, `from-runs/` (the device), "
                  "`from-runs-serving/` (and the server's code) and `from-runs-rendezvous/` "
                  "(and the rendezvous), each `README.md`.", ""]


def real_wire(earlier: Path, cases: list[str]) -> dict[str, tuple[Path, float | None]]:
    """Each of ``cases``' real run directory in the validation ``earlier`` and its real
    wire time per update (s; None where its row has none)."""
    rows = earlier_rows(earlier)
    return {name: (earlier / "cases" / name / "real", rows.get(name, {}).get("report", {})
                   .get("breakdown", {}).get("wire_s", {}).get("per_update", {}).get("real"))
            for name in cases}


def cross_validate(matrix_path: Path, earlier: Path, out: Path, only: list[str] | None,
                   profiles_dir: Path | None, fit_on: list[str],
                   say: Callable[[str], None] = print,
                   seeds: int = 0) -> dict[str, list[dict[str, Any]]]:
    """Fit the device on the ``fit_on`` cases' real runs, simulate every case again on the
    microbenchmark and the fitted profiles; the rows of each (``OUT/README.md`` written).
    Raises UserError."""
    from sim.calibration.from_runs import real_run_dirs, write_device_from_runs

    matrix = load_matrix(matrix_path)
    base = profiles_dir or earlier / "profiles"
    fit_cases = [c for c in expand(matrix, fit_on, "--fit-on")
                 if (earlier / "cases" / c.name / "real").is_dir()]
    fitted = {c.name for c in fit_cases}
    if not fitted:
        raise UserError(f"--fit-on {' '.join(fit_on)}: no case with those levels has real "
                        f"runs in {earlier}")
    if out.exists() and any(out.iterdir()):
        raise UserError(f"{out}: already holds results; choose another --out")
    profiles = out / "profiles"  # the earlier ones, but for the device fitted to runs
    reals = real_run_dirs(earlier / "cases" / name / "real" for name in fitted)
    device = write_device_from_runs(profiles / "device" / "device.json", reals,
                                    base / "device" / "device.json")
    shutil.copytree(base, profiles, dirs_exist_ok=True,
                    ignore=lambda folder, names: ["device"] if Path(folder) == base else [])
    runs = {"microbenchmarks": resimulate_matrix(matrix_path, earlier, out / "microbenchmarks",
                                                 None, only, base, say)}
    say(f"fitting the server's code to the servers' times in {len(fit_cases)} case(s)' "
        "real runs")
    device["serving"] = fit_serving(reals, profiles / "host" / "host.json")
    device["run_sigma"] = run_sigma(reals)
    spread = ((seeds, device["in_run_sigma"], device["run_sigma"] or 0.0)
              if seeds and device["in_run_sigma"] else None)
    served = device["serving"]["values"] is not None
    runs[DEVICE] = resimulate_matrix(matrix_path, earlier, out / "from-runs", None, only,
                                     profiles, say, None if served else spread)
    if served:
        serving = out / "profiles-serving"  # the device and the server's code fitted
        shutil.copytree(profiles, serving)
        with_serving(profiles / "host" / "host.json", device["serving"],
                     serving / "host" / "host.json")
        runs[SERVING] = resimulate_matrix(matrix_path, earlier, out / "from-runs-serving",
                                          None, only, serving, say, spread)
        profiles = serving
    say(f"fitting rendezvous_base_s to the wire of {len(fit_cases)} case(s)' real runs")
    stored = stored_profiles(profiles, sorted({c.net for c in fit_cases}))
    by_name = {c.name: c for c in fit_cases}
    device["rendezvous"] = fit_rendezvous(
        real_wire(earlier, list(by_name)),
        lambda name, trial: case_config(matrix, by_name[name], trial), stored)
    if device["rendezvous"]["rendezvous_base_s"] is not None:
        both = out / "profiles-rendezvous"  # and the host's rendezvous fitted too
        shutil.copytree(profiles, both)
        with_rendezvous(both / "host" / "host.json",
                        device["rendezvous"]["rendezvous_base_s"], both / "host" / "host.json")
        runs[BOTH] = resimulate_matrix(matrix_path, earlier, out / "from-runs-rendezvous",
                                       None, only, both, say)
    write_atomic(out / "README.md", "\n".join(lines(runs, fitted, fit_on, device)))
    return runs
