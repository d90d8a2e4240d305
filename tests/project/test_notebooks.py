"""The notebooks: percent-format sources (notebooks/*.py, ruff clean) from which
notebooks/build_notebooks.py generates the committed .ipynb (without outputs, up to date), and
each one runs to the end in its quick form (``SGD_LAB_QUICK=1``) and shows a figure.

The kernel is this interpreter (a kernelspec written to a temporary JUPYTER_PATH, so no other
installed ``python3`` kernel is picked up), started in a temporary directory with results
going to another one: nothing lands in the repository.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
KERNEL = "sgd-lab-test-python3"
CELL_TIMEOUT_S = 600


def _builder() -> types.ModuleType:
    """notebooks/build_notebooks.py as a module (executed from source: no __pycache__)."""
    path = NOTEBOOK_DIR / "build_notebooks.py"
    module = types.ModuleType("build_notebooks")
    module.__file__ = str(path)
    exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    return module


def test_every_notebook_is_built_from_the_generator() -> None:
    builder = _builder()
    assert sorted(f"{name}.ipynb" for name in builder.NOTEBOOKS) == [p.name for p in NOTEBOOKS]
    assert builder.NOTEBOOKS == sorted(p.stem for p in NOTEBOOK_DIR.glob("[0-9]*.py"))
    assert builder.main(["--check"]) == 0, "run: python notebooks/build_notebooks.py"


def test_percent_format_parsing() -> None:
    parse = _builder().parse
    text = """
# %% [markdown]
# # Title
#
#   indented

# %% tags=["parameters"] custom={"a": 1}
import os
# %matplotlib inline
    # %time x = 1
# a comment

# %%

# %% [markdown]
# last
"""
    assert parse(text) == [
        ("markdown", "# Title\n\n  indented", {}),
        ("code", "import os\n%matplotlib inline\n    %time x = 1\n# a comment",
         {"tags": ["parameters"], "custom": {"a": 1}}),
        ("markdown", "last", {})]


@pytest.mark.parametrize("text, error", [
    ("x = 1\n# %%\n", "src:1: text before the first"),
    ("# %% [markdown]\nplain\n", "src:2: a Markdown cell's lines start with '# '"),
    ("# %% tags\n", "src:1: expected key=<JSON>"),
    ("# %% tags=[oops]\n", "src:1: tags: not a JSON value"),
])
def test_percent_format_errors_name_the_line(text: str, error: str) -> None:
    builder = _builder()
    with pytest.raises(builder.SourceError, match=error):
        builder.parse(text, "src")


def test_generation_is_deterministic() -> None:
    builder = _builder()
    for name in builder.NOTEBOOKS:
        assert builder.render(name) == builder.render(name) == \
            (NOTEBOOK_DIR / f"{name}.ipynb").read_text()


def test_notebooks_and_their_helpers_are_ruff_clean() -> None:
    """ruff (the project's settings) on the sources, the generated .ipynb and sim.analysis."""
    pytest.importorskip("ruff")
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "notebooks",
                           "sim/analysis"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All checks passed" in done.stdout


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)
    assert "QUICK" in code[0].source, "the first code cell holds the parameters"
    setup = code[1].source
    assert "setup_notebook(NOTEBOOK, QUICK)" in setup and len(setup.splitlines()) <= 10, \
        "the second code cell is the short setup (sim.analysis.setup_notebook)"


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kernelspec running this interpreter; returns the JUPYTER_PATH holding it."""
    jupyter = tmp_path_factory.mktemp("jupyter")
    spec_dir = jupyter / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "sgd-lab tests", "language": "python",
        "env": {"SGD_LAB_QUICK": "1", "SGD_LAB_ROOT": str(ROOT)}}))
    return jupyter


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_in_quick_form(path: Path, kernel_env: Path, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_env))
    monkeypatch.setenv("SGD_LAB_RUNS", str(tmp_path / "runs"))
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name=KERNEL, timeout=CELL_TIMEOUT_S,
                                     resources={"metadata": {"path": str(workdir)}})
    client.execute()  # raises CellExecutionError naming the failing cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert images, f"{path.name}: no figure shown"
    assert not any(workdir.iterdir()), "the notebook wrote into its working directory"
