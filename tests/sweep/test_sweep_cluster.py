"""A sweep on a Dask cluster of separate processes, as a user starts one.

``dask scheduler`` and ``dask worker`` run as their own processes from this environment
(loopback only), outside the checkout: they import ``sim`` from the environment, which
``make`` installs the project into (``pip install -e .``). An in-process ``LocalCluster``
(tests/sweep/test_sweep.py) shares the test's ``sys.path`` and would hide a missing install.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from test_sweep import GRID, NAMES, read_results, sweep_cli

ROOT = Path(__file__).resolve().parents[2]
STARTUP_S = 60.0  # a cold interpreter importing distributed on a loaded machine


def free_loopback_port() -> int | None:
    """A port free on 127.0.0.1 now, or None if nothing can bind there."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            return probe.getsockname()[1]
    except OSError:
        return None


def outside_checkout_env() -> dict[str, str]:
    """The environment without PYTHONPATH: ``sim`` must come from the installation."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@contextmanager
def dask_process(tmp_path: Path, *args: str) -> Iterator[subprocess.Popen]:
    """``python -m dask ARGS`` (what the ``dask`` command runs) from this environment."""
    log = open(tmp_path / f"dask-{args[0]}.log", "w")
    process = subprocess.Popen([sys.executable, "-m", "dask", *args], cwd=tmp_path,
                               env=outside_checkout_env(), stdout=log,
                               stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def wait_for_worker(address: str, tmp_path: Path) -> None:
    from distributed import Client

    deadline = time.monotonic() + STARTUP_S
    while True:
        try:
            with Client(address, timeout="5s", set_as_default=False) as client:
                client.wait_for_workers(1, timeout=max(deadline - time.monotonic(), 1.0))
                return
        except (OSError, TimeoutError):
            if time.monotonic() > deadline:
                logs = "\n".join(p.read_text() for p in tmp_path.glob("dask-*.log"))
                pytest.fail(f"no Dask worker joined {address} in {STARTUP_S:.0f} s:\n{logs}")
            time.sleep(0.5)


def test_the_project_imports_outside_the_checkout(tmp_path):
    # what `dask worker` needs: `make` installs the project into the environment
    found = subprocess.run([sys.executable, "-c", "import sim, sim.kernels; print(sim.__file__)"],
                           cwd=tmp_path, env=outside_checkout_env(), capture_output=True,
                           text=True)
    assert found.returncode == 0, ("sim is not installed in this environment (run `make`, "
                                   "or `pip install -e .`):\n" + found.stderr)


def test_sweep_on_a_scheduler_and_a_worker_in_their_own_processes(tmp_path, write_tiny_sweep):
    pytest.importorskip("distributed")
    port = free_loopback_port()
    if port is None:
        pytest.skip("cannot bind a port on 127.0.0.1")
    address = f"tcp://127.0.0.1:{port}"
    config = write_tiny_sweep(tmp_path / "exp.toml", GRID)
    local, dask = tmp_path / "local", tmp_path / "dask"
    assert sweep_cli(config, local, "--jobs", "1") == 0
    with dask_process(tmp_path, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                      "--no-dashboard"), \
            dask_process(tmp_path, "worker", address, "--host", "127.0.0.1", "--nworkers", "1",
                         "--nthreads", "1", "--no-dashboard"):
        wait_for_worker(address, tmp_path)
        assert sweep_cli(config, dask, "--scheduler", address) == 0
    assert read_results(dask / "results.csv") == read_results(local / "results.csv")
    assert sorted(p.name for p in (dask / "runs").iterdir()) == sorted(NAMES)
