# Two commands do everything on a fresh clone: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
EXT_SUFFIX := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
NATIVE_LIB := sim/_native$(EXT_SUFFIX)
NATIVE_SRC := native/build.py $(wildcard native/*.c native/*.inc native/*.h)

.PHONY: run test bench lint docs native clean

# numpy's BLAS runs its native kernels for a fair comparison (the machine pins Haswell ones)
FAIR_BLAS := env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE

# The default experiment: a sweep (resumable: a second `make run` reuses finished runs) that
# ends with its comparison plots.
run: $(NATIVE_LIB)
	$(PY) -m sim sweep experiments/quickstart.toml --out runs/quickstart

# On every core: files of tests/project/ each on one worker, tests that launch MPI ranks one
# at a time (tests/conftest.py).
test: $(NATIVE_LIB)
	$(PY) -m pytest -n auto --dist loadgroup

bench: $(NATIVE_LIB)
	$(FAIR_BLAS) $(PY) -m sim bench kernels
	$(PY) -m sim bench network
	$(PY) -m sim bench training
	$(PY) -m sim bench scale
	$(PY) -m sim bench builds

lint: $(INSTALLED)
	$(VENV)/bin/ruff check sim tests native notebooks

# The documentation site: the reference pages regenerated from the code (the config schema,
# the CLI's parser), then the site built into site/ (ignored); --strict fails on a broken
# link or a page left out of mkdocs.yml's nav.
docs: $(INSTALLED)
	$(PY) -m sim.docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

native: $(NATIVE_LIB)

# Reinstall only when requirements.txt or pyproject.toml change. The project itself goes in
# editable (`pip install -e .`): every process started from the environment imports `sim`
# from this checkout, Dask's `dask scheduler` and `dask worker` included. That install
# compiles the kernels in place for this machine, as native/build.py does (see
# native.build.BuildPyWithNative), so the two never disagree. It builds in this environment
# (no isolation): the kernels' rpath then names this environment's OpenBLAS, not a
# temporary build environment's that pip deletes afterwards.
$(INSTALLED): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --quiet -r requirements.txt
	$(PY) -m pip install --quiet --quiet --no-deps --no-build-isolation -e .
	touch $@

# Rebuilt when a kernel source changes; the install (order-only) builds it the first time.
$(NATIVE_LIB): $(NATIVE_SRC) | $(INSTALLED)
	$(PY) native/build.py

clean:
	rm -rf build site sim/_native*.so .pytest_cache .hypothesis
