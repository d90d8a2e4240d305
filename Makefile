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

test: $(NATIVE_LIB)
	$(PY) -m pytest

bench: $(NATIVE_LIB)
	$(FAIR_BLAS) $(PY) -m sim bench kernels
	$(PY) -m sim bench network
	$(PY) -m sim bench training

lint: $(INSTALLED)
	$(VENV)/bin/ruff check sim tests native notebooks

# README's config reference, regenerated from the schema
docs: $(INSTALLED)
	$(PY) -m sim.docs

native: $(NATIVE_LIB)

# Reinstall only when requirements.txt changes.
$(INSTALLED): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --quiet -r requirements.txt
	touch $@

$(NATIVE_LIB): $(INSTALLED) $(NATIVE_SRC)
	$(PY) native/build.py

clean:
	rm -rf build sim/_native*.so .pytest_cache .hypothesis
