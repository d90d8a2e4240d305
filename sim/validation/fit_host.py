"""A host cost fitted to real runs through the simulator: the rendezvous of a message beyond
the eager limit between napping ranks on a host whose ranks outnumber its cores.

LogGPS (Ino, Fujimoto and Hagihara 2001) makes a long message wait for the receiver to
answer the sender's request; a napping rank answers at its polls. The host profile charges
``rendezvous_s`` per rank beyond the cores for it, which ``sim calibrate`` measures between
two ranks that do nothing else (3 us a rank on this machine). Inside a parameter-server run
the same 24 KB push took 250 us from its post to the server having it, with the server
already waiting for it, and about as long with 1 and 3 ranks beyond the cores
(docs/measurements/validation.md): a cost per message, not per rank. So the constant
``rendezvous_base_s`` is fitted to the real runs: the value that minimises the squared log
ratio of simulated to real wire time per update over the fit's cases in which ranks napped on
shared cores (a golden-section search on its log, each point a resimulation of those cases).
Cases without such ranks do not depend on it.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.results import load_repeats
from sim.validation.matrix import Case, Matrix, case_config

if TYPE_CHECKING:
    from sim.config import Config

BOUNDS_S = (1e-7, 2e-3)  # the search range of rendezvous_base_s
STEPS = 14  # golden-section steps: the range shrinks 0.618^14 ~ 1/800 in log


def napping_shared(real_dir: Path) -> bool:
    """Whether the real ranks of ``real_dir`` napped while waiting on a host with more
    ranks than cores (where the rendezvous cost applies)."""
    summary = load_repeats(real_dir)[0].summary
    return summary.get("wait_mode") == "sleep" and \
        int(summary.get("ranks", 0)) > int(summary.get("cpus", os.cpu_count() or 1))


def wire_per_update(config: Config) -> float:
    """The simulated mean worker's wire time per update (s)."""
    from sim.simulated.engine import simulate

    summary = simulate(config).summary
    return summary["wire_s"] / summary["iterations"]


def with_rendezvous(host_json: Path, value_s: float, out: Path) -> Path:
    """A copy of the host profile ``host_json`` with ``rendezvous_base_s`` = ``value_s``."""
    data = json.loads(host_json.read_text())
    data["rendezvous_base_s"] = value_s
    data["source"] = (f"{data.get('source', '')}; rendezvous_base_s fitted to real runs' "
                      "wire times (sim validate --fit-on)")
    out.write_text(json.dumps(data, indent=2) + "\n")
    return out


def golden_section(cost: Callable[[float], float], lo: float, hi: float,
                   steps: int = STEPS) -> tuple[float, float]:
    """The minimum of a unimodal ``cost`` on [lo, hi] by golden-section search (Kiefer
    1953): (x, cost(x)), the bracket shrunk by 0.618 a step."""
    ratio = (math.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = cost(a), cost(b)
    for _ in range(steps):
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = cost(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = cost(b)
    return (a, fa) if fa <= fb else (b, fb)


def fit_rendezvous(matrix: Matrix, cases: list[Case], earlier: Path,
                   profiles: dict[str, Path], rows: dict[str, dict[str, Any]]) -> dict:
    """The ``rendezvous_base_s`` whose simulations of ``cases`` (those with napping shared
    ranks; their real wire per update from ``rows``) best match the real wire per update:
    ``{"rendezvous_base_s", "cases", "error"}`` (the rms log ratio; None without a case)."""
    real = {}
    for case in cases:
        breakdown = rows.get(case.name, {}).get("report", {}).get("breakdown", {})
        per = breakdown.get("wire_s", {}).get("per_update", {}).get("real")
        if per and napping_shared(earlier / "cases" / case.name / "real"):
            real[case.name] = per
    fitting = [c for c in cases if c.name in real]
    if not fitting:
        return {"rendezvous_base_s": None, "cases": [], "error": None}
    host = profiles["host"] / "host.json"
    with tempfile.TemporaryDirectory() as scratch:
        def cost(log_value: float) -> float:
            trial = dict(profiles)
            place = Path(scratch) / f"{log_value:.6f}"
            place.mkdir(exist_ok=True)
            with_rendezvous(host, math.exp(log_value), place / "host.json")
            trial["host"] = place
            return sum(math.log(wire_per_update(case_config(matrix, c, trial)) / real[c.name])
                       ** 2 for c in fitting)

        best, best_cost = golden_section(cost, *(math.log(b) for b in BOUNDS_S))
    return {"rendezvous_base_s": math.exp(best), "cases": [c.name for c in fitting],
            "error": math.sqrt(best_cost / len(fitting))}
