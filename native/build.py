"""The cffi builder (API mode, out of line) for ``sim._native``, and the setuptools commands.

Two ways to build, with different default compiler flags:

- ``python native/build.py`` (what ``make`` runs) compiles the kernels in place
  (``sim/_native*.so``) for the machine that runs them: ``-march=native``.
- ``pip install .`` / ``pip wheel .`` compile them through ``BuildPyWithNative`` (registered
  as ``build_py`` in ``pyproject.toml``) with portable flags: no ``-march``, so the library
  runs on any CPU of the platform (x86-64: SSE2 only), as a wheel that may be copied to another
  machine (a Dask worker) must. ``PlatformWheel`` (registered as ``bdist_wheel``) tags that
  wheel with the interpreter, ABI and platform (e.g. ``cp311-cp311-linux_x86_64``), not
  ``py3-none-any``: it holds a compiled library.

``SGD_CFLAGS``, when set (even empty), replaces those defaults in both ways, e.g.
``SGD_CFLAGS=-march=native pip install .`` for a fast install on the machine that runs it.
The flags used are recorded in the library itself (``build_flags(path)`` reads them back).

BLAS: the dense layers, softmax and dense mat-vec call the OpenBLAS of the PyPI wheel
``scipy-openblas64`` (64-bit integers, symbols ``scipy_cblas_*64_``; a build and a run-time
dependency). It dispatches on the CPU at run time, so a portable build is not slower there.
The library is found at run time without ``LD_LIBRARY_PATH`` in two ways: ``sim.kernels``
imports ``scipy_openblas64`` first (which loads it; the dynamic linker then matches our
library's DT_NEEDED to it by soname, wherever the package lives), and the library carries an
rpath for an ``import sim._native`` on its own: the wheel's lib directory as an absolute path
in a local build, ``$ORIGIN/../scipy_openblas64/lib`` (its place beside ``sim/`` in
site-packages) in a package build, whose build environment may be a temporary one.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from functools import cache
from pathlib import Path

from cffi import FFI
from setuptools.command.build_py import build_py

NATIVE = Path(__file__).resolve().parent
ROOT = NATIVE.parent
SOURCES = ["kernels_f32.c", "kernels_f64.c", "blas.c"]
# -fopenmp-simd honours '#pragma omp simd' without -ffast-math and without the OpenMP
# runtime; every sum in the kernels keeps its own fixed accumulators (LANES, VL), so the
# target's vector width never changes its order. -ffp-contract=off rounds a*b+c twice on
# every target: with contraction on (as before 2026-11-26), a build for a CPU with FMA
# (-march=native) rounded it once and a portable one (x86-64: SSE2, no FMA) twice, and the
# two gave different losses for one config and seed (docs/reference/kernels.md, "Same
# numbers from every build").
CFLAGS = ["-O3", "-std=c99", "-fopenmp-simd", "-ffp-contract=off", "-Wall", "-Wextra",
          "-Wno-unknown-pragmas"]
#: Extra flags of a local build (``python native/build.py``): this machine's instruction set.
LOCAL_CFLAGS = ["-march=native"]
#: Extra flags of a package build (pip install / pip wheel): none, the platform's baseline.
PORTABLE_CFLAGS: list[str] = []
#: Prefix of the string the library carries with the flags it was compiled with.
FLAGS_MARKER = "sgd-lab-cflags:"


def extra_cflags(portable: bool) -> list[str]:
    """``SGD_CFLAGS`` when set (even empty), else the local or the portable defaults."""
    if "SGD_CFLAGS" in os.environ:
        return os.environ["SGD_CFLAGS"].split()
    return list(PORTABLE_CFLAGS if portable else LOCAL_CFLAGS)


def _cdef_text() -> str:
    """kernels.h without its preprocessor lines, which cffi's parser does not take."""
    lines = (NATIVE / "kernels.h").read_text().splitlines()
    return "\n".join(line for line in lines if not line.lstrip().startswith("#"))


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def blas_link(portable: bool) -> dict[str, list[str]]:
    """Compiler and linker arguments for scipy-openblas64 (see the module docstring)."""
    import scipy_openblas64 as openblas

    rpath = "$ORIGIN/../scipy_openblas64/lib" if portable else openblas.get_lib_dir()
    return {"include_dirs": [openblas.get_include_dir()],
            "library_dirs": [openblas.get_lib_dir()],
            "libraries": [openblas.get_library()],
            "extra_link_args": [f"-Wl,-rpath,{rpath}"]}


def make_builder(portable: bool = False, extra: list[str] | None = None) -> FFI:
    """The cffi builder; ``extra`` flags (after CFLAGS) replace :func:`extra_cflags`'s."""
    flags = CFLAGS + (extra_cflags(portable) if extra is None else extra)
    blas = blas_link(portable)
    builder = FFI()
    builder.cdef(_cdef_text())
    builder.set_source(
        "sim._native",
        '#include "kernels.h"\n'
        # the flags, readable in the binary (build_flags); `used` keeps it at -O3
        "__attribute__((used)) static const char sgd_lab_cflags[] = "
        f"{_c_string(FLAGS_MARKER + ' ' + ' '.join(flags))};\n",
        # absolute: cffi compiles from inside its tmpdir
        sources=[str(NATIVE / s) for s in SOURCES],
        include_dirs=[str(NATIVE), *blas["include_dirs"]],
        extra_compile_args=flags,
        libraries=[*blas["libraries"], "m"],
        library_dirs=blas["library_dirs"],
        extra_link_args=blas["extra_link_args"],
    )
    return builder


def build_flags(library: Path) -> str | None:
    """The compiler flags a built ``sim/_native*.so`` records, or None if it records none."""
    found = re.search(re.escape(FLAGS_MARKER.encode()) + rb" ([^\0]*)\0",
                      Path(library).read_bytes())
    return found.group(1).decode() if found else None


def compile_into(package_parent: Path, tmpdir: Path, portable: bool = False,
                 extra: list[str] | None = None) -> Path:
    """Compile the extension and copy it to ``package_parent/sim/``; returns its path."""
    built = Path(make_builder(portable, extra).compile(tmpdir=str(tmpdir)))
    target = package_parent / "sim" / built.name
    target.parent.mkdir(parents=True, exist_ok=True)
    if built.resolve() != target.resolve():
        # replace, never overwrite: a running interpreter may have the old library mapped
        tmp = target.with_name(target.name + ".tmp")
        shutil.copy2(built, tmp)
        os.replace(tmp, target)
    return target


class BuildPyWithNative(build_py):
    """setuptools build_py that also compiles the kernels, portably, into the built package.

    An editable install (``pip install -e .``) imports ``sim`` from the checkout: the kernels
    are then compiled in place, for this machine, as ``python native/build.py`` does.
    """

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            compile_into(ROOT, ROOT / "build" / "native")
            return
        build_temp = Path(self.get_finalized_command("build").build_temp)
        compile_into(Path(self.build_lib), build_temp / "native-portable", portable=True)
        package_experiments(Path(self.build_lib) / "sim" / "experiments")


def package_experiments(target: Path) -> None:
    """The experiment configs (experiments/**/*.toml) copied into the built package, so an
    installed ``sim`` finds them by name from any directory (sim.names.experiment_dirs)."""
    for source in sorted((ROOT / "experiments").rglob("*.toml")):
        dest = target / source.relative_to(ROOT / "experiments")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, dest)


@cache
def _platform_wheel() -> type:
    # setuptools >= 70.1 (pyproject's build requirement) has bdist_wheel; imported only when
    # setuptools asks for it, so `python native/build.py` works with any setuptools
    from setuptools.command.bdist_wheel import bdist_wheel

    class PlatformWheel(bdist_wheel):
        """bdist_wheel for a package that carries a compiled library (``sim/_native*.so``).

        The extension is built by ``build_py``, not declared as an ``ext_module``, so
        setuptools would take the package for pure Python and tag it ``py3-none-any``. This
        says the distribution has an extension, as it has: the wheel is tagged
        ``cpXY-cpXY-<platform>`` (``get_tag`` derives them once ``root_is_pure`` is false)
        and its files go to platlib.
        """

        def finalize_options(self) -> None:
            # before the build and install commands are finalized: they pick platlib from this
            self.distribution.has_ext_modules = lambda: True
            super().finalize_options()
            self.root_is_pure = False

    PlatformWheel.__module__ = __name__
    return PlatformWheel


def __getattr__(name: str) -> type:
    """``PlatformWheel``, the ``bdist_wheel`` that pyproject.toml registers (made on demand)."""
    if name == "PlatformWheel":
        return _platform_wheel()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

if __name__ == "__main__":
    os.chdir(ROOT)
    path = compile_into(ROOT, ROOT / "build" / "native")
    print(f"built {path.relative_to(ROOT)} ({build_flags(path)})", file=sys.stderr)
