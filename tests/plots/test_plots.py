"""Plots from saved result files: what each figure shows (series, labels, scales, colours,
line styles), the files (PNG, SVG with text, PDF with TrueType fonts), determinism, bad
input and the command line."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_hex

from sim import cli, plots
from sim.errors import UserError
from sim.plots import style as st
from sim.plots.gantt import window_end
from sim.plots.loss import eval_curve, mean_band, parse_xlim
from sim.plots.sweeplines import sweep_lines
from sim.results import Run
from sim.rundir import write_run
from sim.stats import mean_ci

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
KINDS = ("bsp", "bsp-ps", "asp", "ssp")


def copy_run(src: Path, out: Path, stretch: float = 1.0, **summary: object) -> Path:
    """A copy of a run with its times multiplied by ``stretch`` and ``summary`` keys set
    (``kind="real", clock="wall"`` make it read as a real run)."""
    files = {p.name: p.read_text() for p in src.iterdir() if p.is_file()}
    values = json.loads(files["summary.json"])
    values.update(summary, sim_time_s=values["sim_time_s"] * stretch)
    files["summary.json"] = json.dumps(values)
    rows = list(csv.reader(files["metrics.csv"].splitlines()))
    for row in rows[1:]:
        row[1] = repr(float(row[1]) * stretch)
    files["metrics.csv"] = "".join(",".join(r) + "\n" for r in rows)
    write_run(out, files)
    return out


def write_results(sweep: Path, rows: list[dict]) -> Path:
    sweep.mkdir(parents=True, exist_ok=True)
    with open(sweep / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return sweep


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory, write_tiny_run) -> dict[str, Path]:
    """Four strategy runs, a sweep (fabric x workers x 2 seeds), two real repeats of the
    bsp run, and a timing-only sweep, on disk."""
    base = tmp_path_factory.mktemp("results")
    runs = {}
    for kind in KINDS:
        runs[kind] = base / kind
        write_tiny_run(runs[kind], **{"strategy.kind": kind, "strategy.staleness": 3,
                                      "compute.distribution": "exponential"})
    sweep, rows = base / "sweep", []
    for fabric in ("ib-hdr", "eth-10g"):
        for workers in (1, 2, 4):
            for seed in (0, 1):
                name = f"fabric={fabric}_workers={workers}_seed={seed}"
                summary = write_tiny_run(sweep / "runs" / name, **{
                    "cluster.fabric": fabric, "cluster.workers": workers, "run.seed": seed,
                    "strategy.kind": "asp"})
                scalars = {k: v for k, v in summary.items() if not isinstance(v, list | dict)}
                rows.append({"run": name, "cluster.fabric": fabric, "cluster.workers": workers,
                             "run.seed": seed, **scalars})
    write_results(sweep, rows)
    real = base / "real"
    for i, stretch in enumerate((1.3, 1.5)):
        copy_run(runs["bsp"], real / f"r{i}", stretch, kind="real", clock="wall")
    timing = base / "timing"
    summary = write_tiny_run(timing / "runs" / "one", **{
        "workload.profile": "resnet50", "workload.numerics": False, "run.iterations": 4})
    write_results(timing, [{"run": "one", "run.seed": 0, **{
        k: v for k, v in summary.items() if not isinstance(v, list | dict)}}])
    return {**runs, "sweep": sweep, "real": real, "timing": timing}


def strategy_runs(results: dict[str, Path]) -> list[Path]:
    return [results[k] for k in KINDS]


def assert_figures(paths: list[Path], stems: list[str]) -> None:
    """PNG, SVG and PDF for each stem: valid, text kept as text (SVG ``<text>``, PDF
    TrueType fonts, no Type 3), nothing half-written beside them."""
    assert sorted(p.name for p in paths) == sorted(f"{s}.{e}" for s in stems
                                                   for e in ("png", "svg", "pdf"))
    for path in paths:
        data = path.read_bytes()
        if path.suffix == ".png":
            assert data.startswith(PNG_MAGIC) and len(data) > 5000, path
        elif path.suffix == ".svg":
            root = ET.fromstring(data)
            assert root.tag.endswith("svg") and root.iter("{http://www.w3.org/2000/svg}text")
            assert b"<text" in data, path
        else:
            assert data.startswith(b"%PDF") and b"/FontFile2" in data, path  # Type 42
            assert b"/Type3" not in data, path
        assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]


def legend_texts(fig) -> list[str]:
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)
    return [t.get_text() for legend in legends for t in legend.get_texts()]


def labelled_lines(ax) -> dict:
    """Legend label -> its data line (a plain line, or an error-bar plot's line)."""
    lines = {line.get_label(): line for line in ax.get_lines()
             if not line.get_label().startswith("_")}
    return {**lines, **{c.get_label(): c.lines[0] for c in ax.containers
                        if hasattr(c, "has_yerr")}}


# ---- files --------------------------------------------------------------------------------

def test_figures_are_png_svg_pdf_with_real_text_and_deterministic(results: dict[str, Path],
                                                                     tmp_path: Path) -> None:
    first = plots.plot_runs(strategy_runs(results), tmp_path / "a", "loss-time,staleness")
    assert_figures(first, ["loss-time", "staleness"])
    svg = (tmp_path / "a" / "loss-time.svg").read_text()
    assert "Held-out loss vs simulated time" in svg and "SSP (s = 3)" in svg
    second = plots.plot_runs(strategy_runs(results), tmp_path / "b", "loss-time,staleness")
    assert [p.name for p in first] == [p.name for p in second]
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_plots_need_only_result_files(results: dict[str, Path], tmp_path: Path) -> None:
    """A copied sweep plots in a process where the simulator cannot even be imported."""
    copy = tmp_path / "copied"
    shutil.copytree(results["sweep"], copy, ignore=shutil.ignore_patterns("plots"))
    code = ("import sys\n"
            "for name in ('sim.simulated', 'sim.real', 'sim.training.rules',"
            " 'sim.training.workload', 'sim.network', 'sim.kernels', 'sim.config', 'simpy'):\n"
            "    sys.modules[name] = None\n"
            "from sim.plots import plot_sweep\n"
            f"print(len(plot_sweep({str(copy)!r})))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "15"  # loss-time, loss-updates, breakdown, staleness,
    # scaling: three formats each


# ---- loss curves ------------------------------------------------------------------------------

def test_loss_lines_name_the_strategies_in_their_own_colours(results: dict[str, Path]) -> None:
    fig = plots.loss_figure(strategy_runs(results), "time")
    ax = fig.axes[0]
    lines = labelled_lines(ax)
    assert list(lines) == ["BSP", "BSP (PS)", "ASP", "SSP (s = 3)"]
    assert legend_texts(fig) == list(lines)
    assert len({line.get_color() for line in lines.values()}) == 4
    assert {line.get_linestyle() for line in lines.values()} == {"-"}
    assert ax.get_xscale() == "linear"  # spans within 30x of each other
    assert ax.get_xlabel() == "simulated time (µs)" and ax.get_ylabel() == "held-out loss"
    xs, ys = eval_curve(Run(results["asp"]), "time")
    assert np.allclose(lines["ASP"].get_xdata(), xs * 1e6)  # in µs
    assert np.array_equal(lines["ASP"].get_ydata(), ys)
    assert not ax.collections  # one run per line: no band


def test_seeds_are_drawn_as_their_mean_and_95_percent_band(results: dict[str, Path]) -> None:
    fig = plots.loss_figure([results["sweep"]], "updates")
    ax = fig.axes[0]
    lines = labelled_lines(ax)
    assert list(lines) == [f"{w} worker{'s' * (w > 1)}, {f}" for f in ("IB HDR", "10 GbE")
                           for w in (1, 2, 4)]
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 6  # one per configuration, in its line's colour
    assert [to_hex(b.get_facecolor()[0][:3]) for b in bands] == \
        [to_hex(line.get_color()) for line in lines.values()]
    seeds = [Run(results["sweep"] / "runs" / f"fabric=ib-hdr_workers=2_seed={s}")
             for s in (0, 1)]
    curves = [eval_curve(r, "updates") for r in seeds]
    line = lines["2 workers, IB HDR"]
    assert np.array_equal(line.get_xdata(), curves[0][0])  # same evaluation points
    point = mean_ci([curves[0][1][3], curves[1][1][3]])
    assert line.get_ydata()[3] == pytest.approx(point.mean)
    x, mean, low, high = mean_band(curves)
    assert (high - mean)[3] == pytest.approx(point.half_width)  # 12.71 s.e. for 2 seeds
    assert "mean of 2 seeds, band: 95% CI" in ax.get_title()
    # styles: colour per worker count, dashes per fabric
    assert [line.get_linestyle() for line in lines.values()] == ["-"] * 3 + ["--"] * 3


def test_mean_band_covers_the_span_every_seed_reaches() -> None:
    a = (np.array([0.0, 1.0, 2.0, 3.0]), np.array([4.0, 3.0, 2.0, 1.0]))
    b = (np.array([0.0, 1.5, 2.5]), np.array([6.0, 3.0, 1.0]))
    x, mean, low, high = mean_band([a, b])
    assert x.tolist() == [0.0, 1.0, 1.5, 2.0, 2.5]  # both runs' points up to b's last
    assert mean[0] == 5.0 and mean[2] == pytest.approx((2.5 + 3.0) / 2)
    assert high[0] - mean[0] == pytest.approx(12.706 * 1.0)  # s.e. 1 with 2 seeds
    assert mean_band([a, (np.array([5.0, 6.0]), np.array([1.0, 1.0]))]) is None


def test_a_real_run_is_dashed_in_its_simulated_twins_colour(results: dict[str, Path]) -> None:
    fig = plots.loss_figure([results["bsp"], results["real"]], "time")
    ax = fig.axes[0]
    lines = labelled_lines(ax)
    assert list(lines) == ["sim", "real"]  # not "r0"
    assert lines["sim"].get_color() == lines["real"].get_color()
    assert (lines["sim"].get_linestyle(), lines["real"].get_linestyle()) == ("-", "--")
    assert ax.get_xlabel() == "simulated (sim) / wall-clock (real) time (µs)"
    assert fig.texts[0].get_text() == "Held-out loss vs time"
    assert len(ax.collections) == 1  # the two real repeats: their mean and band
    real_only = plots.loss_figure([results["real"]], "time").axes[0]
    assert real_only.get_xlabel().startswith("wall-clock time")
    assert list(labelled_lines(real_only)) == ["real"]
    timeline = plots.gantt_figure(Run(results["real"] / "r0")).axes[0]
    assert timeline.get_xlabel().startswith("wall-clock time")


def test_the_time_axis_turns_log_when_spans_differ(results: dict[str, Path],
                                                   tmp_path: Path) -> None:
    slow = copy_run(results["asp"], tmp_path / "slow", stretch=100.0)  # 100x the span
    runs = [results["asp"], slow]
    ax = plots.loss_figure(runs, "time").axes[0]
    assert ax.get_xscale() == "log" and ax.get_xlabel().endswith("log scale)")
    assert min(line.get_xdata().min() for line in ax.get_lines()) > 0  # t = 0 left out
    assert plots.loss_figure(runs, "time", logx=False).axes[0].get_xscale() == "linear"
    assert plots.loss_figure(strategy_runs(results), "updates",
                             logx=True).axes[0].get_xscale() == "log"
    end = float(Run(results["asp"]).summary["sim_time_s"])
    zoomed = plots.loss_figure(runs, "time", xlim=(0.0, end)).axes[0]
    assert zoomed.get_xscale() == "linear"  # starts at 0: stays linear
    assert zoomed.get_xlim() == pytest.approx((0.0, end * 1e6))  # in the axis unit, µs
    seen = eval_curve(Run(results["asp"]), "time")[1]
    bottom, top = zoomed.get_ylim()
    assert bottom <= seen.min() and top >= seen.max() and top - bottom < 1.2 * np.ptp(seen)
    with pytest.raises(UserError, match="a log x axis needs LO > 0"):
        plots.loss_figure(runs, "time", logx=True, xlim=(0.0, end))


def test_xlim_text_is_checked() -> None:
    assert parse_xlim("0,0.005") == (0.0, 0.005)
    assert parse_xlim("1e-4,") == (1e-4, None) and parse_xlim(",2") == (None, 2.0)
    for bad in ("5,1", "a,b", "1", "1,2,3", ",", "nan,1", "1,1"):
        with pytest.raises(UserError, match=re.escape(f"--xlim {bad}: expected LO,HI")):
            parse_xlim(bad)


def test_timing_only_runs_get_no_empty_loss_plot(results: dict[str, Path],
                                                 tmp_path: Path) -> None:
    notes: list[str] = []
    paths = plots.plot_sweep(results["timing"], notes)
    assert_figures(paths, ["breakdown"])
    assert notes == [plots.NO_LOSS]
    notes.clear()
    assert_figures(plots.plot_runs([results["timing"]], tmp_path, "all", notes=notes),
                   ["staleness", "breakdown", "gantt-one"])
    assert notes == [plots.NO_LOSS]
    with pytest.raises(UserError, match="no held-out loss evaluations"):
        plots.plot_runs([results["timing"]], tmp_path, "loss-time")


# ---- staleness, breakdown, timeline -----------------------------------------------------------

def test_staleness_bars_never_hide_an_identical_histogram(results: dict[str, Path]) -> None:
    fig = plots.staleness_figure(strategy_runs(results))
    ax = fig.axes[0]
    assert legend_texts(fig) == ["BSP", "BSP (PS)", "ASP", "SSP (s = 3)"]
    bars = {c.get_label(): list(c) for c in ax.containers}
    bsp, bsp_ps = bars["BSP"][0], bars["BSP (PS)"][0]  # both: every update at staleness 0
    assert bsp.get_height() == bsp_ps.get_height() == 100.0
    assert bsp.get_x() + bsp.get_width() <= bsp_ps.get_x()  # side by side, not on top
    colours = {label: to_hex(b[0].get_facecolor()) for label, b in bars.items()}
    loss_colours = {k: to_hex(v.get_color()) for k, v in labelled_lines(
        plots.loss_figure(strategy_runs(results)).axes[0]).items()}
    assert colours == loss_colours  # one colour per strategy in every figure
    asp = np.array([b.get_height() for b in bars["ASP"]])
    staleness = Run(results["asp"]).staleness
    assert asp[:len(np.bincount(staleness))] == pytest.approx(
        100 * np.bincount(staleness) / len(staleness))


def test_staleness_of_many_runs_gets_a_panel_each(results: dict[str, Path]) -> None:
    fig = plots.staleness_figure([results["sweep"]])
    titled = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert titled[:2] == ["1 worker, IB HDR", "2 workers, IB HDR"] and len(titled) == 6


def test_breakdown_bars_add_up_each_runs_time(results: dict[str, Path]) -> None:
    fig = plots.breakdown_figure(strategy_runs(results))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["BSP", "BSP (PS)", "ASP",
                                                            "SSP (s = 3)"]
    compute = [p for p in ax.patches if to_hex(p.get_facecolor()) == st.KIND_COLOURS["compute"]]
    summaries = [Run(results[k]).summary for k in KINDS]
    factor = 1e6 if ax.get_xlabel().endswith("(µs)") else 1e3
    assert [p.get_width() for p in compute] == pytest.approx(
        [s["compute_s"] * factor for s in summaries])
    assert "simulated time" in legend_texts(fig)


def test_gantt_one_per_run_and_window(results: dict[str, Path], tmp_path: Path) -> None:
    paths = plots.plot_gantt([str(results["bsp"]), results["asp"]], tmp_path, max_slices=5)
    assert_figures(paths, ["gantt-bsp", "gantt-asp"])
    ax = plots.gantt_figure(Run(results["ssp"]), window_s=1e-5).axes[0]
    assert ax.get_xlabel() == "simulated time (µs)" and ax.get_xlim() == (0, 10.0)
    colours = {to_hex(c.get_facecolor()[0]) for c in ax.collections}  # a worker's kind each
    assert colours <= set(st.KIND_COLOURS.values()) and to_hex(
        st.KIND_COLOURS["compute"]) in colours
    slices = [(0, "compute", 0.0, 1.0), (1, "compute", 0.5, 1.0), (0, "comm", 1.0, 2.0),
              (0, "compute", 2.0, 3.0)]
    assert window_end(slices, 2) == 2.0  # worker 0's third slice starts at 2 s
    assert window_end(slices, 3) == 3.0  # everything fits: the whole run


# ---- sweeps: scaling, pipelining, buckets --------------------------------------------------

def fake_scaling(tmp_path: Path) -> Path:
    """results.csv only: 2 fabrics x 1, 2, 4, 8 workers x 3 seeds, known throughputs."""
    rows = []
    for fabric, slope in (("ib-hdr", 1.0), ("eth-10g", 0.5)):
        for workers in (1, 2, 4, 8):
            for seed, noise in enumerate((-1.0, 0.0, 1.0)):
                rows.append({"run": f"{fabric}-{workers}-{seed}", "cluster.fabric": fabric,
                             "cluster.workers": workers, "run.seed": seed,
                             "samples_per_s": 100.0 * workers ** slope + noise})
    return write_results(tmp_path / "scaling", rows)


def test_scaling_is_log_log_with_a_straight_ideal_and_95_bars(tmp_path: Path) -> None:
    sweep = fake_scaling(tmp_path)
    fig = plots.scaling_figure(sweep)
    tp, sp = fig.axes
    assert [(ax.get_xscale(), ax.get_yscale()) for ax in (tp, sp)] == [("log", "log")] * 2
    assert legend_texts(fig) == ["IB HDR", "10 GbE", "ideal (linear in workers)"]
    ideal = labelled_lines(sp)["ideal (linear in workers)"]
    slope = np.diff(np.log(ideal.get_ydata())) / np.diff(np.log(ideal.get_xdata()))
    assert slope == pytest.approx(np.ones(3))  # a straight line of slope 1 in log-log
    line = tp.containers[0]  # IB HDR: mean throughput and its error bars
    assert line.lines[0].get_ydata() == pytest.approx([100.0, 200.0, 400.0, 800.0])
    half = mean_ci([-1.0, 0.0, 1.0]).half_width  # t(2) = 4.303 standard errors
    segments = line.lines[2][0].get_segments()
    assert [s[1][1] - s[0][1] for s in segments] == pytest.approx([2 * half] * 4)
    assert "mean of 3 seeds, bars: 95% CI" in fig.texts[0].get_text()
    assert_figures(plots.plot_scaling(sweep, tmp_path / "out"), ["scaling"])


def test_seeds_that_agree_are_not_titled_with_bars(tmp_path: Path) -> None:
    """A timing-only sweep's seeds give one throughput: no bars show, so the title does not
    promise them (issue 47's walkthrough)."""
    rows = [{"run": f"{w}-{s}", "cluster.workers": w, "run.seed": s,
             "samples_per_s": 100.0 * w} for w in (1, 2) for s in (0, 1, 2)]
    fig = plots.scaling_figure(write_results(tmp_path / "alike", rows))
    assert "3 seeds alike: no spread to draw" in fig.texts[0].get_text()
    assert "bars" not in fig.texts[0].get_text()


def test_sweep_lines_average_seeds_per_configuration() -> None:
    rows = [{"cluster.fabric": f, "cluster.workers": w, "run.seed": s, "y": w * 10.0 + s}
            for f in ("ib-hdr", "eth-10g") for w in (2, 1) for s in (0, 1)]
    rows.append({"cluster.fabric": "ib-hdr", "cluster.workers": 4, "run.seed": 0, "y": None})
    lines = sweep_lines(rows, ["cluster.fabric"], "cluster.workers", "y")
    assert [line.label for line in lines] == ["IB HDR", "10 GbE"]
    assert lines[0].xs.tolist() == [1.0, 2.0] and lines[0].mean.tolist() == [10.5, 20.5]
    assert lines[0].runs.tolist() == [2, 2]  # the row without y is left out
    assert lines[0].half == pytest.approx([mean_ci([10, 11]).half_width] * 2)


def test_pipelining_and_bucket_figures_name_modes_and_fabrics(tmp_path: Path) -> None:
    rows = []
    for mode in ("none", "wfbp", "bucket"):
        for fabric, ratio in (("ib-hdr", 0.2), ("eth-10g", 4.0)):
            for bucket in (1e5, 25e6):
                for seed in (0, 1):
                    rows.append({"run": f"{mode}-{fabric}-{bucket}-{seed}",
                                 "strategy.pipelining": mode, "cluster.fabric": fabric,
                                 "strategy.bucket_bytes": bucket, "run.seed": seed,
                                 "pipelining_ratio": ratio, "iter_s": 0.01 + ratio * 1e-3,
                                 "speedup_vs_none": 1.0 if mode == "none" else 1.2 + seed})
    sweep = write_results(tmp_path / "pipe", rows)
    fig = plots.pipelining_figure(sweep)
    ax = fig.axes[0]
    assert legend_texts(fig)[1:3] == ["no pipelining, IB HDR", "no pipelining, 10 GbE"]
    lines = labelled_lines(ax)
    assert lines["WFBP, IB HDR"].get_color() == lines["WFBP, 10 GbE"].get_color()
    assert lines["WFBP, 10 GbE"].get_linestyle() == "--"  # dashes per fabric
    assert lines["WFBP, IB HDR"].get_ydata() == pytest.approx([1.7, 1.7])  # each bucket size:
    # the mean of its seeds, 1.2 and 2.2
    assert ax.get_xscale() == "log"
    buckets = plots.buckets_figure(sweep).axes[0]
    assert (buckets.get_xscale(), buckets.get_yscale()) == ("log", "log")
    assert "WFBP, 10 GbE" in labelled_lines(buckets)
    assert_figures(plots.plot_pipelining(sweep, tmp_path / "o"), ["pipelining"])


def test_plot_sweep_writes_the_standard_figures(results: dict[str, Path]) -> None:
    paths = plots.plot_sweep(results["sweep"])
    assert {p.parent for p in paths} == {results["sweep"] / "plots"}
    assert_figures(paths, ["loss-time", "loss-updates", "breakdown", "staleness", "scaling"])


def test_plot_runs_all_kinds(results: dict[str, Path], tmp_path: Path) -> None:
    paths = plots.plot_runs([results["bsp"], results["asp"]], tmp_path, "all")
    stems = ["loss-time", "loss-updates", "staleness", "breakdown",
             "gantt-bsp", "gantt-asp"]  # no sweep: no scaling with "all"
    assert_figures(paths, stems)
    assert set(plots.KINDS) == {"loss-time", "loss-updates", "staleness", "gantt", "breakdown",
                                "scaling", "pipelining", "buckets", "checkpoint-interval",
                                "schedule", "bubble", "memory-time", "placements",
                                "transports"}


# ---- the sim-vs-real report ------------------------------------------------------------------

def test_report_figure_in_the_common_style_with_its_legend_clear(results: dict[str, Path],
                                                                  tmp_path: Path) -> None:
    from sim.validation.compare_plot import plot_report, report_figure
    from sim.validation.sim_vs_real import compare

    report = json.loads(json.dumps(compare(results["bsp"], results["real"])))  # as on disk
    fig = report_figure(report)
    loss, iteration, staleness, breakdown = fig.axes
    sim, real = loss.get_lines()
    assert sim.get_color() == real.get_color()
    assert (sim.get_linestyle(), real.get_linestyle()) == ("-", "--")
    assert loss.get_xlabel() == "simulated (sim) / wall-clock (real) time (µs)"
    assert legend_texts(fig)[:2] == ["sim", "real"]
    assert fig.texts[0].get_text().startswith("BSP, 3 workers: simulated (IB HDR) vs real")
    sim_bar, real_bar = iteration.patches[:2]
    assert real_bar.get_hatch() and not sim_bar.get_hatch()
    fig.canvas.draw()
    box = fig.legends[0].get_window_extent()
    for ax in fig.axes:  # the legend sits under the panels, never over a bar
        assert not box.overlaps(ax.get_window_extent()), ax.get_title()
    assert_figures(plot_report(report, tmp_path), ["report"])


# ---- bad input ---------------------------------------------------------------------------------

def test_bad_input_names_the_path(results: dict[str, Path], tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(UserError, match=re.escape(str(missing))):
        plots.plot_loss_time([missing], tmp_path / "out")
    with pytest.raises(UserError, match=re.escape(f"{tmp_path}: neither a run")):
        plots.plot_breakdown([tmp_path], tmp_path / "out")
    broken = tmp_path / "broken"
    shutil.copytree(results["bsp"], broken)
    (broken / "summary.json").write_text("{not json")
    with pytest.raises(UserError, match=re.escape(str(broken / "summary.json"))):
        plots.plot_breakdown([broken], tmp_path / "out")
    (broken / "trace.json").unlink()
    with pytest.raises(UserError, match=re.escape(str(broken / "trace.json"))):
        plots.plot_gantt([broken], tmp_path / "out")
    with pytest.raises(UserError, match="results.csv: cluster.workers is not swept"):
        no_workers = tmp_path / "sweep"
        no_workers.mkdir()
        (no_workers / "results.csv").write_text("run,cluster.fabric\nx,ib-hdr\n")
        plots.plot_scaling(no_workers, tmp_path / "out")
    with pytest.raises(UserError, match="--kind nope"):
        plots.plot_runs([results["bsp"]], tmp_path / "out", "loss-time,nope")
    with pytest.raises(UserError, match="--kind scaling"):
        plots.plot_runs([results["bsp"]], tmp_path / "out", "scaling")


# ---- the command line ------------------------------------------------------------------------

def test_cli_plot(results: dict[str, Path], tmp_path: Path,
                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "figs"
    argv = ["plot", str(results["bsp"]), str(results["asp"]), "--out", str(out),
            "--kind", "loss-time,breakdown", "--logx"]
    assert cli.main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{s}.{e}" for s in ("breakdown", "loss-time") for e in ("png", "svg", "pdf"))
    assert "loss-time.png" in capsys.readouterr().out
    assert cli.main(["plot", str(results["real"]), "--out", str(out), "--kind", "gantt",
                     "--window-s", "2e-5"]) == 0
    assert sorted(p.name for p in out.glob("gantt-*.png")) == ["gantt-r0.png", "gantt-r1.png"]
    assert cli.main(["plot", str(results["timing"]), "--out", str(out)]) == 0
    assert f"note: {plots.NO_LOSS}" in capsys.readouterr().out
    assert cli.main(["plot", str(results["bsp"]), "--kind", "gantt", "--window-s", "0"]) == 2
    assert "--window-s 0.0: expected a positive" in capsys.readouterr().err
    assert cli.main(["plot", str(tmp_path / "nowhere")]) == 2
    assert f"{tmp_path / 'nowhere'}: no such directory" in capsys.readouterr().err
    assert cli.main(["plot", str(results["bsp"]), "--kind", "pie"]) == 2
    assert "--kind pie: unknown plot kind" in capsys.readouterr().err
    for xlim, message in (("5,1", "--xlim 5,1: expected LO,HI"),
                          ("0,1", "--xlim 0,1: a log x axis (--logx) needs LO > 0")):
        assert cli.main(["plot", str(results["bsp"]), "--logx", "--xlim", xlim]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1
    assert not (results["bsp"] / "plots").exists()  # bad options fail before any work
