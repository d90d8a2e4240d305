"""Calibration, comparison and the validation matrix; schedules and fits on known data."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from sim.calibration.fit_device import fit_device
from sim.calibration.fit_fabric import fit_network
from sim.cli import main
from sim.faults.timeline import GAP_KINDS
from sim.network.collectives import get_collective
from sim.network.fabrics import get_fabric
from sim.real.executors.rank_collectives import rank_rounds
from sim.recorder import KINDS
from sim.training.compute_model import load_device
from sim.validation.matrix import expand, load_matrix
from sim.validation.validate_report import pipelining_speedups

pytest.importorskip("mpi4py")


@pytest.fixture
def tiny(two_rank_config_data) -> dict:
    """The shared two-rank workload under asp, 0.5 ms a gradient, 20 updates (an eval every
    5) and a target loss of 0.6."""
    return two_rank_config_data({"strategy.kind": "asp", "compute.time_s": 5e-4,
                                 "run.iterations": 20, "run.eval_every": 5,
                                 "run.target_loss": 0.6})


@pytest.mark.parametrize("algorithm", ["ring", "rabenseifner", "recursive-doubling", "tree"])
@pytest.mark.parametrize("p", [2, 3, 4])
def test_rank_rounds_are_the_schedule_seen_by_each_rank(algorithm, p):
    schedule = get_collective(algorithm).schedule(p, 10)
    sent = sum(len(r.sends) for rank in range(p) for r in rank_rounds(algorithm, p, 10, rank))
    received = sum(len(r.recvs) for rank in range(p)
                   for r in rank_rounds(algorithm, p, 10, rank))
    total = sum(len(schedule.round(i)) for i in range(schedule.n_rounds))
    assert sent == received == total


def test_device_fit_recovers_rate_and_overhead():
    points = [{"flops": f, "seconds": 5e-6 + f / 2e10} for f in (1e4, 1e6, 1e7, 1e8)]
    fit = fit_device(points)
    assert fit.flops_per_s == pytest.approx(2e10, rel=1e-6)
    assert fit.overhead_s == pytest.approx(5e-6, rel=1e-4) and fit.memory_Bps is None
    assert max(map(abs, fit.errors)) < 1e-6


def test_device_fit_recovers_the_memory_term_from_batches_and_quarter_batches():
    """Each workload at its batch and a quarter of it: the same weights, a quarter of the
    FLOPs; time = 4 us + F / 30 GFLOP/s + traffic / 12 GB/s is recovered exactly."""
    shapes = [(4e7, 3e6), (1e7, 3e6), (2e6, 2e4), (5e5, 2e4), (8e7, 1.2e7), (2e7, 1.2e7)]
    points = [{"flops": f, "traffic": t, "seconds": 4e-6 + f / 30e9 + t / 12e9}
              for f, t in shapes]
    fit = fit_device(points)
    assert fit.flops_per_s == pytest.approx(30e9, rel=1e-6)
    assert fit.memory_Bps == pytest.approx(12e9, rel=1e-6)
    assert fit.overhead_s == pytest.approx(4e-6, rel=1e-4)


def test_device_fit_leaves_out_a_term_that_would_be_negative():
    """Times that fall as weights grow (no memory term): the traffic term is dropped."""
    points = [{"flops": f, "traffic": t, "seconds": 2e-6 + f / 10e9 - t / 1e12}
              for f, t in [(1e6, 1e5), (4e6, 1e6), (1e7, 2e6), (3e7, 1e5)]]
    fit = fit_device(points)
    assert fit.memory_Bps is None and fit.flops_per_s > 0 and fit.overhead_s >= 0


def test_network_fit_recovers_alpha_and_beta():
    alpha, beta, sizes = 20e-6, 1e-8, [8, 4096, 1 << 16, 1 << 20, 4 << 20]
    ring = get_collective("ring")
    measured = {"algorithm": "ring", "stream": {"seconds": [5e-6]},
                "pingpong": {"sizes": sizes, "seconds": [alpha + n * beta for n in sizes]},
                "allreduce": [{"ranks": 2, "sizes": sizes, "seconds": [
                    ring.closed_form_s(2, n, alpha, beta) for n in sizes]}]}
    fit = fit_network(measured)
    assert fit["alpha_s"] == pytest.approx(alpha, rel=1e-4)
    assert fit["bandwidth_Bps"] == pytest.approx(1e8, rel=1e-4)
    assert fit["overhead_s"] == 5e-6 and fit["latency_s"] == pytest.approx(5e-6, rel=1e-3)


def test_a_one_rank_allreduce_is_no_point_of_the_network_fit():
    """It sends nothing (its closed form is 0): as a point its log ratio was infinite, and
    the fit never left its first guess."""
    alpha, beta, sizes = 20e-6, 1e-8, [8, 4096, 1 << 16, 1 << 20]
    ring = get_collective("ring")
    measured = {"algorithm": "ring", "stream": {"seconds": [5e-6]},
                "pingpong": {"sizes": sizes, "seconds": [alpha + n * beta for n in sizes]},
                "allreduce": [{"ranks": 2, "sizes": sizes, "seconds": [  # slower: a compromise
                    1.5 * ring.closed_form_s(2, n, alpha, beta) for n in sizes]}]}
    without = fit_network(measured)
    measured["allreduce"].insert(0, {"ranks": 1, "sizes": sizes, "seconds": [1e-6] * 4})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no log of 0
        fit = fit_network(measured)
    assert (fit["alpha_s"], fit["beta_s_per_byte"]) == (without["alpha_s"],
                                                        without["beta_s_per_byte"])
    assert not any("p=1" in p["what"] for p in fit["points"])
    # the log-ratio fit splits the 1.5x between the two kinds of point
    errors = [p["error"] for p in fit["points"]]
    assert max(errors) > 0.1 and min(errors) < -0.1


def test_calibrate_writes_profiles_the_simulator_reads(tmp_path, capsys, tiny, write_toml):
    out = tmp_path / "profile"
    workload = write_toml(tmp_path / "w.toml", tiny)
    assert main(["calibrate", "--out", str(out), "--quick", "--ranks", "2",
                 "--workload", str(workload)]) == 0
    printed = capsys.readouterr().out
    assert f'cluster.fabric = "calibrated:{out / "fabric.json"}"' in printed
    fabric = get_fabric(f"calibrated:{out / 'fabric.json'}")
    device = load_device(f"calibrated:{out / 'device.json'}")
    assert fabric.bandwidth_Bps > 1e6 and device.flops_per_s > 1e6
    assert f'cluster.host = "calibrated:{out / "host.json"}"' in printed
    host = json.loads((out / "host.json").read_text())
    # the fabric's o is added to every message by the simulator: not counted twice
    assert host["fabric_overhead_s"] == fabric.overhead_s
    assert host["message_s"] == pytest.approx(
        max(host["fits"]["message"]["constant_s"] - fabric.overhead_s, 0.0))
    assert host["fabric_Bps"] == fabric.bandwidth_Bps  # and its bandwidth, per byte
    assert host["message_Bps"] > host["fits"]["message"]["rate_Bps"]
    run = tmp_path / "sim"
    assert main(["run", str(workload), "--out", str(run), "--set",
                 f'cluster.fabric="calibrated:{out / "fabric.json"}"', "--set",
                 f'compute.device="calibrated:{out / "device.json"}"', "--set",
                 f'cluster.host="calibrated:{out / "host.json"}"']) == 0
    assert json.loads((run / "summary.json").read_text())["data_s"] > 0


def test_compare_reports_errors_spread_and_a_figure(tmp_path, capsys, tiny, write_toml):
    config = write_toml(tmp_path / "c.toml", tiny)
    sim, real = tmp_path / "sim", tmp_path / "real"
    assert main(["run", str(config), "--out", str(sim)]) == 0
    assert main(["real", str(config), "--out", str(real), "--repeat", "2"]) == 0
    assert main(["compare", str(sim), str(real), "--out", str(tmp_path / "cmp")]) == 0
    printed = capsys.readouterr().out
    assert "iteration time" in printed
    for kind in KINDS:  # a line per activity, with its error; fault ones only if spent
        lines = [x for x in printed.splitlines() if x.strip().startswith(kind + " ")]
        assert len(lines) == (kind not in GAP_KINDS)
        assert all("sim" in x and "real" in x and "error" in x for x in lines)
    # the simulation gave every rank its own ideal core: the report says how to match
    assert "note: the real run had its 3 ranks on this machine" in printed  # 2 + server
    assert "cluster.ranks_per_host = 3" in printed
    report = json.loads((tmp_path / "cmp" / "report.json").read_text())
    it = report["iteration_s"]
    assert report["repeats"] == 2 and it["real"]["n"] == 2
    assert it["error"] == pytest.approx((it["sim"] - it["real"]["mean"]) / it["real"]["mean"])
    assert it["outside_spread"] >= 0
    assert set(report["staleness"]) >= {"sim", "real"}
    assert len(report["breakdown"]["sim"]) == len(report["breakdown"]["real"]) == 2
    assert report["breakdown"]["kinds"] == [k for k in KINDS if k not in GAP_KINDS]
    for kind in report["breakdown"]["kinds"]:
        row = report["breakdown"][f"{kind}_s"]
        assert {"sim", "real", "error", "per_update"} <= set(row)
        assert row["per_update"]["real"] == pytest.approx(row["real"] / 20, rel=1e-9) \
            or row["real"] is None
    assert (tmp_path / "cmp" / "report.png").stat().st_size > 10_000
    assert main(["compare", str(real), str(sim)]) == 2  # the wrong way round


def test_the_shipped_matrix_covers_every_level_of_every_axis():
    matrix = load_matrix(Path(__file__).resolve().parents[2] / "experiments" / "validation"
                         / "matrix.toml")
    cases = expand(matrix)
    assert len({c.name for c in cases}) == len(cases) <= np.prod(
        [len(v) for v in matrix.axes.values()])
    for axis, levels in matrix.axes.items():
        assert {c.levels[axis] for c in cases} == set(levels)
    # no stragglers (32), small with stragglers (16), real kernels on shm (8), pipelining
    # (3), killed and restarted (2), model parallelism (4 two-way splits, 2 three-stage),
    # wide-deep's tables (4 on server shards, 2 split over the workers), the parameter
    # server over gRPC (8) and its MPI twins not in the blocks above (6)
    assert len(cases) == 87
    full = expand(dataclasses.replace(matrix, blocks=[]))
    assert len(full) == int(np.prod([len(v) for v in matrix.axes.values()]))
    small = expand(matrix, ["workers=2", "strategy=bsp", "network=shm"])
    assert {c.levels["model"] for c in small} == set(matrix.axes["model"])
    assert all(c.overrides["cluster.workers"] == 2 for c in small)


def test_validate_runs_a_small_matrix_and_writes_the_readme(tmp_path, capsys, tiny,
                                                            write_toml):
    write_toml(tmp_path / "base.toml", tiny)
    (tmp_path / "matrix.toml").write_text(
        'base = "base.toml"\nrepeat = 2\n[axes]\nworkers = [2]\nstrategy = ["bsp", "asp"]\n'
        'network = ["shm"]\nmodel = ["tiny"]\n[levels.model.tiny]\n"workload.lr" = 0.5\n')
    readme = tmp_path / "README.md"
    from sim.machine import cpu_model

    earlier = {"format": "sgd-lab.validation-real/1", "date": "2026-01-01T00:00",
               "cpu": cpu_model(),  # taken on this CPU: comparable
               "real_s": {"w2-bsp-shm-tiny": 1.0, "w2-asp-shm-tiny": 1.0}}
    (tmp_path / "real.json").write_text(json.dumps(earlier))  # the last validation's
    assert main(["validate", "--matrix", str(tmp_path / "matrix.toml"), "--out",
                 str(tmp_path / "runs"), "--quick", "--quiet-wait", "0",
                 "--retries", "0"]) == 0
    text = readme.read_text()
    # its real runs against the last validation's, and its own kept for the next one
    kept = json.loads((tmp_path / "real.json").read_text())["real_s"]
    assert set(kept) == {"w2-bsp-shm-tiny", "w2-asp-shm-tiny"}
    worst = max(abs(t - 1.0) for t in kept.values())
    assert "## Reproducibility of the real runs" in text and "2026-01-01T00:00" in text
    assert f"worst **{worst:.1%}**" in text
    assert "| w2-bsp-shm-tiny |" in text and "| w2-asp-shm-tiny |" in text
    assert "median |error|" in text and "machine:" in text
    rows = json.loads((tmp_path / "runs" / "rows.json").read_text())
    assert [r["case"] for r in rows] == ["w2-bsp-shm-tiny", "w2-asp-shm-tiny"]
    assert all("report" in r for r in rows)
    # simulated on the calibrated host, every rank on this machine's cores
    host = tmp_path / "runs" / "profiles" / "host" / "host.json"
    config = (tmp_path / "runs" / "cases" / "w2-asp-shm-tiny" / "sim" / "config.toml")
    assert host.exists() and f'host = "calibrated:{host}"' in config.read_text()
    assert f"cores = {os.cpu_count()}" in config.read_text()
    assert "ranks_per_host = 3" in config.read_text()  # 2 workers and the server
    row = next(line for line in text.splitlines() if line.startswith("| w2-asp-shm-tiny |"))
    assert re.search(r"(compute|data|update|overhead|wire|wait) [+-]\d+", row)

    # the same real runs against the model again, without running them: the same numbers
    assert main(["validate", "--matrix", str(tmp_path / "matrix.toml"), "--resimulate",
                 str(tmp_path / "runs"), "--out", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "rows.json").read_text())
    assert [r["report"]["iteration_s"] for r in again] == [r["report"]["iteration_s"]
                                                           for r in rows]
    assert [r["other_load"] for r in again] == [r["other_load"] for r in rows]
    assert "not run again" in (tmp_path / "again" / "README.md").read_text()
    assert readme.read_text() == text  # the matrix's own report is left alone
    assert main(["validate", "--matrix", str(tmp_path / "matrix.toml"), "--resimulate",
                 str(tmp_path / "again"), "--out", str(tmp_path / "none")]) == 2
    # its gradients are modelled (compute.time_s): no device to fit to its runs
    assert main(["validate", "--matrix", str(tmp_path / "matrix.toml"), "--resimulate",
                 str(tmp_path / "runs"), "--fit-on", "strategy=bsp", "--out",
                 str(tmp_path / "cv")]) == 2
    assert "nothing to fit the device to" in capsys.readouterr().err
    assert not (tmp_path / "cv").exists()
    assert main(["validate", "--fit-on", "strategy=bsp"]) == 2
    assert main(["validate", "--resimulate", str(tmp_path / "runs"), "--fit-on", "colour=red",
                 "--out", str(tmp_path / "cv2")]) == 2
    assert "--fit-on 'colour=red': expected AXIS=LEVEL" in capsys.readouterr().err
    assert main(["validate", "--resimulate", str(tmp_path / "runs"), "--spread", "3"]) == 2


def test_pipelining_speedups_compare_each_case_with_its_unpipelined_twin():
    def row(case, level, sim, real):
        return {"case": case, "levels": {"pipelining": level},
                "report": {"iteration_s": {"sim": sim, "real": {"mean": real}}}}

    rows = [row("w2-bsp-none", "none", 1.0, 2.0), row("w2-bsp-wfbp", "wfbp", 0.5, 1.6)]
    (speedup,) = pipelining_speedups(rows)
    assert speedup["sim"] == 2.0 and speedup["real"] == 1.25
    assert speedup["error"] == pytest.approx(2.0 / 1.25 - 1)
