"""``python -m sim bench builds``: what reproducible numbers cost the kernels, per build.

The kernels are compiled with ``-ffp-contract=off`` so that every build rounds a*b+c the same
way (twice) and gives the same bits (docs/reference/kernels.md, "Same numbers from every
build"). This suite compiles three builds of this checkout's kernels into a temporary folder:

- ``native``: what ``make`` builds (``-march=native``, no contraction), the reference;
- ``native+fma``: the same with ``-ffp-contract=fast`` (one rounding per a*b+c on a CPU with
  FMA), as the kernels were built before 2026-11-26: its time over ``native``'s is the cost
  of reproducibility;
- ``portable``: what ``pip install .`` builds (the platform's baseline, x86-64: SSE2).

Each build runs in its own process (a process can load one ``sim._native``), in alternating
rounds (native, native+fma, portable, native, ...), and times the C call of each case of
``sim bench kernels``' logistic-regression, model, vector and compression families; a case's
figure is its best call over all rounds. Each process also hashes what each case's first call
returns, on the same seeded inputs: the table says whether that output's bits equal the
native build's. Needs a checkout (native/build.py) and a C compiler; raises UserError
without them.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from sim.errors import UserError

PACKAGE = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = PACKAGE.parent / "native" / "build.py"
#: build name -> (portable defaults?, flags after native/build.py's CFLAGS)
VARIANTS: dict[str, tuple[bool, list[str]]] = {
    "native": (False, ["-march=native"]),
    "native+fma": (False, ["-march=native", "-ffp-contract=fast"]),  # the last -ffp wins
    "portable": (True, []),
}
REFERENCE = "native"


def _build_module():
    """native/build.py of this checkout, loaded as a module (an installed sim has none)."""
    if not BUILD_SCRIPT.is_file():
        raise UserError(f"bench builds: {BUILD_SCRIPT} missing; this suite compiles the "
                        "kernels and needs a checkout of sgd-lab")
    spec = importlib.util.spec_from_file_location("sgd_lab_native_build", BUILD_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_variant(folder: Path, portable: bool, flags: list[str]) -> Path:
    """A copy of the sim package in ``folder`` with its own kernels built with ``flags``;
    returns the library's path. Raises UserError when the compiler fails."""
    shutil.copytree(PACKAGE, folder / "sim", ignore=shutil.ignore_patterns(
        "_native*", "__pycache__", "experiments"))
    try:
        return _build_module().compile_into(folder, folder / "build", portable, flags)
    except Exception as exc:  # cffi raises VerificationError, distutils CompileError, ...
        raise UserError(f"bench builds: compiling the kernels with {flags} failed: "
                        f"{exc}") from None


def run_worker(folder: Path, rounds: int, quick: bool) -> dict:
    """One round of every case, timed in a process that imports ``folder``'s sim."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SGD_KERNEL_PLAN")}
    command = [sys.executable, "-m", "sim.bench.build_bench", str(rounds)]
    done = subprocess.run(command + (["--quick"] if quick else []), cwd=folder, env=env,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise UserError(f"bench builds: the worker in {folder.name} failed: "
                        f"{done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def measure(args: argparse.Namespace) -> dict:
    rounds = 2 if args.quick else 4
    with tempfile.TemporaryDirectory(prefix="sgd-lab-builds-") as tmp:
        folders, flags = {}, {}
        for name, (portable, extra) in VARIANTS.items():
            folders[name] = Path(tmp) / name
            library = build_variant(folders[name], portable, extra)
            flags[name] = _build_module().build_flags(library)
        best: dict[str, dict[str, float]] = {name: {} for name in VARIANTS}
        digests: dict[str, dict[str, str]] = {}
        for _ in range(rounds):
            for name, folder in folders.items():
                found = run_worker(folder, 1, args.quick)
                if found["library"] != str(folder / "sim" / Path(found["library"]).name):
                    raise UserError(f"bench builds: {name} loaded {found['library']}")
                digests[name] = found["digests"]
                for case, seconds in found["seconds"].items():
                    best[name][case] = min(best[name].get(case, math.inf), seconds)
    from sim.bench.kernel_bench import cpu_model
    from sim.kernels import cache_sizes
    rows = [{"case": case, **{f"{n}_s": best[n][case] for n in VARIANTS},
             **{f"{n}_same_bits": digests[n][case] == digests[REFERENCE][case]
                for n in VARIANTS if n != REFERENCE and digests[REFERENCE][case]}}
            for case in best[REFERENCE]]
    return {"cpu": cpu_model(), "caches": str(cache_sizes()), "flags": flags,
            "rounds": rounds, "rows": rows,
            "geomean": {n: geomean([r[f"{n}_s"] / r[f"{REFERENCE}_s"] for r in rows])
                        for n in VARIANTS if n != REFERENCE}}


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def render(result: dict) -> str:
    others = [n for n in VARIANTS if n != REFERENCE]
    lines = [f"CPU: {result['cpu']}; caches: {result['caches']}; best of "
             f"{result['rounds']} alternating rounds per build",
             *(f"  {n}: {f}" for n, f in result["flags"].items()), "",
             f"{'case':<52}{REFERENCE + ' us':>11}" + "".join(f"{n + ' / ' + REFERENCE:>24}"
                                                               for n in others)]
    for r in result["rows"]:
        cells = []
        for n in others:
            same = r.get(f"{n}_same_bits")
            mark = "" if same is None else (" same" if same else " DIFF")
            cells.append(f"{r[f'{n}_s'] / r[f'{REFERENCE}_s']:>18.2f}x{mark:>5}")
        lines.append(f"{r['case']:<52}{r[f'{REFERENCE}_s'] * 1e6:>11.1f}" + "".join(cells))
    lines += ["", "time over the native build's, geometric mean over the cases: " + ", ".join(
        f"{n} {g:.2f}x" for n, g in result["geomean"].items()),
        "same / DIFF: the case's first output has the native build's bits, or not "
        "(blank: the kernel works in place and returns nothing to compare)"]
    return "\n".join(lines)


def digest(value: object) -> str:
    """A hash of the arrays and numbers a kernel returned ('' when it returned none)."""
    parts = value if isinstance(value, tuple) else (value,)
    arrays = [np.ascontiguousarray(p) for p in parts
              if isinstance(p, np.ndarray | float | np.floating)]
    if not arrays:
        return ""
    h = hashlib.sha256()
    for a in arrays:
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def time_cases(rounds: int, quick: bool) -> dict:
    """The worker: every case's digest and best call time, with this process's kernels."""
    from threadpoolctl import threadpool_limits

    from sim.bench import kernel_bench as kb  # sim.kernels loads OpenBLAS before the library
    from sim.bench.side_by_side import compare

    rng = np.random.default_rng(0)
    seconds, digests = {}, {}
    families: list[Callable] = [kb.logreg_cases, kb.model_cases, kb.vector_cases,
                                kb.compression_cases]
    with threadpool_limits(limits=1, user_api="blas"):
        cases = {f"{c.kernel} {c.dtype} {c.size}": c
                 for family in families for c in family(rng, quick)}
        # every first call before any timing: cases share arrays that the in-place kernels
        # change as many times as their timing loops run
        for name, case in cases.items():
            digests[name] = digest(case.c())
        for name, case in cases.items():
            seconds[name] = compare({"c": case.c}, rounds=rounds, budget_s=kb.ROUND_S)["c"]
    return {"library": sys.modules["sim._native"].__file__, "seconds": seconds, "digests": digests}


if __name__ == "__main__":
    print(json.dumps(time_cases(int(sys.argv[1]), "--quick" in sys.argv[2:])))
