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

import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sim.calibrated import read_profile, write_profile_data
from sim.config import Config
from sim.results import load_repeats

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
    from sim.training.host_costs import PROFILE_FORMAT

    data = read_profile(host_json, PROFILE_FORMAT, "host profile")
    data["rendezvous_base_s"] = value_s
    data["source"] = (f"{data.get('source', '')}; rendezvous_base_s fitted to real runs' "
                      "wire times (sim validate --fit-on)")
    return write_profile_data(out, data)


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


def fit_rendezvous(runs: dict[str, tuple[Path, float | None]],
                   config_of: Callable[[str, dict[str, Path]], Config],
                   profiles: dict[str, Path]) -> dict:
    """The ``rendezvous_base_s`` whose simulations of the cases in ``runs`` (case name ->
    its real run directory and real wire time per update, s) with napping shared ranks best
    match their real wire per update; ``config_of(case, profiles)``: a case's simulation on
    ``profiles`` (those given, the host's replaced by each trial's).
    ``{"rendezvous_base_s", "cases", "error"}`` (the rms log ratio; None without a case)."""
    real = {name: per for name, (real_dir, per) in runs.items()
            if per and napping_shared(real_dir)}
    if not real:
        return {"rendezvous_base_s": None, "cases": [], "error": None}
    host = profiles["host"] / "host.json"
    with tempfile.TemporaryDirectory() as scratch:
        def cost(log_value: float) -> float:
            trial = dict(profiles)
            place = Path(scratch) / f"{log_value:.6f}"
            place.mkdir(exist_ok=True)
            with_rendezvous(host, math.exp(log_value), place / "host.json")
            trial["host"] = place
            return sum(math.log(wire_per_update(config_of(name, trial)) / per) ** 2
                       for name, per in real.items())

        best, best_cost = golden_section(cost, *(math.log(b) for b in BOUNDS_S))
    return {"rendezvous_base_s": math.exp(best), "cases": list(real),
            "error": math.sqrt(best_cost / len(real))}
