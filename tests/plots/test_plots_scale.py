"""Plots that hold at the sizes people sweep (issue 47, item 2): beyond ten series the
loss figure styles and panels them by their swept keys with a legend inside the figure, and
every asked-for kind is checked before the first is drawn."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from sim.errors import UserError
from sim.plots import plot_runs
from sim.plots.facets import MAX_SERIES, facets
from sim.plots.loss import loss_figure
from sim.results import Run

GRID = {"cluster.fabric": ["ib-hdr", "eth-10g"], "cluster.workers": [1, 2, 4],
        "workload.batch": [8, 16, 32, 64]}


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory, write_tiny_run) -> list[Path]:
    """24 runs: 2 fabrics x 3 worker counts x 4 batch sizes."""
    base = tmp_path_factory.mktemp("many")
    runs = []
    for values in itertools.product(*GRID.values()):
        out = base / "_".join(map(str, values))
        write_tiny_run(out, **dict(zip(GRID, values, strict=True)),
                       **{"run.iterations": 6, "run.eval_every": 2})
        runs.append(out)
    return runs


def test_many_series_are_styled_and_paneled_by_their_keys(many: list[Path]) -> None:
    layout = facets([Run(p).config for p in many])
    assert len(many) > MAX_SERIES and layout is not None
    # dashes: the key with the fewest values; colour: the most; panels: the rest
    assert (layout.dash_key, layout.colour_key, layout.panel_keys) == (
        "cluster.fabric", "workload.batch", ("cluster.workers",))
    seen = set()
    for path in many:
        panel, look = layout.place(Run(path).config)
        assert (panel, look["color"], look["linestyle"]) not in seen  # each series its own
        seen.add((panel, look["color"], look["linestyle"]))
    assert len(seen) == 24


def test_the_legend_and_panels_stay_inside_the_figure(many: list[Path]) -> None:
    fig = loss_figure(many, "time")
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    box = fig.bbox
    assert len([ax for ax in fig.axes if ax.get_visible()]) == 3
    legend = fig.legends[0].get_window_extent(renderer)
    assert box.x0 <= legend.x0 and legend.x1 <= box.x1 and box.y0 <= legend.y0
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "cluster.fabric" in texts and "workload.batch" in texts
    # two headers and a line a value, and the note that one worker runs alike on both
    assert len([t for t in texts if t and "coincide" not in t]) == 2 + 2 + 4
    for ax in fig.axes:
        if ax.get_visible():
            extent = ax.get_tightbbox(renderer)
            assert box.x0 <= extent.x0 and extent.x1 <= box.x1 + 1


def test_few_series_keep_one_legend_entry_each(many: list[Path]) -> None:
    assert facets([Run(p).config for p in many[:4]]) is None


def test_a_kind_that_cannot_be_drawn_fails_before_any_is_drawn(many: list[Path],
                                                               tmp_path: Path) -> None:
    """`--kind loss-time,memory-time` on runs that sweep no tensor split: nothing written."""
    out = tmp_path / "plots"
    with pytest.raises(UserError, match="memory-time.*parallel.tensor"):
        plot_runs(many[:2], out, "loss-time,memory-time")
    assert not out.exists() or not any(out.iterdir())



def test_titles_agree_in_number(many: list[Path]) -> None:
    fig = loss_figure(many, "time")
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert titles[0] == "1 worker" and titles[1] == "2 workers"


def test_coinciding_series_of_a_paneled_figure_are_named_once(many: list[Path]) -> None:
    """Against updates the fabrics' losses are the same points: the legend says so, or a
    reader sees one colour where the legend promises two dash patterns (issue 47: the
    scaling sweep's loss-vs-updates figure drew 12 curves as one). One fact, one note."""
    def notes(x: str) -> list[str]:
        texts = loss_figure(many, x).legends[0].get_texts()
        return [" ".join(t.get_text().split()) for t in texts if "coincide" in t.get_text()]

    batches = "batch 8, batch 16, batch 32 and batch 64"
    assert notes("updates") == [
        f"1 worker, 2 workers and 4 workers: IB HDR and 10 GbE coincide for {batches}"]
    # against time only one worker, which sends nothing, runs alike on both fabrics
    assert notes("time") == [f"1 worker: IB HDR and 10 GbE coincide for {batches}"]
