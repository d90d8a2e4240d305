"""The host calibration's gathers come from memory, not the cache: their data set follows
STREAM's rule (4 times the last-level cache) within the memory there is."""

import numpy as np
import pytest

import sim.calibration.measure_host as mh
import sim.machine as machine


@pytest.mark.parametrize("text, expected", [("491520K", 480 << 20), ("32M", 32 << 20),
                                            ("1G", 1 << 30), ("512", 512)])
def test_sysfs_cache_sizes_are_read_in_their_units(text, expected):
    assert machine._cache_size_bytes(text) == expected


def test_the_last_level_cache_is_the_largest_data_or_unified_one(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    for index, (kind, size) in enumerate([("Data", "48K"), ("Instruction", "64M"),
                                          ("Unified", "2M"), ("Unified", "32M")]):
        (cache / f"index{index}").mkdir(parents=True)
        (cache / f"index{index}" / "type").write_text(kind + "\n")
        (cache / f"index{index}" / "size").write_text(size + "\n")
    real_path = machine.Path
    monkeypatch.setattr(machine, "Path", lambda p: cache if "cpu0/cache" in str(p)
                        else real_path(p))
    assert machine.last_level_cache_bytes() == 32 << 20


def test_meminfo_fields_are_bytes():
    total, available = machine.meminfo_bytes("MemTotal"), machine.meminfo_bytes("MemAvailable")
    assert 0 < available <= total


@pytest.mark.parametrize("cache, available, cores, expected", [
    (32 << 20, 64 << 30, 2, 128 << 20),     # 4 x a 32 MB cache
    (480 << 20, 64 << 30, 2, 1920 << 20),   # 4 x a 480 MB cache
    (480 << 20, 16 << 30, 2, 1 << 30),      # an eighth of the memory over the cores
    (None, 64 << 30, 2, 64 << 20),          # no cache known: the least set
    (4 << 20, 64 << 30, 2, 64 << 20),       # small caches: the least set
])
def test_the_data_set_is_four_caches_within_the_memory(monkeypatch, cache, available, cores,
                                                       expected):
    monkeypatch.setattr(mh, "last_level_cache_bytes", lambda: cache)
    monkeypatch.setattr(mh, "meminfo_bytes", lambda field: available)
    monkeypatch.setattr(mh.os, "cpu_count", lambda: cores)
    assert mh.gather_data_bytes() == expected


def test_the_timed_worker_gathers_whole_rows_of_its_data_set():
    worker = mh.gather_worker(256, 4 << 20)
    worker.batch = 64
    X, y = worker.next_batch()
    assert X.shape == (64, 256) and y.shape == (64,)
    assert worker.data.X_train.shape == ((4 << 20) // (256 * 8), 256)
    assert worker.batch_bytes == 64 * 256 * 8
    assert np.all(X == 1.0)  # written, so every page of the set is placed
