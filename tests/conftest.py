"""Make the repository root importable (``import sim``) however pytest is started, and share
the tiny configs that many test files run.

A ``*_config_data`` fixture is a factory: called with nothing it gives its base, a fresh nested
dict of config tables; layers of dotted keys (``{"run.iterations": 4}``) and keyword arguments
(``run__iterations=4``, ``__`` for ``.``) override or add keys in that order, and a value of
None drops a key of the base. A test states what it changes, so what differs from the base is
in the test. ``write_toml`` writes such a dict to a file, with TOML text (tables the dict does
not have) after it.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tomli_w

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ConfigData = Callable[..., dict[str, Any]]


@pytest.fixture(autouse=True)
def full_size_commands(monkeypatch):
    """The suite's own CLI runs are as configured, even in a shell that exported
    SGD_LAB_QUICK=1 (sim.quick); a test of the reduced form sets it itself."""
    monkeypatch.delenv("SGD_LAB_QUICK", raising=False)

# The bases. Every key is one that a default would change, so each is as small as its runs.
TINY = {"cluster": {"workers": 2},
        "workload": {"features": 8, "samples": 256, "batch": 8}}
TINY_REAL = {"cluster": {"workers": 2},
             "workload": {"model": "logreg", "features": 32, "samples": 600, "batch": 16,
                          "lr": 0.5},
             "strategy": {"kind": "bsp", "backup": 1, "staleness": 1},
             "run": {"iterations": 20, "eval_every": 5, "seed": 3}}
TWO_RANK = {"cluster": {"workers": 2},
            "workload": {"features": 16, "samples": 400, "batch": 8}}
TINY_RUN = {"cluster": {"workers": 3}, "workload": {"samples": 512},
            "run": {"iterations": 24, "eval_every": 4}}
SPLIT_MLP = {"cluster": {"workers": 1},
             "workload": {"model": "mlp", "dataset": "gaussian", "features": 12, "classes": 4,
                          "samples": 400, "hidden": [8, 8, 6], "batch": 16, "lr": 0.2},
             "strategy": {"kind": "bsp"},
             "run": {"iterations": 4, "eval_every": 2, "seed": 5}}


def with_keys(base: dict[str, Any], *layers: dict[str, Any], **keys: Any) -> dict[str, Any]:
    """A deep copy of ``base`` with each layer's dotted keys, then ``keys`` (``__`` = ``.``),
    set in order; None drops the key (and its table, once empty)."""
    data = copy.deepcopy(base)
    flat: dict[str, Any] = {}
    for layer in layers:
        flat.update(layer)
    flat.update({k.replace("__", "."): v for k, v in keys.items()})
    for dotted, value in flat.items():
        section, key = dotted.split(".", 1)
        if value is None:
            data.get(section, {}).pop(key, None)
            if section in data and not data[section]:
                del data[section]
        else:
            data.setdefault(section, {})[key] = copy.deepcopy(value)
    return data


def factory(base: dict[str, Any]) -> ConfigData:
    def make(*layers: dict[str, Any], **keys: Any) -> dict[str, Any]:
        return with_keys(base, *layers, **keys)

    return make


@pytest.fixture(scope="session")
def tiny_config_data() -> ConfigData:
    """2 workers on an 8-feature, 256-sample Gaussian problem, batch 8: the smallest config
    that still trains; a simulated run of tens of updates takes milliseconds. No run length:
    each test says how many updates (and evals) it needs."""
    return factory(TINY)


@pytest.fixture(scope="session")
def tiny_real_config_data() -> ConfigData:
    """2 MPI ranks, logreg on 32 features x 600 samples, batch 16, lr 0.5, 20 updates (an
    eval every 5, seed 3): a real run of any strategy kind takes well under a second (bsp by
    default; backup 1 and staleness 1 for the kinds that read them)."""
    return factory(TINY_REAL)


@pytest.fixture(scope="session")
def two_rank_config_data() -> ConfigData:
    """2 ranks on a 16-feature, 400-sample Gaussian problem, batch 8: the bare workload of
    the real-run tools' tests (calibration, validation, emulation, failures, load), tiny so
    that mpiexec's start-up dominates; each test adds its strategy, compute and run length."""
    return factory(TWO_RANK)


@pytest.fixture(scope="session")
def split_mlp_data() -> ConfigData:
    """1 replica of a 4-layer MLP (12 -> 8 -> 8 -> 6 -> 4, 258 parameters), batch 16, lr 0.2,
    bsp, 4 updates with an eval every 2 (seed 5): the base of the model-parallel tests' runs,
    simulated and real, each adding its [parallel] (or --set) and cluster.workers."""
    return factory(SPLIT_MLP)


@pytest.fixture(scope="session")
def tiny_run_data() -> ConfigData:
    """3 simulated workers, 512 samples, 24 updates with an eval every 4: a run small enough
    to write in a fixture, long enough for curves to plot and analyse."""
    return factory(TINY_RUN)


@pytest.fixture(scope="session")
def write_tiny_run(tiny_run_data: ConfigData) -> Callable[..., dict[str, Any]]:
    """``write_tiny_run(out, **{"strategy.kind": "asp"})``: the ``tiny_run_data`` run with
    those dotted keys, simulated and written to ``out`` the way ``sim run`` writes it; its
    summary."""
    from sim.rundir import write_run
    from sim.simulated.engine import simulate
    from sim.training.validator import validate

    def write(out: Path, **overrides: Any) -> dict[str, Any]:
        result = simulate(validate(tiny_run_data(overrides)))
        write_run(out, result.files())
        return result.summary

    return write


@pytest.fixture(scope="session")
def write_toml() -> Callable[..., Path]:
    """``write_toml(path, data, *text)``: ``data`` as TOML, then each piece of ``text``
    (tables ``data`` lacks, or keys for its last table), written to ``path``; the path."""
    def write(path: Path, data: dict[str, Any], *text: str) -> Path:
        path.write_text(tomli_w.dumps(data) + "".join(text))
        return path

    return write


@pytest.fixture(scope="session")
def write_tiny_sweep(tiny_config_data: ConfigData, write_toml) -> Callable[..., Path]:
    """``write_tiny_sweep(path, sweep, iterations=10)``: the tiny config with ``iterations``
    updates (an eval every 5), then the TOML text ``sweep`` (its [sweep] table) after the
    [run] table, written to ``path``; the path. Each point runs in milliseconds."""
    def write(path: Path, sweep: str, iterations: int = 10) -> Path:
        data = tiny_config_data({"run.iterations": iterations, "run.eval_every": 5})
        return write_toml(path, data, sweep)

    return write


# ---- running in parallel (make test: pytest -n auto --dist loadgroup) ------------------------

TESTS = Path(__file__).resolve().parent
RANK_FOLDERS = {"real", "calibration", "validation"}  # most of their tests launch MPI ranks


def pytest_collection_modifyitems(config, items):
    """Tests that launch MPI ranks (the folders above, or marked ``ranks``) run one at a
    time on one worker: two jobs of spinning ranks on two cores would each run at half speed
    past their time limits. Each file of tests/project/ stays on one worker, so that its
    module-scoped set-up (a clone after ``make run``, a notebook kernel, two builds of the
    kernels) is made once."""
    for item in items:
        folder = item.path.relative_to(TESTS).parts[0]
        if folder in RANK_FOLDERS or item.get_closest_marker("ranks"):
            item.add_marker(pytest.mark.xdist_group("ranks"))
        elif folder == "project":
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
