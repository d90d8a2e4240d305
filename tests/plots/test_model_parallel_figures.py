"""Model-parallel experiments' figures and tables against the result files they read.

Two tiny sweeps (a pipeline sweep of p x m x schedule; layouts of 4 ranks as coupled
D x p x t settings) run once through the command line; the bubble, schedule (Gantt) and
memory-time figures must exist, label their axes and draw the result files' own values; the
Gantt's bars must be the trace's passes. Coupled sweep keys are checked too.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import tomli_w

from sim.analysis import fastest_layouts, layouts, pipeline_bubble
from sim.cli import main
from sim.plots import plot_runs
from sim.plots.parallel_figures import (
    bubble_figure,
    bubble_rows,
    closed_form,
    layout_rows,
    memory_time_figure,
    schedule_figure,
)
from sim.results import Sweep
from sim.sweep.grid import load_sweep

# the shared split MLP (conftest's split_mlp_data) with layers wide enough for 4 tensor
# shards (16 -> 16 -> 16 -> 16 -> 4), on IB HDR, 2 updates a run
WIDE = {"workload.features": 16, "workload.hidden": [16, 16, 16], "cluster.fabric": "ib-hdr",
        "compute.device": "cpu-core", "run.iterations": 2, "run.eval_every": 2}


def _sweep(tmp_path_factory, name: str, data: dict, text: str) -> Sweep:
    """``data`` and the TOML ``text`` after it, swept in a fresh folder."""
    root = tmp_path_factory.mktemp(name)
    (root / "x.toml").write_text(tomli_w.dumps(data) + text)
    assert main(["sweep", str(root / "x.toml"), "--out", str(root / "out"), "--jobs", "1",
                 "--no-plots"]) == 0
    return Sweep(root / "out")


@pytest.fixture(scope="module")
def bubble(tmp_path_factory, split_mlp_data) -> Sweep:
    return _sweep(tmp_path_factory, "bubble", split_mlp_data(WIDE), """
[parallel]
pipeline = 2
[sweep]
"parallel.pipeline" = [2, 4]
"parallel.microbatches" = [1, 4]
"parallel.schedule" = ["gpipe", "1f1b"]
""")


@pytest.fixture(scope="module")
def layout(tmp_path_factory, split_mlp_data) -> Sweep:
    return _sweep(tmp_path_factory, "layouts",
                  split_mlp_data(WIDE, compute__device="v100"), """
[sweep]
"cluster.workers,parallel.pipeline,parallel.tensor,parallel.microbatches" = [
    [4, 1, 1, 1], [1, 4, 1, 4], [1, 1, 4, 1], [2, 2, 1, 2]]
"cluster.fabric" = ["eth-10g", "ib-hdr"]
""")


def test_bubble_rows_are_the_results_and_the_closed_form(bubble):
    rows = bubble_rows(bubble.path)
    assert len(rows) == 8
    by_name = {r["run"]: r for r in bubble.rows}
    for row in bubble.rows:
        match = [r for r in rows if r["pipeline"] == row["parallel.pipeline"]
                 and r["microbatches"] == row["parallel.microbatches"]
                 and r["schedule"] == row["parallel.schedule"]]
        assert len(match) == 1
        assert match[0]["bubble_fraction"] == row["bubble_fraction"]
        assert match[0]["peak_memory_bytes"] == row["peak_memory_bytes"]
        p, m = row["parallel.pipeline"], row["parallel.microbatches"]
        assert match[0]["closed_form"] == pytest.approx((p - 1) / (m + p - 1))
    assert by_name
    table = pipeline_bubble(bubble.path)
    assert np.allclose(table["excess"], table["bubble_fraction"] - table["closed_form"])
    assert closed_form(4, 4) == pytest.approx(3 / 7)
    # the schedule evaluated at the stages' own pass times: at least the closed form (the
    # slowest stage sets the pace), at most what was measured (messages only add idle time)
    assert (table["reference"] >= table["closed_form"] - 1e-9).all()
    assert (table["reference"] <= table["bubble_fraction"] + 1e-9).all()


def test_bubble_figure_draws_the_measured_values(bubble, tmp_path):
    rows = bubble_rows(bubble.path)
    fig = bubble_figure(bubble.path)
    bubble_ax, memory_ax = fig.axes[:2]
    assert "bubble" in bubble_ax.get_ylabel() and "microbatches" in bubble_ax.get_xlabel()
    assert "memory" in memory_ax.get_ylabel() and "microbatches" in memory_ax.get_xlabel()
    for ax, key, scale in ((bubble_ax, "bubble_fraction", 1.0),
                           (memory_ax, "peak_memory_bytes", 2.0**-20)):
        lines = {line.get_label(): line for line in ax.get_lines()}
        for p in (2, 4):
            for schedule, name in (("gpipe", "GPipe"), ("1f1b", "1F1B")):
                line = lines[f"p = {p}, {name}"]
                mine = [r for r in rows if r["pipeline"] == p and r["schedule"] == schedule]
                assert list(line.get_xdata()) == [r["microbatches"] for r in mine]
                assert np.allclose(line.get_ydata(), [r[key] * scale for r in mine])
    written = plot_runs([bubble.path], tmp_path, "bubble")
    assert {p.name for p in written} == {"bubble.png", "bubble.svg", "bubble.pdf"}
    assert all(p.stat().st_size > 0 for p in written)


def _trace_passes(run_dir) -> list[tuple[int, str, int, float, float]]:
    """The trace's F/B slices, one per layer, merged per rank when back to back."""
    events = json.loads((run_dir / "trace.json").read_text())["traceEvents"]
    raw = sorted((e["tid"], e["name"][0], int(e["name"][1:]), e["ts"] * 1e-6,
                  (e["ts"] + e["dur"]) * 1e-6) for e in events
                 if e.get("ph") == "X" and e.get("pid") == 0
                 and re.fullmatch(r"[FB]\d+", e.get("name", "")))
    merged: list[list] = []
    for s in sorted(raw, key=lambda s: (s[0], s[3])):
        if merged and merged[-1][:3] == list(s[:3]) and abs(merged[-1][4] - s[3]) < 1e-12:
            merged[-1][4] = s[4]
        else:
            merged.append(list(s))
    return [tuple(x) for x in merged]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_schedule_figure_bars_are_the_trace_passes(bubble, schedule, tmp_path):
    run_dir = bubble.path / "runs" / f"pipeline=4_microbatches=4_schedule={schedule}"
    m = 4
    fig = schedule_figure(run_dir)
    ax = fig.axes[0]
    assert "time" in ax.get_xlabel()
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"rank {r}" for r in range(4)]
    bars = []
    for collection in ax.collections:
        for path in collection.get_paths():
            xs, ys = path.vertices[:, 0], path.vertices[:, 1]
            bars.append((round(float(ys.min() + 0.38)), float(xs.min()), float(xs.max())))
    expected = []
    for rank in range(4):
        mine = [s for s in _trace_passes(run_dir) if s[0] == rank][:2 * m]
        assert sorted((s[1], s[2]) for s in mine) == sorted(
            [("F", k) for k in range(m)] + [("B", k) for k in range(m)])
        expected += [(rank, s[3], s[4]) for s in mine]
    factor = 1e3 if "(ms)" in ax.get_xlabel() else 1e6 if "(µs)" in ax.get_xlabel() else 1.0
    assert len(bars) == len(expected)
    assert np.allclose(sorted(bars), sorted((r, a * factor, b * factor)
                                            for r, a, b in expected), rtol=1e-9, atol=1e-9)
    labels = sorted(t.get_text() for t in ax.texts)
    assert labels and set(labels) <= {str(k) for k in range(m)}
    written = plot_runs([run_dir], tmp_path, "schedule")
    assert {p.name for p in written} == {"schedule.png", "schedule.svg", "schedule.pdf"}


def test_coupled_sweep_keys_spread_over_their_keys(layout):
    assert len(layout.rows) == 8
    for row in layout.rows:
        ranks = row["cluster.workers"] * row["parallel.pipeline"] * row["parallel.tensor"]
        assert ranks == 4
    assert {"cluster.workers", "parallel.pipeline", "parallel.tensor",
            "parallel.microbatches"} <= set(layout.swept)


def test_bad_coupled_sweep_values_are_refused(tmp_path, split_mlp_data):
    path = tmp_path / "x.toml"
    base = tomli_w.dumps(split_mlp_data(WIDE))
    path.write_text(base + '[sweep]\n"cluster.workers,parallel.pipeline" = [[2, 1], [1]]\n')
    with pytest.raises(Exception, match="a list of 2 values"):
        load_sweep(path)
    path.write_text(base + '[sweep]\n"cluster.workers,parallel.nope" = [[2, 1]]\n')
    with pytest.raises(Exception, match="parallel.nope"):
        load_sweep(path)
    path.write_text(base + '[sweep]\n"cluster.workers,parallel.pipeline" = [[2, 1]]\n'
                    '"cluster.workers" = [1, 2]\n')
    with pytest.raises(Exception, match="swept twice"):
        load_sweep(path)
    assert main(["sweep", str(path), "--out", str(tmp_path / "out")]) == 2


def test_memory_time_figure_draws_the_layouts(layout, tmp_path):
    rows = layout_rows(layout.path)
    assert len(rows) == 8
    assert {r["layout"] for r in rows} == {"DP 4", "PP 4", "TP 4", "DP 2 x PP 2"}
    for r in rows:  # every layout reports its memory, data parallel too
        assert r["memory_fits"] is True
    fig = memory_time_figure(layout.path)
    ax = fig.axes[0]
    assert "time per sample" in ax.get_xlabel() and "memory" in ax.get_ylabel()
    factor = {"s": 1.0, "ms": 1e3, "µs": 1e6, "ns": 1e9}[ax.get_xlabel().split("(")[1][:-1]]
    points = sorted((float(line.get_xdata()[0]), float(line.get_ydata()[0]))
                    for line in ax.get_lines() if len(line.get_xdata()) == 1
                    and line.get_linestyle() == "None")
    assert np.allclose(points, sorted((r["time_per_sample_s"] * factor,
                                       r["peak_memory_bytes"] / 2**20) for r in rows))
    by_run = {row["run"]: row for row in layout.rows}
    for r in rows:
        assert any(row["peak_memory_bytes"] == r["peak_memory_bytes"]
                   for row in by_run.values())
    best = fastest_layouts(layouts(layout.path))
    assert set(best["fabric"]) == {"eth-10g", "ib-hdr"}
    for _, b in best.iterrows():
        mine = [r for r in rows if r["fabric"] == b["fabric"]]
        assert b["time_per_sample_s"] == min(r["time_per_sample_s"] for r in mine)
    written = plot_runs([layout.path], tmp_path, "memory-time")
    assert {p.name for p in written} == {"memory-time.png", "memory-time.svg",
                                         "memory-time.pdf"}
