"""The same config and seed give the same numbers from every build of the kernels.

``make`` compiles the kernels for this CPU (``-march=native``: AVX2 and FMA here) and ``pip
install .`` for the platform's baseline (x86-64: SSE2). Both now round every a*b+c twice
(``-ffp-contract=off``) and sum in a fixed order, and logistic regression takes the fused
pass unless told otherwise (a timed choice would differ between builds and loads). This
builds both from this checkout and runs every shipped experiment with each: ``summary.json``
(less its wall-clock time) and ``metrics.csv`` must be identical bytes. With
``-ffp-contract=fast`` (the flags before 2026-11-26), 61 of 190 such files differed.
``SGD_REPRO_ITERATIONS`` sets the updates per run (default 12).

By default each sweep runs its first and last grid point (every key at its first value, then
at its last: the smallest and largest settings, in the grid's own order), which keeps every
experiment and the extremes of its keys covered in a fraction of the time; the ``full``
marker's test runs every point (``pytest -m full tests/project/test_build_reproducible.py``).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w

from native import build
from sim.bench.build_bench import VARIANTS, build_variant
from sim.sweep.grid import load_sweep

ROOT = Path(__file__).resolve().parents[2]
SWEEPS = sorted((ROOT / "experiments").glob("*.toml"))
RUNS = [ROOT / "experiments" / "validation" / "base.toml"]
ITERATIONS = int(os.environ.get("SGD_REPRO_ITERATIONS", "12"))
BUILDS = ("native", "portable")
# x86-64 fused multiply-add mnemonics (FMA3, FMA4 and the AVX-512 forms)
FMA = re.compile(r"\bv?f(n?m(add|sub)|madd|msub)\w*\s", re.I)


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, Path]:
    """Both builds, each a copy of the sim package with its own kernels: name -> folder."""
    root = tmp_path_factory.mktemp("builds")
    return {name: build_variant(root / name, *VARIANTS[name]).parents[1] for name in BUILDS}


def library(folder: Path) -> Path:
    (found,) = (folder / "sim").glob("_native*")
    return found


def disassembly(path: Path) -> str | None:
    objdump = shutil.which("objdump")
    if not objdump or platform.machine() not in ("x86_64", "AMD64"):
        return None
    return subprocess.run([objdump, "-d", "--no-show-raw-insn", str(path)], check=True,
                          capture_output=True, text=True, timeout=120).stdout


def test_the_bench_builds_what_make_and_pip_build():
    assert VARIANTS["native"] == (False, build.LOCAL_CFLAGS)
    assert VARIANTS["portable"] == (True, build.PORTABLE_CFLAGS)
    assert "-ffp-contract=off" in build.CFLAGS
    assert not any(f.startswith("-ffp-contract=") and f != "-ffp-contract=off"
                   for f in build.CFLAGS + build.LOCAL_CFLAGS + build.PORTABLE_CFLAGS)


def test_no_fused_multiply_add_in_either_build(builds):
    """The native build uses this CPU's vector units but contracts no a*b+c into one FMA."""
    native, portable = (build.build_flags(library(builds[n])) for n in BUILDS)
    assert "-march=native" in native.split() and "-march" not in portable
    code = disassembly(library(builds["native"]))
    if code is None:
        pytest.skip("no objdump, or not x86-64: the flags were checked")
    assert not FMA.findall(code), sorted(set(FMA.findall(code)))[:5]
    cpu = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    if " avx2" in cpu:  # else the two builds would hardly differ and the test below be idle
        assert re.search(r"%ymm\d", code), "the native build uses no AVX registers"


# what every run is cut to: ITERATIONS updates, four evaluations; a sweep's points one seed
REDUCE = [f"run.iterations={ITERATIONS}", f"run.eval_every={max(1, ITERATIONS // 4)}"]
ONE_SEED = ["run.seeds=[1]"]


def sets(overrides: list[str]) -> list[str]:
    return [arg for o in overrides for arg in ("--set", o)]


def point_configs(out: Path) -> list[Path]:
    """Each shipped sweep's first and last grid point, reduced, written under ``out`` as a
    config of its own (``out/EXPERIMENT/POINT.toml``; a one-point sweep gives one)."""
    paths = []
    for config in SWEEPS:
        points = load_sweep(config, REDUCE + ONE_SEED).points
        for point in points[:1] + points[1:][-1:]:
            path = out / config.stem / f"{point.name}.toml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(tomli_w.dumps(point.data))
            paths.append(path)
    return paths


def run_all(folder: Path, out: Path, points: list[Path] | None) -> subprocess.Popen:
    """Every shipped experiment, reduced, with ``folder``'s kernels (started, not waited):
    every sweep point (``points`` None), or just ``points``' configs, one run each."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SGD_KERNEL_PLAN")}
    if points is None:
        commands = [[sys.executable, "-m", "sim", "sweep", str(c), "--out", str(out / c.stem),
                     "--jobs", "1", "--no-plots", *sets(REDUCE + ONE_SEED)] for c in SWEEPS]
    else:
        commands = [[sys.executable, "-m", "sim", "run", str(p), "--out",
                     str(out / p.parent.name / p.stem)] for p in points]
    commands += [[sys.executable, "-m", "sim", "run", str(c), "--out", str(out / c.stem),
                  *sets(REDUCE)] for c in RUNS]
    script = " && ".join(" ".join(f"'{a}'" for a in c) for c in commands)
    out.mkdir(parents=True)
    with open(out / "log.txt", "w") as log:  # a file, not a pipe that could fill up
        return subprocess.Popen(["bash", "-c", script], cwd=folder, env=env,
                                stdout=log, stderr=subprocess.STDOUT)


def results(out: Path) -> dict[str, bytes]:
    """Each run's summary.json (less wall_s, which is the host's time) and metrics.csv."""
    found = {}
    for path in sorted(out.rglob("summary.json")):
        summary = json.loads(path.read_text())
        summary.pop("wall_s", None)
        found[str(path.relative_to(out))] = json.dumps(summary, sort_keys=True).encode()
    for path in sorted(out.rglob("metrics.csv")):
        found[str(path.relative_to(out))] = path.read_bytes()
    return found


def same_bits(builds: dict[str, Path], tmp_path: Path, points: list[Path] | None,
              runs: int) -> None:
    """Both builds run the experiments (as :func:`run_all`); at least ``runs`` runs, and
    every result file identical."""
    jobs = {name: run_all(builds[name], tmp_path / name, points) for name in BUILDS}
    for name, job in jobs.items():
        job.wait(timeout=880)
        log = (tmp_path / name / "log.txt").read_text()
        assert job.returncode == 0, f"{name} build: {log[-3000:]}"
    native, portable = (results(tmp_path / name) for name in BUILDS)
    assert sum(1 for key in native if key.endswith("summary.json")) >= runs
    assert native.keys() == portable.keys()
    differ = sorted(key for key in native if native[key] != portable[key])
    assert not differ, f"{len(differ)} of {len(native)} result files differ: {differ[:6]}"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_native_and_portable_builds_give_the_same_bits(builds, tmp_path):
    """Each sweep's first and last point (module docstring)."""
    points = point_configs(tmp_path / "points")
    assert {p.parent.name for p in points} == {c.stem for c in SWEEPS}
    same_bits(builds, tmp_path, points, len(points) + len(RUNS))


@pytest.mark.full
@pytest.mark.timeout(900)
def test_native_and_portable_builds_give_the_same_bits_at_every_point(builds, tmp_path):
    same_bits(builds, tmp_path, None, len(SWEEPS) + len(RUNS))
