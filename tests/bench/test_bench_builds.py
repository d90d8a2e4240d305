"""``sim bench builds``: its worker protocol, digests and table (the builds themselves are
compiled by tests/project/test_build_reproducible.py; the full suite is a benchmark, run by
hand)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sim.bench import build_bench as bb

ROOT = Path(__file__).resolve().parents[2]


def test_digest_hashes_returned_arrays_and_numbers_only():
    a = np.arange(4.0)
    assert bb.digest((1.5, a)) == bb.digest((1.5, a.copy())) != bb.digest((1.5, a + 1e-16 * a))
    assert bb.digest(None) == "" and bb.digest(("text",)) == ""
    assert bb.digest(np.float64(2.0)) != bb.digest(np.float64(2.0000000000000004))


def test_a_worker_reports_its_library_and_times_the_case_asked_for():
    worker = bb.Worker(ROOT, quick=True)  # this checkout's kernels
    try:
        library = Path(worker.hello["library"])
        assert library.parent == ROOT / "sim" and library.name.startswith("_native")
        digests = worker.hello["digests"]
        assert {"logreg_loss_grad float64 n=16 d=100", "sgd_update float64 n=2^22 momentum"
                } <= digests.keys()
        assert digests["logreg_loss_grad float64 n=16 d=100"]  # returns (loss, grad)
        seconds = worker.time_round("logreg_loss_grad float64 n=16 d=100")
        assert 0 < seconds < 0.05
    finally:
        worker.close()
    assert worker.process.returncode == 0


def test_render_lists_each_case_with_its_ratios_and_bits():
    rows = [{"case": "k f64 n=1", "native_s": 1e-5, "native+fma_s": 0.9e-5, "portable_s": 2e-5,
             "native+fma_same_bits": False, "portable_same_bits": True}]
    text = bb.render({"cpu": "cpu", "caches": "caches", "flags": {"native": "-O3"},
                      "rounds": 9, "rows": rows,
                      "geomean": {"native+fma": 0.9, "portable": 2.0}})
    line = next(x for x in text.splitlines() if x.startswith("k f64 n=1"))
    assert "10.0" in line and "0.90x DIFF" in line and "2.00x same" in line
    assert "native+fma 0.90x, portable 2.00x" in text
