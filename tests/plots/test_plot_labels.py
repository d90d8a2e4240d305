"""Legend labels: readable names for strategies and keys, what differs, seeds, sim vs real."""

from __future__ import annotations

from sim import plots
from sim.plots.legends import (
    context,
    fabric_name,
    is_real,
    key_value,
    strategy_name,
    style_indices,
    time_name,
)


def cfg(kind: str = "bsp", staleness: int = 2, seed: int = 0, workers: int = 4,
        **extra: object) -> dict:
    return {"cluster": {"workers": workers, "fabric": "ib-hdr"},
            "strategy": {"kind": kind, "staleness": staleness,
                         "elasticity": min(1.0, 0.9 / workers)},
            "workload": {"hidden": [64]}, "run": {"seed": seed, "seeds": []}, **extra}


def test_strategies_read_as_a_paper_names_them() -> None:
    names = {kind: strategy_name({"strategy.kind": kind, "strategy.staleness": 3,
                                  "strategy.backup": 1, "strategy.local_steps": 8})
             for kind in ("bsp", "bsp-ps", "asp", "ssp", "backup", "local-sgd", "easgd", "new")}
    assert names == {"bsp": "BSP", "bsp-ps": "BSP (PS)", "asp": "ASP", "ssp": "SSP (s = 3)",
                     "backup": "Backup (b = 1)", "local-sgd": "Local SGD (H = 8)",
                     "easgd": "EASGD (τ = 8)", "new": "new"}
    assert strategy_name({"strategy.kind": "ssp"}) == "SSP"  # its bound unknown: bare


def test_keys_and_values_read_as_words() -> None:
    assert key_value("cluster.workers", 16) == "16 workers"
    assert key_value("cluster.workers", 1) == "1 worker"
    assert key_value("cluster.fabric", "eth-10g") == "10 GbE"
    assert [fabric_name(f) for f in ("ib-hdr", "roce-100g", "calibrated:x.json")] == \
        ["IB HDR", "RoCE 100G", "calibrated:x.json"]
    assert key_value("strategy.kind", "ssp") == "SSP"
    assert key_value("strategy.bucket_bytes", 25e6) == "25 MB buckets"
    assert key_value("compute.straggler_fraction", 0.25) == "25% stragglers"
    assert key_value("strategy.pipelining", "wfbp") == "WFBP"
    assert key_value("workload.lr", 0.05) == "lr = 0.05"  # not registered: last part = value


def test_labels_name_exactly_the_differing_keys() -> None:
    configs = [cfg("bsp"), cfg("asp"), cfg("ssp", staleness=4), cfg("bsp-ps")]
    assert plots.differing_keys(configs) == ["strategy.kind", "strategy.staleness"]
    assert plots.run_labels(configs) == ["BSP", "ASP", "SSP (s = 4)", "BSP (PS)"]
    by_bound = [cfg("ssp", staleness=1), cfg("ssp", staleness=3)]
    assert plots.run_labels(by_bound) == ["SSP (s = 1)", "SSP (s = 3)"]
    grid = [cfg("bsp", workers=2), cfg("asp", workers=8)]
    assert plots.run_labels(grid) == ["2 workers, BSP", "8 workers, ASP"]


def test_labels_fall_back_when_readable_names_collide() -> None:
    """bsp ignores the ssp bound: the bound is named on its own to tell the runs apart."""
    assert plots.run_labels([cfg("bsp", staleness=2), cfg("bsp", staleness=3)]) == \
        ["s = 2", "s = 3"]
    mixed = [cfg("bsp", staleness=2), cfg("bsp", staleness=3), cfg("ssp", staleness=2)]
    assert plots.run_labels(mixed) == ["BSP, s = 2", "BSP, s = 3", "SSP, s = 2"]


def test_labels_seed_rules() -> None:
    only_seed = [cfg(seed=0), cfg(seed=1)]
    assert plots.run_labels(only_seed) == ["seed 0", "seed 1"]
    with_seed = [cfg("bsp", seed=0), cfg("bsp", seed=1), cfg("asp", seed=0)]
    assert plots.run_labels(with_seed) == ["BSP", "BSP", "ASP"]
    assert plots.run_labels([cfg(), cfg()], ["a", "b"]) == ["a", "b"]  # nothing differs: names


def test_labels_skip_derived_defaults_and_the_grid() -> None:
    configs = [cfg(workers=2, sweep={"cluster.workers": [2, 4]}),
               cfg(workers=4, sweep={}, run={"seed": 0, "seeds": [0, 1]})]
    assert plots.run_labels(configs) == ["2 workers", "4 workers"]
    chosen = [cfg(workers=2), cfg(workers=4)]
    chosen[1]["strategy"]["elasticity"] = 0.5  # set by hand: a real difference
    assert plots.differing_keys(chosen) == ["cluster.workers", "strategy.elasticity"]


def test_labels_lists_missing_keys_and_context() -> None:
    a, b = cfg(), cfg()
    b["workload"]["hidden"] = [64, 32]
    b["compute"] = {"time_s": 0.5}
    assert plots.run_labels([a, b]) == ["hidden [64], time_s = -",
                                        "hidden [64, 32], time_s = 0.5"]
    assert context([cfg("bsp"), cfg("asp")]) == "4 workers, IB HDR"
    assert context([cfg("ssp", staleness=3)]) == "4 workers, IB HDR, SSP (s = 3)"
    styles = style_indices([cfg("bsp", workers=2), cfg("asp", workers=2),
                            cfg("bsp", workers=4), cfg("asp", workers=4)])
    assert styles == [(0, 0), (0, 1), (1, 0), (1, 1)]  # colour: workers; dashes: strategy


def test_sim_and_real_share_a_colour_and_differ_by_dashes() -> None:
    configs = [{**cfg("bsp"), "clock": "sim"}, {**cfg("bsp"), "clock": "real"},
               {**cfg("asp"), "clock": "real"}, {**cfg("asp"), "clock": "sim"}]
    assert plots.run_labels(configs) == ["BSP, sim", "BSP, real", "ASP, real", "ASP, sim"]
    assert style_indices(configs) == [(0, 0), (0, 1), (1, 1), (1, 0)]  # real: dashed


def test_a_runs_clock_prefers_the_summary_field() -> None:
    assert is_real({"kind": "real"}) and not is_real({})
    assert is_real({"clock": "wall"}) and not is_real({"clock": "simulated", "kind": "real"})
    assert time_name([{}]) == "simulated time"
    assert time_name([{"clock": "wall"}]) == "wall-clock time"
    assert time_name([{}, {"kind": "real"}]) == "simulated (sim) / wall-clock (real) time"
