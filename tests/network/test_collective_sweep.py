"""``python -m sim collective`` as a sweep like nccl-tests: sizes, counts, bandwidths, the
table, the CSV and the busbw plot."""

from __future__ import annotations

import csv
import json
import tracemalloc
from pathlib import Path

import pytest
from matplotlib.colors import to_hex

from sim.cli import build_parser, main
from sim.commands.collective import sweep
from sim.network import nccl
from sim.network.collectives import REGISTRY as COLLECTIVES
from sim.network.fabrics import REGISTRY as FABRICS
from sim.network.message_cost import alpha_s
from sim.plots.collective_sweep import binary_label, draw, read_points, size_ticks
from sim.plots.style import figure


def sweep_json(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict]:
    assert main(["collective", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_sizes_are_nccl_tests_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    assert nccl.sizes(8, 2**30, 2) == [8 * 2**k for k in range(28)]
    assert nccl.sizes(8, 1000, 4) == [8, 32, 128, 512]  # max need not be on the sequence
    assert nccl.sizes(5, 5, 2) == [5]
    assert [nccl.parse_size(s) for s in ("8", "1K", "64k", "4M", "1G", "1.5K", "1MB", "1MiB")] \
        == [8, 1024, 65536, 4 * 2**20, 2**30, 1536, 10**6, 2**20]
    rows = sweep_json(capsys, "--min-bytes", "8", "--max-bytes", "1G", "--factor", "2",
                      "--workers", "2", "--model", "analytical")
    assert [r["size_bytes"] for r in rows] == [8 * 2**k for k in range(28)]
    assert [r["count"] for r in rows] == [2 * 2**k for k in range(28)]  # floats
    assert {r["type"] for r in rows} == {"float"}


def test_ring_allreduce_busbw_is_the_closed_form_on_an_idle_switch(capsys) -> None:
    p, fabric = 8, FABRICS["ib-edr"]
    rows = sweep_json(capsys, "--fabric", "ib-edr", "--algorithms", "ring", "--workers", str(p),
                      "--min-bytes", "8", "--max-bytes", "1M")
    assert len(rows) == 18
    for row in rows:
        size = row["size_bytes"]
        closed_s = 2 * (p - 1) * alpha_s(fabric) + 2 * (p - 1) / p * size / fabric.bandwidth_Bps
        assert row["time_us"] == pytest.approx(closed_s * 1e6, rel=1e-9)
        assert row["closed_form_us"] == pytest.approx(closed_s * 1e6, rel=1e-12)
        assert row["algbw_GBps"] == pytest.approx(size / (row["time_us"] * 1e-6) / 1e9,
                                                  rel=1e-12)
        assert row["busbw_GBps"] == pytest.approx(2 * (p - 1) / p * row["algbw_GBps"],
                                                  rel=1e-12)
        assert row["busbw_GBps"] < row["injection_GBps"] == fabric.bandwidth_Bps / 1e9


def test_allgather_sizes_round_as_nccl_tests(capsys: pytest.CaptureFixture[str]) -> None:
    # each rank's count: (S / 4 bytes // 8 ranks) rounded down to 4 floats (16 bytes)
    rows = sweep_json(capsys, "--algorithms", "ring-allgather", "--workers", "8",
                      "--min-bytes", "8", "--max-bytes", "512", "--model", "analytical")
    assert [r["size_bytes"] for r in rows] == [0, 0, 0, 0, 128, 256, 512]
    assert [r["count"] for r in rows] == [0, 0, 0, 0, 4, 8, 16]
    assert rows[0]["algbw_GBps"] == rows[0]["busbw_GBps"] == 0.0
    assert rows[0]["time_us"] > 0  # an empty allgather still pays its latency
    for row in rows[4:]:
        assert row["busbw_GBps"] == pytest.approx(7 / 8 * row["algbw_GBps"], rel=1e-12)
    double = sweep_json(capsys, "--algorithms", "ring-allgather", "--workers", "8",
                        "--min-bytes", "96", "--max-bytes", "96", "--datatype", "double")
    assert (double[0]["count"], double[0]["size_bytes"]) == (0, 0)  # 12 // 8 = 1, even: 0


def test_every_registered_collective_has_nccl_tests_counting() -> None:
    assert {cls.kind for cls in COLLECTIVES.values()} <= set(nccl.CALL_COUNTS)


def test_collective_names_expand_to_their_algorithms(capsys) -> None:
    rows = sweep_json(capsys, "--algorithms", "allreduce,ring", "--workers", "4",
                      "--max-bytes", "64", "--model", "analytical")
    allreduce = [name for name, cls in COLLECTIVES.items() if cls.kind == "allreduce"]
    assert list(dict.fromkeys(r["algorithm"] for r in rows)) == allreduce
    rows = sweep_json(capsys, "--algorithms", "all", "--workers", "4", "--max-bytes", "8",
                      "--model", "analytical")
    assert [r["algorithm"] for r in rows] == list(COLLECTIVES)
    assert {r["busbw_GBps"] / r["algbw_GBps"] for r in rows if r["collective"] == "broadcast"} \
        == {1.0}


def test_table_has_nccl_tests_columns(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--fabric", "ib-hdr,eth-100g", "--algorithms", "ring,tree", "--workers", "4",
            "--min-bytes", "1K", "--max-bytes", "1M", "--factor", "4"]
    rows = sweep_json(capsys, *argv)
    assert main(["collective", *argv]) == 0
    blocks = capsys.readouterr().out.strip().split("\n\n")
    assert [b.splitlines()[0] for b in blocks] == [
        f"# {algo} allreduce on {fabric}: 4 ranks, star topology, flow model"
        for fabric in ("ib-hdr", "eth-100g") for algo in ("ring", "tree")]
    for i, block in enumerate(blocks):
        lines = block.splitlines()
        assert lines[2] == "#       size         count      type     time   algbw   busbw"
        assert lines[3] == "#        (B)    (elements)               (us)  (GB/s)  (GB/s)"
        mine = rows[6 * i: 6 * (i + 1)]
        assert lines[4:-1] == [
            f"{r['size_bytes']:12d}  {r['count']:12d}     float  {nccl.number(r['time_us'], 7)}"
            f"  {nccl.number(r['algbw_GBps'], 6)}  {nccl.number(r['busbw_GBps'], 6)}"
            for r in mine]
        average = sum(r["busbw_GBps"] for r in mine) / len(mine)
        assert lines[-1] == f"# Avg bus bandwidth    : {average:g}"


def test_numbers_take_nccl_tests_widths() -> None:
    assert nccl.number(126.0, 7) == " 126.00"
    assert nccl.number(10791.44, 7) == "10791.4"
    assert nccl.number(1234567.8, 7) == "1234568"
    assert nccl.number(12345678.9, 7) == "1.2e+07"
    assert nccl.number(0.001, 6) == "  0.00"
    assert nccl.number(24.4949, 6) == " 24.49"


def test_a_gibibyte_point_allocates_no_gibibyte(capsys) -> None:
    argv = ["collective", "--workers", "8", "--json", "--min-bytes"]
    assert main([*argv, "8", "--max-bytes", "8"]) == 0  # imports and caches before measuring
    capsys.readouterr()
    tracemalloc.start()
    try:
        assert main([*argv, "1G", "--max-bytes", "1G"]) == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    (row,) = json.loads(capsys.readouterr().out)
    assert row["size_bytes"] == 2**30
    assert peak < 16 * 2**20


@pytest.mark.parametrize("argv, flag", [
    (["--min-bytes", "0"], "--min-bytes"),
    (["--min-bytes", "8X"], "--min-bytes"),
    (["--max-bytes", "lots"], "--max-bytes"),
    (["--max-bytes", "2T"], "--max-bytes"),
    (["--max-bytes", "4TiB"], "--max-bytes"),
    (["--min-bytes", "2K", "--max-bytes", "1K"], "--min-bytes"),
    (["--min-bytes", "1.0001K"], "--min-bytes"),
    (["--factor", "1"], "--factor"),
    (["--factor", "1.5"], "--factor"),
    (["--factor", "two"], "--factor"),
    (["--datatype", "float128"], "--datatype"),
    (["--algorithms", "ring,nope"], "--algorithms"),
    (["--algorithms", "ring,"], "--algorithms"),
    (["--algo", "tree", "--algorithms", "ring"], "--algorithms"),
    (["--algorithms", "ring", "--bytes", "1MB"], "--bytes"),
    (["--algorithms", "ring", "--workers", "1"], "--workers"),
    (["--algorithms", "ring", "--servers", "2"], "--servers"),
    (["--fabric", "ib-hdr,ib-xdr"], "--fabric"),
    (["--fabric", "ib-hdr,"], "--fabric"),
    (["--algorithms", "ring", "--model", "packet"], "--model"),
])
def test_bad_sweep_options_exit_2_naming_the_option(capsys, argv: list[str], flag: str) -> None:
    assert main(["collective", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {flag}: ")
    assert err.count("\n") == 1  # one line, no traceback


def test_out_must_be_a_directory(capsys, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    assert main(["collective", "--max-bytes", "8", "--out", str(tmp_path / "file")]) == 2
    assert capsys.readouterr().err.startswith("error: --out: ")


def write_csv(path: Path, *argv: str) -> Path:
    """``path``/collective.csv of the sweep ``argv`` describes, as --out writes it (without
    rendering the figure files, which takes seconds)."""
    points = sweep(build_parser("collective").parse_args(["collective", *argv]))
    path.mkdir(parents=True, exist_ok=True)
    (path / "collective.csv").write_text(nccl.csv_text(points))
    return path / "collective.csv"


def test_out_writes_the_csv_and_the_plot(capsys, tmp_path: Path) -> None:
    argv = ["--algorithms", "ring,tree", "--workers", "4", "--max-bytes", "1K",
            "--model", "analytical"]
    rows = sweep_json(capsys, *argv)
    assert main(["collective", *argv, "--out", str(tmp_path)]) == 0
    assert {"collective.csv", "collective.png", "collective.svg"} <= \
        {p.name for p in tmp_path.iterdir()}
    assert capsys.readouterr().out.splitlines()[-1].startswith(
        f"wrote {tmp_path / 'collective.csv'}, {tmp_path / 'collective.png'}")
    with (tmp_path / "collective.csv").open(newline="") as handle:
        written = list(csv.DictReader(handle))
    assert tuple(written[0]) == nccl.COLUMNS
    assert written == [{k: str(v) for k, v in row.items()} for row in rows]


def test_plot_draws_a_line_per_algorithm_and_fabric(tmp_path: Path) -> None:
    points = read_points(write_csv(tmp_path, "--fabric", "ib-hdr,eth-100g", "--workers", "8",
                                   "--algorithms", "ring,tree,recursive-doubling",
                                   "--min-bytes", "8", "--max-bytes", "1M"))
    assert len(points) == 2 * 3 * 18
    with figure(9.4, 4.0) as fig:
        draw(fig, points)
        ax = fig.axes[0]
        lines = {line.get_label(): line for line in ax.get_lines()}
        algos = ("ring", "tree", "recursive-doubling")
        expected = [f"{a}, {f}" for f in ("ib-hdr", "eth-100g") for a in algos]
        bounds = [f"{f} host injection ({FABRICS[f].bandwidth_Bps / 1e9:.3g} GB/s)"
                  for f in ("ib-hdr", "eth-100g")]
        assert list(lines) == expected + bounds
        for label in expected:
            algo, fabric = label.split(", ")
            mine = [p for p in points if (p["algorithm"], p["fabric"]) == (algo, fabric)]
            assert list(lines[label].get_xdata()) == [p["size_bytes"] for p in mine]
            assert list(lines[label].get_ydata()) == [p["busbw_GBps"] for p in mine]
        # colour tells the algorithm, the dash pattern the fabric
        colour = {label: to_hex(lines[label].get_color()) for label in expected}
        assert len({colour[f"{a}, ib-hdr"] for a in algos}) == 3
        assert all(colour[f"{a}, ib-hdr"] == colour[f"{a}, eth-100g"] for a in algos)
        assert {lines[f"ring, {f}"].get_linestyle() for f in ("ib-hdr", "eth-100g")} \
            == {"-", "--"}
        assert ax.get_xscale() == "log" and ax.xaxis.get_transform().base == 2
        assert [t.get_text() for t in ax.get_xticklabels()] == ["32 B", "1 KiB", "32 KiB",
                                                                "1 MiB"]
        assert ax.get_ylabel() == "bus bandwidth (GB/s)"
        assert ax.get_ylim()[0] == 0
        legend = fig.legends[0] if fig.legends else ax.get_legend()
        assert [t.get_text() for t in legend.get_texts()] == expected + bounds


def test_one_fabric_labels_name_the_algorithm_only(tmp_path: Path) -> None:
    path = write_csv(tmp_path, "--workers", "4", "--algorithms", "ring,ring-allgather",
                     "--max-bytes", "128", "--model", "analytical")
    with figure(6.4, 4.0) as fig:
        draw(fig, read_points(path))
        # the allgather's sizes below 4 ranks x 16 bytes are 0: off the log axis
        (allgather,) = [ln for ln in fig.axes[0].get_lines() if ln.get_label() ==
                        "ring-allgather"]
        assert list(allgather.get_xdata()) == [64, 128]
        assert [ln.get_label() for ln in fig.axes[0].get_lines()] == [
            "ring", "ring-allgather", "host injection (24.5 GB/s)"]


def test_size_ticks_and_labels() -> None:
    assert [binary_label(n) for n in (8, 512, 1024, 1536, 2**20, 2**30)] == \
        ["8 B", "512 B", "1 KiB", "1.5 KiB", "1 MiB", "1 GiB"]
    labelled, minor = size_ticks(8, 2**30)
    assert labelled == [2**e for e in (5, 10, 15, 20, 25, 30)]
    assert sorted(labelled + minor) == [2**e for e in range(3, 31)]
    assert size_ticks(8, 64) == ([8, 16, 32, 64], [])
    assert size_ticks(1000, 1000) == ([1000], [])


def test_read_points_names_a_bad_file(tmp_path: Path) -> None:
    from sim.errors import UserError

    with pytest.raises(UserError, match="collective.csv: cannot read"):
        read_points(tmp_path / "collective.csv")
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(UserError, match="other.csv: expected collective.csv rows"):
        read_points(tmp_path / "other.csv")
