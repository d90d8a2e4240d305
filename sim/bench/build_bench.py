"""``python -m sim bench builds``: what reproducible numbers cost the kernels, per build.

The kernels are compiled with ``-ffp-contract=off`` so that every build rounds a*b+c the same
way (twice) and gives the same bits (docs/reference/kernels.md, "Same numbers from every
build"). This suite compiles three builds of this checkout's kernels into a temporary folder:

- ``native``: what ``make`` builds (``-march=native``, no contraction), the reference;
- ``native+fma``: the same with ``-ffp-contract=fast`` (one rounding per a*b+c on a CPU with
  FMA), as the kernels were built before 2026-11-26: its time over ``native``'s is the cost
  of reproducibility;
- ``portable``: what ``pip install .`` builds (the platform's baseline, x86-64: SSE2).

Each build runs in its own process (a process can load one ``sim._native``), and the three
time each case of ``sim bench kernels``' logistic-regression, model, vector and compression
families in alternating rounds of about 50 ms (case 1: native, native+fma, portable, native,
...; then case 2), so that the three see the same background load; a case's figure is its
best round. Each process also hashes what each case's first call
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


class Worker:
    """A process that imports ``folder``'s sim and times one round of a case on request."""

    def __init__(self, folder: Path, quick: bool):
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "SGD_KERNEL_PLAN")}
        command = [sys.executable, "-m", "sim.bench.build_bench"] + (["--quick"] * quick)
        self.folder = folder
        self.process = subprocess.Popen(command, cwd=folder, env=env, text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE)
        self.hello = self._read()  # {"library", "digests"}: the first calls' outputs

    def _read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise UserError(f"bench builds: the worker in {self.folder.name} failed: "
                            f"{self.process.stderr.read().strip()[-2000:]}")
        return json.loads(line)

    def time_round(self, case: str) -> float:
        """Seconds per call of ``case`` over one round of calls (about ROUND_S)."""
        self.process.stdin.write(case + "\n")
        self.process.stdin.flush()
        return self._read()["seconds"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def measure(args: argparse.Namespace) -> dict:
    rounds = 3 if args.quick else 9
    with tempfile.TemporaryDirectory(prefix="sgd-lab-builds-") as tmp:
        workers, flags = {}, {}
        for name, (portable, extra) in VARIANTS.items():
            library = build_variant(Path(tmp) / name, portable, extra)
            flags[name] = _build_module().build_flags(library)
            workers[name] = Worker(Path(tmp) / name, args.quick)
            if workers[name].hello["library"] != str(library):
                raise UserError(f"bench builds: {name} loaded {workers[name].hello['library']}")
        digests = {name: w.hello["digests"] for name, w in workers.items()}
        best: dict[str, dict[str, float]] = {name: {} for name in VARIANTS}
        try:
            for case in digests[REFERENCE]:  # each case's rounds alternate between builds
                for _ in range(rounds):
                    for name, worker in workers.items():
                        seconds = worker.time_round(case)
                        best[name][case] = min(best[name].get(case, math.inf), seconds)
        finally:
            for worker in workers.values():
                worker.close()
    from sim.kernels import cache_sizes
    from sim.machine import cpu_model
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


def serve(quick: bool) -> None:
    """The worker: build the cases, print every first call's digest, then time one round of
    each case named on stdin (one JSON line per request) until stdin closes."""
    from threadpoolctl import threadpool_limits

    from sim.bench import kernel_bench as kb  # sim.kernels loads OpenBLAS before the library
    from sim.bench.side_by_side import loops_for, time_loops

    rng = np.random.default_rng(0)
    families: list[Callable] = [kb.logreg_cases, kb.model_cases, kb.vector_cases,
                                kb.compression_cases]
    with threadpool_limits(limits=1, user_api="blas"):
        cases = {f"{c.kernel} {c.dtype} {c.size}": c
                 for family in families for c in family(rng, quick)}
        # every first call before any timing: cases share arrays that the in-place kernels
        # change as many times as their timing loops run
        digests = {name: digest(case.c()) for name, case in cases.items()}
        print(json.dumps({"library": sys.modules["sim._native"].__file__,
                          "digests": digests}), flush=True)
        loops: dict[str, int] = {}
        for line in sys.stdin:
            case = cases[line.strip()]
            if line not in loops:
                loops[line] = loops_for(case.c, kb.ROUND_S)
            print(json.dumps({"seconds": time_loops(case.c, loops[line])}), flush=True)


if __name__ == "__main__":
    serve("--quick" in sys.argv[1:])
