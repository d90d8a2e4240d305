"""The same config and seed give the same numbers from every build of the kernels.

``make`` compiles the kernels for this CPU (``-march=native``: AVX2 and FMA here) and ``pip
install .`` for the platform's baseline (x86-64: SSE2). Both now round every a*b+c twice
(``-ffp-contract=off``) and sum in a fixed order, and logistic regression takes the fused
pass unless told otherwise (a timed choice would differ between builds and loads). This
builds both from this checkout and runs every shipped experiment, every sweep point, with
each: ``summary.json`` (less its wall-clock time) and ``metrics.csv`` must be identical
bytes. With ``-ffp-contract=fast`` (the flags before 2026-11-26), 61 of 190 such files
differed. ``SGD_REPRO_ITERATIONS`` sets the updates per run (default 12).
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

from native import build
from sim.bench.build_bench import VARIANTS, build_variant

ROOT = Path(__file__).resolve().parents[1]
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


def run_all(folder: Path, out: Path) -> subprocess.Popen:
    """Every shipped experiment, reduced, with ``folder``'s kernels (started, not waited)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SGD_KERNEL_PLAN")}
    reduce = ["--set", f"run.iterations={ITERATIONS}", "--set",
              f"run.eval_every={max(1, ITERATIONS // 4)}"]
    commands = [[sys.executable, "-m", "sim", "sweep", str(c), "--out", str(out / c.stem),
                 "--set", "run.seeds=[1]", "--jobs", "1", "--no-plots", *reduce]
                for c in SWEEPS]
    commands += [[sys.executable, "-m", "sim", "run", str(c), "--out", str(out / c.stem),
                  *reduce] for c in RUNS]
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


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_native_and_portable_builds_give_the_same_bits(builds, tmp_path):
    jobs = {name: run_all(builds[name], tmp_path / name) for name in BUILDS}
    for name, job in jobs.items():
        job.wait(timeout=880)
        log = (tmp_path / name / "log.txt").read_text()
        assert job.returncode == 0, f"{name} build: {log[-3000:]}"
    native, portable = (results(tmp_path / name) for name in BUILDS)
    runs = sum(1 for key in native if key.endswith("summary.json"))
    assert runs >= len(SWEEPS) + len(RUNS) and native.keys() == portable.keys()
    differ = sorted(key for key in native if native[key] != portable[key])
    assert not differ, f"{len(differ)} of {len(native)} result files differ: {differ[:6]}"
