"""The quantities' closed forms and the error arithmetic."""

from __future__ import annotations

import pytest

from sim.papers.quantities import QUANTITIES, Measure, relative_error
from sim.papers.reproduce import RowResult, summarise


def measure(step_s=0.5, gpus=4, samples=128.0, flops=None):
    return Measure(step_s=step_s, gpus=gpus, samples_per_step=samples, compute_s_per_step=0.3,
                   flops_per_sample=flops, backward_share=None if flops is None else 2 / 3)


def test_absolute_quantities():
    m = measure(step_s=0.5, gpus=4, samples=128.0, flops=3e9)
    assert QUANTITIES["step_s"].value(m) == 0.5
    assert QUANTITIES["samples_per_s"].value(m) == 256.0
    assert QUANTITIES["tflops_per_gpu"].value(m) == pytest.approx(3e9 * 256 / 4 / 1e12)
    assert QUANTITIES["backward_s"].value(m) == pytest.approx(0.2)


def test_ratios_against_the_reference_row():
    ref = measure(step_s=0.25, gpus=8, samples=256.0)
    row = measure(step_s=0.28, gpus=256, samples=8192.0)
    assert QUANTITIES["step_ratio"].value(row, ref) == pytest.approx(1.12)
    assert QUANTITIES["speedup"].value(row, ref) == pytest.approx((8192 / 0.28) / (256 / 0.25))
    # weak scaling with the same work per GPU: efficiency is t_ref / t_row
    assert QUANTITIES["scaling_efficiency"].value(row, ref) == pytest.approx(0.25 / 0.28)


def test_scaling_efficiency_counts_flops_when_the_models_differ():
    # Megatron-LM's weak scaling: a 2x bigger model on 2 GPUs in the same time is 100%
    ref = measure(step_s=1.0, gpus=1, samples=8.0, flops=1e12)
    row = measure(step_s=1.0, gpus=2, samples=8.0, flops=2e12)
    assert QUANTITIES["scaling_efficiency"].value(row, ref) == pytest.approx(1.0)
    slower = measure(step_s=1.25, gpus=2, samples=8.0, flops=2e12)
    assert QUANTITIES["scaling_efficiency"].value(slower, ref) == pytest.approx(0.8)


def test_error_is_lab_over_published_minus_one():
    assert relative_error(1.1, 1.0) == pytest.approx(0.1)
    assert relative_error(0.9, 1.2) == pytest.approx(-0.25)
    assert relative_error(2.0, 2.0) == 0.0


def row(id, error, calibration=False):
    lab = None if error is None else 1.0 + error
    return RowResult("p", id, "step_s", "Fig. 1", 1.0, lab, error, 0.0, calibration,
                     "" if error is not None else "unknown key")


def test_the_summary_leaves_out_the_calibration_row_and_failed_rows():
    rows = [row("base", 0.0, calibration=True), row("a", 0.02), row("b", -0.10),
            row("c", 0.20), row("d", None)]
    s = summarise(rows)
    assert s["predicted"] == 3
    assert s["failed"] == 1
    assert s["median_abs_error"] == pytest.approx(0.10)
    assert s["worst_abs_error"] == pytest.approx(0.20)
    assert s["worst_row"] == "p/c"
    assert (s["within_15"], s["within_5"]) == (2, 1)
