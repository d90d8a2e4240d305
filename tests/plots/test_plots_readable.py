"""Readable figures (issue 33, part 7): no series hidden under an identical one, legends
that list only what occurs, and titles, legends and axes that never overlap."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from sim import plots
from sim.plots import style as st
from sim.plots.loss import Line, coinciding, eval_curve
from sim.results import Run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, write_tiny_run) -> dict[str, Path]:
    """bsp and bsp-ps (their losses against updates are the same points), asp."""
    base = tmp_path_factory.mktemp("readable")
    out = {}
    for kind in ("bsp", "bsp-ps", "asp"):
        out[kind] = base / kind
        write_tiny_run(out[kind], **{"strategy.kind": kind})
    return out


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory, write_tiny_run,
         runs: dict[str, Path]) -> list[Path]:
    """Seven labels (a legend outside the axes, a panel each for staleness)."""
    base = tmp_path_factory.mktemp("many")
    for s in (1, 2, 3, 4):
        write_tiny_run(base / f"ssp{s}", **{"strategy.kind": "ssp", "strategy.staleness": s,
                                            "compute.distribution": "exponential"})
    return [*runs.values(), *sorted(base.iterdir())]


def legend_texts(fig) -> list[str]:
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)
    return [t.get_text() for legend in legends for t in legend.get_texts()]


def test_identical_series_are_drawn_distinguishably_and_said_to_coincide(
        runs: dict[str, Path]) -> None:
    bsp, ps = (eval_curve(Run(runs[k]), "updates") for k in ("bsp", "bsp-ps"))
    assert np.array_equal(bsp[0], ps[0]) and np.allclose(bsp[1], ps[1])  # the premise
    fig = plots.loss_figure([runs["bsp"], runs["bsp-ps"], runs["asp"]], "updates")
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()
             if line.get_xdata().size}
    a, b = lines["BSP"], lines["BSP (PS)"]
    assert a.get_marker() != b.get_marker() or a.get_linestyle() != b.get_linestyle()
    assert a.get_linestyle() != b.get_linestyle()  # the top one lets the other show through
    assert a.get_markevery() != b.get_markevery()  # markers at different points
    assert "BSP and BSP (PS) coincide" in " ".join(legend_texts(fig)).replace("\n", " ")
    assert lines["ASP"].get_marker() == "o"  # a line of its own keeps its look


def test_a_line_cut_short_on_its_twin_is_hidden_too() -> None:
    xs = np.arange(0.0, 60.0, 10.0)
    ys = 1.0 / (1.0 + xs)
    twin = Line("BSP (PS)", {"linestyle": "-"}, xs, ys)
    short = Line("BSP", {"linestyle": "-"}, np.append(xs[:3], 25.0),
                 np.append(ys[:3], np.interp(25.0, xs, ys)))
    other = Line("ASP", {"linestyle": "-"}, xs, ys + 0.2)
    assert coinciding([short, twin, other]) == [[0, 1]]


def test_breakdown_legend_lists_only_activities_that_occur(runs: dict[str, Path]) -> None:
    paths = list(runs.values())
    fig = plots.breakdown_figure(paths)
    occurring = {st.KIND_NAMES[kind] for kind in st.KIND_COLOURS
                 if any(Run(p).summary.get(f"{kind}_s", 0) > 0 for p in paths)}
    assert "compute" in occurring and "restart" not in occurring  # no faults in these runs
    names = legend_texts(fig)
    assert set(names) - {"simulated time"} == occurring
    assert len(names) == len(occurring) + 1


# ---- titles, legends and axes never overlap ----------------------------------------------

def scaling_sweep(path: Path, long: bool = False) -> Path:
    """results.csv only: 2 fabrics x 1-16 workers x 3 seeds (2 at 16 workers); ``long``:
    x 2 straggler shares x 2 server counts, labels such as ``IB HDR, 25% stragglers, 4
    servers`` (a wide legend)."""
    path.mkdir(parents=True, exist_ok=True)
    rows = ["run,cluster.fabric,compute.straggler_fraction,cluster.servers,cluster.workers,"
            "run.seed,samples_per_s"]
    for fabric, slope in (("ib-hdr", 1.0), ("eth-10g", 0.5)):
        for share in (0.0, 0.25) if long else (0.0,):
            for servers in (1, 4) if long else (1,):
                for workers in (1, 2, 4, 8, 16):
                    for seed, noise in enumerate((-1.0, 0.0, 1.0)[:3 - (workers == 16)]):
                        y = (1 - share) * servers * 100.0 * workers ** slope + noise
                        rows.append(f"{fabric}-{share}-{servers}-{workers}-{seed},{fabric},"
                                    f"{share},{servers},{workers},{seed},{y}")
    (path / "results.csv").write_text("\n".join(rows) + "\n")
    return path


def boxes(fig) -> tuple[dict[str, object], dict[str, object], dict[object, str]]:
    """The drawn boxes (display pixels) of a figure's texts (suptitle, axes titles, legends)
    and of its axes (plot area, tick labels and axis labels); an in-axes legend's axes."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts, areas, home = {}, {}, {}
    titles = list({id(t): t for t in [getattr(fig, "_suptitle", None), *fig.texts]
                   if t is not None}.values())  # the suptitle is one of fig.texts, or not
    for i, t in enumerate(titles):
        if t.get_visible() and t.get_text():
            texts[f"figure text {i} {t.get_text()!r}"] = t.get_window_extent(renderer)
    for i, legend in enumerate(fig.legends):
        texts[f"figure legend {i}"] = legend.get_window_extent(renderer)
    for a, ax in enumerate(fig.axes):
        if not ax.get_visible():
            continue
        for t in (ax.title, ax._left_title, ax._right_title):
            if t.get_text():
                texts[f"axes {a} title {t.get_text()!r}"] = t.get_window_extent(renderer)
        if ax.get_legend():
            texts[f"axes {a} legend"] = ax.get_legend().get_window_extent(renderer)
            home[f"axes {a} legend"] = f"axes {a} plot area"
        areas[f"axes {a} plot area"] = ax.get_window_extent(renderer)
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            box = axis.get_tightbbox(renderer)
            if box is not None and box.width > 0 and box.height > 0:
                areas[f"axes {a} {name} axis"] = box
    return texts, areas, home


def overlaps(fig) -> list[str]:
    """Pairs of boxes that intersect (by more than a pixel): texts with texts and with
    axes; a legend drawn inside its own axes' plot area is where it belongs."""
    texts, areas, home = boxes(fig)

    def cross(a, b) -> bool:
        return min(a.x1, b.x1) - max(a.x0, b.x0) > 1 and min(a.y1, b.y1) - max(a.y0, b.y0) > 1

    names = list(texts)
    found = [f"{m} / {n}" for i, m in enumerate(names) for n in names[i + 1:]
             if cross(texts[m], texts[n])]
    found += [f"{m} / {n}" for m in texts for n in areas
              if home.get(m) != n and cross(texts[m], areas[n])]
    return found


@pytest.mark.parametrize("kind", ["loss-time", "loss-updates", "breakdown", "staleness",
                                  "scaling"])
@pytest.mark.parametrize("size", ["few", "many"])
def test_titles_legends_and_axes_never_overlap(kind: str, size: str, runs: dict[str, Path],
                                               many: list[Path], tmp_path: Path) -> None:
    paths = list(runs.values()) if size == "few" else many
    draw = {"loss-time": lambda: plots.loss_figure(paths, "time"),
            "loss-updates": lambda: plots.loss_figure(paths, "updates"),
            "breakdown": lambda: plots.breakdown_figure(paths),
            "staleness": lambda: plots.staleness_figure(paths),
            "scaling": lambda: plots.scaling_figure(scaling_sweep(
                tmp_path / "sweep", long=size == "many"))}
    fig = draw[kind]()
    panels = kind == "staleness" and size == "many"  # a title each instead of a legend
    assert panels or len(fig.legends) + sum(bool(ax.get_legend()) for ax in fig.axes) >= 1
    assert overlaps(fig) == []


def test_a_long_breakdown_wraps_into_panels(runs: dict[str, Path], tmp_path: Path) -> None:
    names = [f"run-{i:02d}" for i in range(30)]
    for name in names:  # the same config, so each keeps its name as its label
        shutil.copytree(runs["asp"], tmp_path / name)
    fig = plots.breakdown_figure([tmp_path / name for name in names])
    panels = [ax for ax in fig.axes if ax.get_visible()]
    shown = [t.get_text() for ax in panels for t in ax.get_yticklabels()]
    assert len(panels) > 1 and all(len(ax.get_yticklabels()) <= 15 for ax in panels)
    assert shown == names  # read down each panel, then the next
    width, height = fig.get_size_inches() * st.STYLE["savefig.dpi"]
    assert height <= 1400 and height < 1.2 * width  # not a 960 x 2361 strip
    assert overlaps(fig) == []
