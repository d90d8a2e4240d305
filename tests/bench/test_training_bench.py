"""``python -m sim bench training``: its accounting, on one small case (timings not checked)."""

from __future__ import annotations

from sim import kernels as K
from sim.bench.training_bench import measure_case, render
from sim.kernels import dense, vectors
from sim.training.workload import Worker


def test_bench_splits_wall_time_and_puts_the_kernels_back():
    before = (K.logreg_loss_grad, K.sgd_update, dense._call, vectors._call, Worker.next_batch)
    row = measure_case("asp", 4, "analytical", 50)
    assert (K.logreg_loss_grad, K.sgd_update, dense._call, vectors._call,
            Worker.next_batch) == before
    assert row["updates"] == row["gradients"] == 50
    assert 0 < row["c_share"] < row["kernel_share"] < 1
    assert 0 < row["data_share"] < 1
    shares = row["kernel_share"] + row["data_share"] + row["simulator_share"]
    assert abs(shares - 1) < 1e-12 and row["simulator_share"] > 0
    text = render({"machine": "test", "model": "logreg", "repeats": 1, "rows": [row],
                   "target_met": row["simulator_share"] < 0.5})
    assert "asp" in text and "the simulator under 50% in every row" in text
