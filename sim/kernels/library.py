"""The compiled kernels' library, loaded once: the only import of ``sim._native``.

``ffi`` and ``lib`` are cffi's view of native/kernels.h; the other modules of this package
take them from here, and nothing outside the package touches them.
"""

from __future__ import annotations

# Loads libscipy_openblas64_.so (the package's documented preloading) before sim._native,
# whose DT_NEEDED entry the dynamic linker then matches by soname: no LD_LIBRARY_PATH, and
# no dependence on the rpath that native/build.py also records.
import scipy_openblas64  # noqa: F401  (isort keeps it before sim._native)

from sim._native import ffi, lib

__all__ = ["ffi", "lib"]
