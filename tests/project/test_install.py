"""Installing the package: ``pip install .`` gives everything ``python -m sim`` needs.

- the dependencies declared in ``pyproject.toml`` cover every third-party module that
  ``sim run``, ``sim sweep``, ``sim plot``, ``sim list`` and ``sim collective`` import, and
  every other third-party import of ``sim`` is in an extra; ``requirements.txt`` (the ``make``
  set-up) agrees with them;
- a wheel is tagged for this interpreter and platform (it holds a compiled library) and its
  library is built with portable flags (no ``-march=native``: a Dask worker may be another CPU);
- a fresh virtual environment with ``pip install .`` runs an experiment (slow: downloads the
  dependencies, into a pip cache under the temp directory that reruns reuse).
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
import urllib.request
import zipfile
from functools import cache
from pathlib import Path

import pytest

from native.build import build_flags

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
TINY = ["--set", "run.iterations=6", "--set", "run.eval_every=3"]
# Imported by sim but installed by a declared package of the same extra (ipykernel needs it).
PROVIDED_BY = {"ipython": "ipykernel"}
# What a copy of the checkout leaves out: environments, build outputs, results, caches, and
# the in-place library of `make` (built for this CPU: the package build must make its own).
IGNORED = {".venv", "venv", ".git", "build", "dist", "runs", "__pycache__", ".pytest_cache",
           ".hypothesis", ".ruff_cache", ".ipynb_checkpoints"}


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares them (``tomli_w`` == ``tomli-w``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(line: str) -> str:
    return normalize(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line).group(1))


def declared(pyproject: dict) -> tuple[set[str], dict[str, set[str]]]:
    """Names of ``[project] dependencies`` and of each optional-dependencies extra."""
    project = pyproject["project"]
    extras = {extra: {requirement_name(r) for r in reqs}
              for extra, reqs in project.get("optional-dependencies", {}).items()}
    return {requirement_name(r) for r in project["dependencies"]}, extras


def requirements_txt() -> dict[str, str]:
    """requirements.txt: normalized name -> the requirement as written (no comment)."""
    found = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            found[requirement_name(line)] = line.replace(" ", "")
    return found


@cache
def installed_modules() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def distribution_of(module: str) -> str:
    """The distribution that installs top-level module ``module`` in this environment."""
    dists = installed_modules().get(module)
    assert dists, f"{module} is imported by sim but not installed here (make sets up .venv)"
    return normalize(dists[0])


def is_third_party(module: str) -> bool:
    return module != "sim" and module not in sys.stdlib_module_names


# Runs CLI commands in one interpreter and prints the top-level modules that sim's own code
# imported while they ran (lazy imports included, only those actually reached).
RECORDER = r"""
import builtins, json, sys

imported = set()
real_import = builtins.__import__

def spy(name, globals=None, locals=None, fromlist=(), level=0):
    if level == 0 and (globals or {}).get("__name__", "").split(".")[0] == "sim":
        imported.add(name.split(".")[0])
    return real_import(name, globals, locals, fromlist, level)

builtins.__import__ = spy
from sim.cli import main

for argv in json.loads(sys.argv[1]):
    assert main(argv) == 0, argv
if "sim._native" in sys.modules:  # the kernels' library imports cffi's runtime from C
    imported.add("_cffi_backend")
print("IMPORTED " + json.dumps(sorted(imported)))
"""


def cli_imports(tmp: Path) -> set[str]:
    """Third-party top-level modules imported by sim for run, sweep, plot, list, collective."""
    commands = [
        # digits (scikit-learn), an MLP
        ["run", str(ROOT / "experiments" / "ib-vs-ethernet.toml"), "--out", str(tmp / "run"),
         "--set", "run.iterations=4", "--set", "run.eval_every=2"],
        # in this process (--jobs 1), ends with its plots
        ["sweep", str(ROOT / "experiments" / "quickstart.toml"), "--out", str(tmp / "sweep"),
         "--jobs", "1", "--set", "run.time_limit_s=1e-4", "--set", "run.eval_every=2"],
        ["plot", str(tmp / "run")],
        ["list"],
        ["collective", "--fabric", "ib-hdr", "--algo", "ring", "--workers", "8",
         "--bytes", "1MB"],
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, "-c", RECORDER, json.dumps(commands)], cwd=tmp,
                          env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("IMPORTED "))
    return {m for m in json.loads(line.removeprefix("IMPORTED ")) if is_third_party(m)}


def missing_runtime_dependencies(pyproject: dict, modules: set[str]) -> dict[str, str]:
    """module -> its distribution, for the modules whose distribution is not a dependency."""
    dependencies, _ = declared(pyproject)
    return {m: distribution_of(m) for m in sorted(modules)
            if distribution_of(m) not in dependencies}


def source_imports() -> set[str]:
    """Every third-party top-level module named by an import statement anywhere in sim/."""
    found = set()
    for path in (ROOT / "sim").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {m for m in found if is_third_party(m)}


def copy_checkout(dst: Path) -> Path:
    """The checkout without environments, build outputs and the in-place library."""

    def ignore(folder: str, names: list[str]) -> set[str]:
        return {n for n in names if n in IGNORED or n.endswith(".egg-info")
                or (Path(folder).name == "sim" and n.startswith("_native"))}

    shutil.copytree(ROOT, dst, ignore=ignore)
    return dst


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without what would change a build or an import (PYTHONPATH, flags)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "SGD_CFLAGS", "PYTHONHOME", "VIRTUAL_ENV")}
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "MPLBACKEND": "Agg", **extra}


def platform_tag() -> str:
    """This interpreter's wheel tags, e.g. ``cp311-cp311-linux_x86_64``."""
    version = f"cp{sys.version_info.major}{sys.version_info.minor}"
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{version}-{version}-{plat}"


def assert_portable(library: Path) -> None:
    """The library records portable flags; on x86-64 it has no AVX (ymm) or AVX-512 (zmm)."""
    flags = build_flags(library)
    assert flags is not None and "-O3" in flags, f"{library.name} records no build flags"
    assert "-march" not in flags and "-mcpu" not in flags and "-mtune" not in flags, flags
    objdump = shutil.which("objdump")
    if objdump and platform.machine() in ("x86_64", "AMD64"):
        code = subprocess.run([objdump, "-d", str(library)], capture_output=True, text=True,
                              timeout=120, check=True).stdout
        assert not re.search(r"%[yz]mm\d", code), "AVX / AVX-512 instructions in the library"


# -- declared dependencies ------------------------------------------------------------------


def test_dependencies_cover_what_the_commands_import(tmp_path):
    modules = cli_imports(tmp_path)
    # the recorder sees what these commands need (a sanity check of the check itself)
    assert {"numpy", "simpy", "tqdm", "pydantic", "sklearn", "matplotlib"} <= modules
    # optional features stay optional: a plain run or sweep never imports them
    assert not modules & {"distributed", "mpi4py", "IPython"}
    missing = missing_runtime_dependencies(PYPROJECT, modules)
    assert not missing, f"pyproject.toml [project] dependencies lack {missing}"


def test_every_third_party_import_is_a_dependency_or_in_an_extra():
    dependencies, extras = declared(PYPROJECT)
    everything = dependencies.union(*extras.values())
    undeclared = {}
    for module in source_imports():
        dist = distribution_of(module)
        if dist not in everything and PROVIDED_BY.get(dist) not in everything:
            undeclared[module] = dist
    assert not undeclared, f"imported by sim, declared nowhere in pyproject.toml: {undeclared}"


def test_extras():
    _, extras = declared(PYPROJECT)
    assert {"mpi4py", "mpich"} <= extras["mpi"]
    assert "distributed" in extras["dask"]
    assert {"nbformat", "nbclient", "ipykernel", "jupyterlab"} <= extras["notebooks"]
    assert {"pytest", "hypothesis", "pytest-timeout", "ruff"} <= extras["test"]


def test_requirements_txt_agrees_with_pyproject():
    """requirements.txt (make's set-up) = the dependencies and every extra, same bounds."""
    project = PYPROJECT["project"]
    declared_reqs = [*project["dependencies"],
                     *(r for reqs in project["optional-dependencies"].values() for r in reqs)]
    reqs_txt = requirements_txt()
    for req in declared_reqs:
        name = requirement_name(req)
        assert name in reqs_txt, f"{req} (pyproject.toml) is not in requirements.txt"
        assert reqs_txt[name] == req.replace(" ", ""), \
            f"requirements.txt {reqs_txt[name]} vs pyproject.toml {req}"
    names = {requirement_name(r) for r in declared_reqs}
    build = {requirement_name(r) for r in PYPROJECT["build-system"]["requires"]}
    extra = set(reqs_txt) - names - build
    assert not extra, f"requirements.txt has {extra}, which pyproject.toml declares nowhere"


# -- the wheel ------------------------------------------------------------------------------


def test_wheel_is_platform_tagged_and_built_portably(tmp_path):
    """``pip wheel .``: cpXY-cpXY-<platform>, not py3-none-any; its library without -march."""
    from setuptools import __version__ as setuptools_version

    if tuple(int(p) for p in setuptools_version.split(".")[:2]) < (70, 1):
        pytest.skip(f"setuptools {setuptools_version} here; the build requires >= 70.1")
    source = copy_checkout(tmp_path / "src")
    # no build isolation: this environment has the build requirements, no download needed
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "--no-cache-dir", ".", "-w",
                           str(tmp_path / "dist")],
                          cwd=source, env=clean_env(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    assert wheel.name == f"sgd_lab-{PYPROJECT['project']['version']}-{platform_tag()}.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/WHEEL")))
        (library,) = [n for n in names if re.fullmatch(r"sim/_native\..*(so|pyd)", n)]
        archive.extract(library, tmp_path / "unpacked")
    assert b"Root-Is-Purelib: false" in metadata
    assert_portable(tmp_path / "unpacked" / library)


def test_local_build_is_for_this_machine_and_sgd_cflags_wins(monkeypatch):
    from native.build import extra_cflags

    monkeypatch.delenv("SGD_CFLAGS", raising=False)
    assert extra_cflags(portable=False) == ["-march=native"]
    assert extra_cflags(portable=True) == []
    monkeypatch.setenv("SGD_CFLAGS", "-march=x86-64-v3 -mtune=znver4")
    assert extra_cflags(portable=True) == ["-march=x86-64-v3", "-mtune=znver4"]
    monkeypatch.setenv("SGD_CFLAGS", "")
    assert extra_cflags(portable=False) == []


# -- a fresh environment --------------------------------------------------------------------


def package_index() -> str:
    """The index pip would use: PIP_INDEX_URL, pip's configuration, else PyPI."""
    url = os.environ.get("PIP_INDEX_URL")
    if not url:
        done = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"],
                              capture_output=True, text=True, timeout=60)
        url = done.stdout.strip() if done.returncode == 0 else ""
    return (url or "https://pypi.org/simple").rstrip("/")


@pytest.mark.slow
@pytest.mark.timeout(1200)  # a cold pip cache downloads ~150 MB of wheels
def test_pip_install_in_a_fresh_venv_runs_an_experiment(tmp_path):
    """README's set-up of a Dask worker: ``pip install .``, then ``python -m sim run``."""
    index = package_index()
    try:
        urllib.request.urlopen(f"{index}/pip/", timeout=15).close()
    except OSError as exc:
        pytest.skip(f"package index {index} unreachable: {exc}")
    source = copy_checkout(tmp_path / "src")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300,
                   env=clean_env())
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    cache = Path(tempfile.gettempdir()) / "sgd-lab-pip-cache"
    env = clean_env(PIP_CACHE_DIR=str(cache))
    done = subprocess.run([str(python), "-m", "pip", "install", "."], cwd=source, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]

    # from a folder that is not the checkout: sim comes from the environment
    work = tmp_path / "work"
    work.mkdir()
    out = work / "run"
    config = source / "experiments" / "quickstart.toml"
    done = subprocess.run([str(python), "-m", "sim", "run", str(config), "--out", str(out),
                           *TINY], cwd=work, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["iterations"] == 6
    done = subprocess.run([str(python), "-m", "sim", "plot", str(out)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert list((out / "plots").glob("*.png"))

    # the experiments ship inside the package: by name, from a folder without them
    done = subprocess.run([str(python), "-m", "sim", "list", "experiments"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "quickstart" in done.stdout, done.stderr[-3000:]
    done = subprocess.run([str(python), "-m", "sim", "run", "validation/base", "--out",
                           str(work / "named"), *TINY], cwd=work, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    # the installed package: the environment's, tagged for the platform, built portably
    where = subprocess.run([str(python), "-c", "import sim._native as n; print(n.__file__)"],
                           cwd=work, env=env, capture_output=True, text=True, timeout=60,
                           check=True).stdout.strip()
    library = Path(where)
    assert library.is_relative_to(venv), library
    assert_portable(library)
    (wheel_metadata,) = library.parent.parent.glob("sgd_lab-*.dist-info/WHEEL")
    assert f"Tag: {platform_tag()}" in wheel_metadata.read_text()
