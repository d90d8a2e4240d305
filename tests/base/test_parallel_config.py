"""The [parallel] keys, run.memory and the devices' memory: every bad value exits 2 naming the
key, and the cross-key checks refuse exactly the configs a plan cannot place."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.cli import main
from sim.config import Config
from sim.errors import UserError
from sim.training.compute_model import DEVICES, load_device
from sim.training.parallel_plan import build_plan
from sim.training.strategies import STRATEGIES, StrategyRow
from sim.training.validator import validate

MLP = {"workload.model": "mlp", "workload.hidden": [64, 32, 16]}  # 8 -> 64 -> 32 -> 16 -> 2
WIDTHS = [8, 64, 32, 16, 2]
BATCH = 8  # the tiny config's rows per replica

# (what is wrong, dotted keys on the tiny MLP config, the key the message must name)
BAD = [
    ("no stages", {"parallel.pipeline": 0}, "parallel.pipeline"),
    ("stages as text", {"parallel.pipeline": "2"}, "parallel.pipeline"),
    ("more stages than layers", {"parallel.pipeline": 5}, "parallel.pipeline"),
    ("logreg has one layer", {"parallel.pipeline": 2, "workload.model": "logreg"},
     "parallel.pipeline"),
    ("stage_layers too short", {"parallel.pipeline": 3, "parallel.stage_layers": [2, 2]},
     "parallel.stage_layers"),
    ("stage_layers sum", {"parallel.pipeline": 2, "parallel.stage_layers": [2, 3]},
     "parallel.stage_layers"),
    ("an empty stage", {"parallel.pipeline": 2, "parallel.stage_layers": [0, 4]},
     "parallel.stage_layers"),
    ("no shards", {"parallel.tensor": 0}, "parallel.tensor"),
    ("tensor does not divide a width", {"parallel.tensor": 3}, "parallel.tensor"),
    ("no pair to split", {"parallel.pipeline": 4, "parallel.tensor": 2}, "parallel.tensor"),
    ("no microbatches", {"parallel.microbatches": 0}, "parallel.microbatches"),
    ("microbatches do not divide the batch", {"parallel.microbatches": 3},
     "parallel.microbatches"),
    ("unknown schedule", {"parallel.schedule": "pipedream"}, "parallel.schedule"),
    ("unknown parallel key", {"parallel.stages": 2}, "parallel.stages"),
    ("asp pipelined", {"parallel.pipeline": 2, "strategy.kind": "asp"}, "parallel.pipeline"),
    ("local-sgd microbatched", {"parallel.microbatches": 2, "strategy.kind": "local-sgd"},
     "parallel.microbatches"),
    ("sparse model split", {"parallel.tensor": 2, "workload.model": "sparse-logreg",
                            "workload.dataset": "sparse-powerlaw"}, "workload.model"),
    ("a timing profile split", {"parallel.pipeline": 2, "workload.profile": "vgg16"},
     "workload.profile"),
    ("compression with stages", {"parallel.pipeline": 2, "strategy.compression": "topk"},
     "strategy.compression"),
    ("failures with stages", {"parallel.pipeline": 2, "faults.failures": [
        {"rank": 0, "at_update": 1}]}, "faults.failures"),
    ("unknown memory mode", {"run.memory": "warn"}, "run.memory"),
    ("model larger than the device", {"compute.device": "v100",
                                      "workload.hidden": [100_000, 100_000]},
     "compute.device"),
]


@pytest.fixture
def mlp(tiny_config_data):
    return lambda *layers: tiny_config_data(MLP, {"run.iterations": 2}, *layers)


@pytest.mark.parametrize("what, keys, key", BAD, ids=[case[0] for case in BAD])
def test_bad_parallel_config_exits_2_naming_the_key(tmp_path, capsys, mlp, write_toml, what,
                                                    keys, key):
    path = write_toml(tmp_path / "exp.toml", mlp(keys))
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, "one line, no traceback"
    assert str(path) in err and key in err, err
    assert not out.exists()


def test_a_model_too_large_says_what_it_needs_and_how_to_run_it_anyway(mlp):
    data = mlp({"compute.device": "v100", "workload.hidden": [100_000, 100_000],
                "workload.momentum": 0.9})
    with pytest.raises(UserError, match=r"needs 224 GiB \(parameters 74.5 GiB.*'v100' holds "
                                        r"32 GiB; run.memory = \"report\""):
        validate(data)
    data["run"]["memory"] = "report"
    assert validate(data).run.memory == "report"


@pytest.mark.ranks
def test_both_executors_run_a_pipelined_config(tmp_path, mlp, write_toml):
    """`sim run` simulates a split replica (tests/simulated/test_model_parallel_sim.py) and
    `sim real` runs it on MPI ranks (tests/real/test_real_split.py): neither refuses a [parallel]
    config, and both write the split-replica summary keys (docs/reference/results.md)."""
    data = mlp({"parallel.pipeline": 2, "parallel.microbatches": 2})
    validate(data)
    path = write_toml(tmp_path / "exp.toml", data)
    assert main(["run", str(path), "--out", str(tmp_path / "sim")]) == 0
    summaries = [json.loads((tmp_path / "sim" / "summary.json").read_text())]
    pytest.importorskip("mpi4py")
    assert main(["real", str(path), "--out", str(tmp_path / "real")]) == 0
    summaries.append(json.loads((tmp_path / "real" / "summary.json").read_text()))
    for summary in summaries:
        assert summary["iterations"] == 2
        assert len(summary["memory_bytes_by_stage"]) == 2
        assert 0 <= summary["bubble_fraction"] < 1


# ---- any value of a new key: valid, or one line naming that key -----------------------

VALUES = (st.none() | st.booleans() | st.integers(-3, 40) | st.floats(allow_nan=True)
          | st.text(max_size=6) | st.sampled_from(["gpipe", "1f1b", "refuse", "report"])
          | st.lists(st.integers(-1, 5), max_size=5))
NEW_KEYS = ["parallel.pipeline", "parallel.stage_layers", "parallel.tensor",
            "parallel.microbatches", "parallel.schedule", "run.memory"]


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(NEW_KEYS), value=VALUES)
def test_any_value_of_a_new_key_is_valid_or_refused_naming_it(mlp, key, value):
    data = mlp({key: value})
    if value is None:
        return  # dropping the key: its default
    try:
        validate(data)
    except UserError as exc:
        assert "\n" not in str(exc) and key in str(exc), str(exc)


def refusal(kind: str, p: int, t: int, m: int, stage_layers: list[int]) -> str | None:
    """The key a config of the tiny MLP must be refused for, worked out from its widths
    (8 -> 64 -> 32 -> 16 -> 2) and its batch of 8 rows; None if it is valid."""
    changed = [k for k, v in (("pipeline", p > 1), ("tensor", t > 1), ("microbatches", m > 1),
                              ("stage_layers", bool(stage_layers))) if v]
    if not STRATEGIES[kind].model_parallel:
        return f"parallel.{changed[0]}" if changed else None
    layers = len(WIDTHS) - 1
    if layers < p:
        return "parallel.pipeline"
    if stage_layers and (len(stage_layers) != p or sum(stage_layers) != layers):
        return "parallel.stage_layers"
    if BATCH % m:
        return "parallel.microbatches"
    if t > 1:
        counts = stage_layers or {1: [4], 2: [2, 2], 3: [1, 1, 2], 4: [1, 1, 1, 1]}[p]
        first, columns = 0, []
        for count in counts:  # pairs of consecutive layers inside each stage
            columns += [first + 2 * j for j in range(count // 2)]
            first += count
        if not columns or any(WIDTHS[c + 1] % t for c in columns):
            return "parallel.tensor"
    return None


@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(sorted(STRATEGIES)), p=st.integers(1, 5), t=st.integers(1, 9),
       m=st.integers(1, 9), stage_layers=st.lists(st.integers(1, 4), max_size=5) | st.just([]))
def test_cross_key_checks_refuse_exactly_what_cannot_be_placed(mlp, kind, p, t, m,
                                                               stage_layers):
    data = mlp({"strategy.kind": kind, "strategy.backup": 0, "parallel.pipeline": p,
                "parallel.tensor": t, "parallel.microbatches": m,
                "parallel.stage_layers": stage_layers})
    expected = refusal(kind, p, t, m, stage_layers)
    try:
        config = validate(data)
    except UserError as exc:
        assert expected is not None and f": {expected}:" in str(exc), (expected, str(exc))
        return
    assert expected is None
    plan = build_plan(config)
    workers = config.cluster.workers
    assert len(plan.ranks) == STRATEGIES[kind].worker_ranks(config) == workers * p * t
    assert STRATEGIES[kind].ranks(config) == workers * p * t + STRATEGIES[kind].server_ranks(config)


# ---- the strategy table and the devices -------------------------------------------------

def test_each_strategy_row_takes_parallel_or_says_why_not():
    assert {n for n, row in STRATEGIES.items() if row.model_parallel} == {"bsp", "bsp-ps"}
    generic = StrategyRow.__dataclass_fields__["no_model_parallel"].default
    assert all(row.model_parallel or row.no_model_parallel != generic
               for row in STRATEGIES.values())


def test_gpu_presets_have_datasheet_memory_and_calibrated_profiles_may_give_it(tmp_path):
    assert {name: d.memory_bytes for name, d in DEVICES.items()} == {
        "cpu-core": None, "v100": 32 * 2**30, "a100": 80 * 2**30, "h100": 80 * 2**30,
        "p100-sxm2": 16 * 2**30, "p100-pcie": 16 * 2**30, "v100-sxm3": 32 * 2**30,
        "tpu-v3": 16 * 2**30}
    path = tmp_path / "dev.json"
    for memory, expected in ((1e9, 1e9), (None, None)):
        path.write_text(json.dumps({"flops_per_s": 1e9, "memory_bytes": memory}))
        assert load_device(f"calibrated:{path}").memory_bytes == expected
    for memory in (0, -1, "8GB"):
        path.write_text(json.dumps({"flops_per_s": 1e9, "memory_bytes": memory}))
        with pytest.raises(ValueError, match="memory_bytes"):
            load_device(f"calibrated:{path}")


def test_defaults_split_nothing():
    par = Config().parallel
    assert (par.pipeline, par.tensor, par.microbatches, par.stage_layers, par.schedule) == (
        1, 1, 1, [], "1f1b")
    assert Config().run.memory == "refuse"
