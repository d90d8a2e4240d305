"""The cffi builder (API mode, out of line) for ``sim._native``.

``python native/build.py`` compiles the kernels in place (``sim/_native*.so``);
``pip install .`` compiles them through ``BuildPyWithNative``, which
``pyproject.toml`` registers as the ``build_py`` command.
Extra compiler flags come from ``SGD_CFLAGS`` (default ``-march=native``:
the kernels are built on the machine that runs them).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from cffi import FFI
from setuptools.command.build_py import build_py

NATIVE = Path(__file__).resolve().parent
ROOT = NATIVE.parent
SOURCES = ["kernels_f32.c", "kernels_f64.c"]
# -fopenmp-simd honours '#pragma omp simd' (vectorised reductions) without
# -ffast-math and without the OpenMP runtime. -std=c99 would switch FMA
# contraction off; -ffp-contract=fast turns it back on (one rounding per a*b+c,
# no reassociation).
CFLAGS = ["-O3", "-std=c99", "-fopenmp-simd", "-ffp-contract=fast", "-Wall", "-Wextra",
          "-Wno-unknown-pragmas"]


def _cdef_text() -> str:
    """kernels.h without its preprocessor lines, which cffi's parser does not take."""
    lines = (NATIVE / "kernels.h").read_text().splitlines()
    return "\n".join(line for line in lines if not line.lstrip().startswith("#"))


def make_builder() -> FFI:
    builder = FFI()
    builder.cdef(_cdef_text())
    builder.set_source(
        "sim._native",
        '#include "kernels.h"',
        # absolute: cffi compiles from inside its tmpdir
        sources=[str(NATIVE / s) for s in SOURCES],
        include_dirs=[str(NATIVE)],
        extra_compile_args=CFLAGS + os.environ.get("SGD_CFLAGS", "-march=native").split(),
        libraries=["m"],
    )
    return builder


def compile_into(package_parent: Path, tmpdir: Path) -> Path:
    """Compile the extension and copy it to ``package_parent/sim/``; returns its path."""
    built = Path(make_builder().compile(tmpdir=str(tmpdir)))
    target = package_parent / "sim" / built.name
    target.parent.mkdir(parents=True, exist_ok=True)
    if built.resolve() != target.resolve():
        # replace, never overwrite: a running interpreter may have the old library mapped
        tmp = target.with_name(target.name + ".tmp")
        shutil.copy2(built, tmp)
        os.replace(tmp, target)
    return target


class BuildPyWithNative(build_py):
    """setuptools build_py that also compiles the kernels into the built package."""

    def run(self) -> None:
        super().run()
        compile_into(Path(self.build_lib), Path(self.build_temp if hasattr(self, "build_temp")
                                                 else "build") / "native")


if __name__ == "__main__":
    os.chdir(ROOT)
    path = compile_into(ROOT, ROOT / "build" / "native")
    print(f"built {path.relative_to(ROOT)}", file=sys.stderr)
