"""A notebook's set-up: its figure style and results directory, and showing its figures."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from sim.analysis.frames import PathLike
from sim.errors import UserError

#: The checkout this module belongs to (holds ``sim/`` and ``experiments/``).
CHECKOUT = Path(__file__).resolve().parents[2]


class NotebookPaths(NamedTuple):
    """Where a notebook reads and writes (:func:`setup_notebook`)."""

    root: Path  # the checkout
    experiments: Path  # root / "experiments": the experiment configs
    runs: Path  # this notebook's results directory (it exists)


def setup_notebook(name: str, quick: bool | None = None,
                   root: PathLike | None = None) -> NotebookPaths:
    """What every notebook does first: draw figures in :data:`sim.plots.style.STYLE` (at
    100 dpi) and choose, create and print where the notebook ``name`` writes results.

    ``quick`` (default: ``SGD_LAB_QUICK=1`` in the environment) is the small form the tests
    run. Results go to ``$SGD_LAB_RUNS/NAME`` if set, else to a fresh temporary directory
    (quick) or ``ROOT/runs/notebooks/NAME``. ``root`` defaults to this module's checkout.
    Raises UserError for a ``name`` that is not one plain path component, a root without
    ``experiments/``, or a results directory that cannot be created (naming it).
    """
    import matplotlib

    from sim.plots.style import STYLE

    if not name or name in (".", "..") or Path(name).name != name or "\\" in name:
        raise UserError(f"setup_notebook: name must be one path component, got {name!r}")
    quick = os.environ.get("SGD_LAB_QUICK") == "1" if quick is None else quick
    checkout = Path(root).resolve() if root is not None else CHECKOUT
    experiments = checkout / "experiments"
    if not experiments.is_dir():
        raise UserError(f"{experiments}: missing (start the notebook inside a checkout of "
                        "sgd-lab, or pass root=)")
    base = os.environ.get("SGD_LAB_RUNS")
    if base:
        runs = Path(base) / name
    elif quick:
        runs = Path(tempfile.mkdtemp(prefix="sgd-lab-")) / name
    else:
        runs = checkout / "runs" / "notebooks" / name
    try:
        runs.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{runs}: cannot create the results directory: {exc}") from None
    matplotlib.rcParams.update({**STYLE, "figure.dpi": 100})
    print(f"results in {runs}" + ("  (quick form)" if quick else ""))
    return NotebookPaths(checkout, experiments, runs)


def show(paths: PathLike | Sequence[PathLike]) -> list[Path]:
    """Display in the notebook the PNG images among ``paths`` (what a ``sim.plots``
    function returns: PNG and SVG of each figure) and return them; other files are skipped.
    Raises UserError naming a PNG that does not exist."""
    from IPython.display import Image, display

    items = [paths] if isinstance(paths, str | Path) else list(paths)
    shown = [Path(p) for p in items if Path(p).suffix.lower() == ".png"]
    for path in shown:
        if not path.is_file():
            raise UserError(f"{path}: no such image")
        display(Image(filename=str(path)))
    return shown
