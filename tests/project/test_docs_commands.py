"""The commands of README.md and docs/ work as written (issue 33: a newcomer's first hour):
every command block runs verbatim, in order, in a fresh shell of a fresh clone after the two
set-up commands, and fails the test on a non-zero exit or a Python traceback.

Which blocks run. A fenced block's language says what it is: ``sh`` (or ``bash``,
``shell``) is commands a reader types, run in bash; ``python`` is a program, run with
``.venv/bin/python``, the interpreter the pages name; ``text`` (output, a usage line, a
diagram), ``toml``, ``sql``, ``json`` and ``yaml`` are shown, not run. Every fence names its
language, so an output block never runs by accident and a command block is never skipped by
leaving its language out. A block that cannot run in a test has ``<!-- not run: REASON -->``
on the line right before it (invisible on GitHub and in the site); ``<!-- not run
`COMMAND`: REASON -->`` leaves out one command of the block (``make test``, which would
start this test again). :data:`NOT_RUN` lists every such marker: adding one fails
:func:`test_the_commands_not_run_are_these_and_say_why` until it is listed there too, so no
command is skipped silently.

The fresh clone. The tracked files and the untracked ones git does not ignore (``git
ls-files -co --exclude-standard``: what a commit of this work would hold), without
``runs/``, ``.venv`` or build outputs. Then what ``make`` would have left, without running
pip again: its own ``.venv`` holding this environment's packages (linked) and an editable
install of the clone, as ``pip install -e .`` there makes it (setuptools' finder, its
MAPPING pointing at the clone), the console scripts rewritten to start the clone's
interpreter, and the kernels' library ``make`` built here, newer than its sources; the test
checks that ``make`` finds nothing to redo. A link to this environment would not do: its
finder maps ``import sim`` to this checkout, which ``python -m sim`` from the clone's root
hides (the current folder comes first on ``sys.path``) but a console script, a script in
another folder (``notebooks/build_notebooks.py``), an MPI rank or a ``cd`` elsewhere would
import, testing this checkout instead of the clone. ``make run`` then runs once (the
set-up), and each page gets its own clone with that ``runs/`` (``make test`` leaves nothing
a page reads).

The shell. One bash process per page, so ``cd``, ``source .venv/bin/activate`` and variables
carry over from block to block as for a reader; no profile or rc file; ``env -i`` but for
PATH (a plain user's: nothing under sbin) and HOME, a new empty folder shared by the pages
(a shell always has one, and matplotlib, Jupyter and MPICH write caches under it: not in the
real home, and built once). Each command's exit status is checked after it (``set -e``, with
the status printed); a failure names the page, the line, the command and its output's end.

Size. ``SGD_LAB_QUICK=1`` (:mod:`sim.quick`) is the one variable added in the default form:
runs stop after 20 updates, sweeps take at most 2 seeds, calibration runs as ``--quick``;
every page runs in about 5 to 30 s and the whole module in about 2 to 3 minutes on 2 cores.
The ``docs_full`` tests run the same pages as written, without it, in 15 minutes on 2 idle
cores (the fault-tolerance sweep alone takes ten; 28 minutes on busy ones): ``make test``
leaves them out (pyproject.toml's addopts), ``pytest -m docs_full
tests/project/test_docs_commands.py`` runs them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from docs_commands import (
    PYTHON,
    ROOT,
    SHELL,
    SHOWN,
    Block,
    Command,
    blocks,
    clean_env,
    failures,
    make_clone,
    page_script,
    real_venv,
    run_page,
    run_script,
)

from sim.quick import VARIABLE

# Every command not run, and why: (page, the command; for a whole block, its first line)
# -> the reason its marker gives.
RECURSES = ("it runs the test suite, which runs this page's commands (it would start "
            "itself)")
NOT_RUN = {
    ("docs/measurements/papers.md",
     ".venv/bin/python -m sim papers --out runs/papers --markdown docs/measurements/papers.md"):
        "it simulates every row of every paper (clusters of up to 512 GPUs: minutes); "
        "tests/papers/test_reproduce.py runs the command end to end on a small paper file",
    ("README.md", "make test"): RECURSES,
    ("docs/index.md", "make test"): RECURSES,
    ("docs/how-to/dask.md", ".venv/bin/dask scheduler &                       # prints "
                            "tcp://HOST:8786"):
        "HOST stands for the address `dask scheduler` prints; tests/sweep/test_sweep_cluster.py "
        "runs a sweep against a scheduler and a worker started like this",
    ("docs/how-to/dask.md", "# cluster.py: ~/sgd-env/bin/python cluster.py"):
        "it needs a Slurm cluster and dask-jobqueue",
    ("docs/how-to/notebooks.md", ".venv/bin/jupyter lab notebooks/        # the project's "
                                 "kernel"):
        "JupyterLab serves until it is stopped; tests/project/test_notebooks.py executes every "
        "notebook",
    ("docs/how-to/calibration.md",
     ".venv/bin/python -m sim calibrate --out runs/emu --net emulate:1gbit --only network"):
        "it needs root, iproute2 and network namespaces; tests/real/test_real_emulate.py runs "
        "emulation where they are permitted",
    ("docs/how-to/real-runs.md",
     ".venv/bin/python -m sim validate --resimulate runs/validation --fit-on workers=2"):
        "it needs the --out of a whole `sim validate` (about 17 minutes of real runs); "
        "tests/validation/test_real_tools.py resimulates a small matrix's",
}
PAGE_TIMEOUT_S = 240  # the default form; the slowest page takes about 35 s on 2 busy cores
FULL_PAGE_TIMEOUT_S = 3600  # as written: the fault-tolerance sweep takes 10 (idle) to 25 minutes
CLONE = "sgd-lab"  # the clone's folder, as `git clone` names it



def commands_of(block: Block) -> list[Command]:
    return block.to_run() if block.lang in SHELL else [Command(block.line + 1, block.body)]


ALL_BLOCKS = blocks()
PAGES = list(dict.fromkeys(b.page for b in ALL_BLOCKS if b.runs and commands_of(b)))


# ---- the Markdown ---------------------------------------------------------------------------

def test_every_fence_names_its_language():
    unnamed = [b.where for b in ALL_BLOCKS if b.lang not in SHELL | PYTHON | SHOWN]
    assert not unnamed, (f"{unnamed}: name the language after the fence: sh (a command to "
                         f"run), python, or text (output), toml, sql, json, yaml")


def test_the_commands_not_run_are_these_and_say_why():
    marked = {}
    for block in ALL_BLOCKS:
        if block.not_run is not None:
            assert block.lang in SHELL | PYTHON, f"{block.where}: a {block.lang} block never runs"
            marked[block.page, block.body.strip().splitlines()[0]] = block.not_run
        for command, reason in block.not_run_commands.items():
            named = [c for c in block.commands() if bare_text(c) == command]
            assert named, f"{block.where}: the marker names `{command}`, not in the block"
            marked[block.page, command] = reason
    assert marked == NOT_RUN, "a <!-- not run --> marker changed: update NOT_RUN"


def bare_text(command: Command) -> str:
    return re.sub(r"\s+#.*$", "", command.text).strip()


def test_the_readme_tour_is_the_tutorial():
    """The README's five-minute tour names its commands inline: each is one the tutorial
    runs, so this test runs it too."""
    text = (ROOT / "README.md").read_text()
    tour = text.split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    inline = {" ".join(span.split()) for span in re.findall(r"`([^`]+)`", tour)}
    commands = {c for c in inline if c.startswith((".venv/bin/", "make "))} - {".venv/bin/python"}
    tutorial = {" ".join(bare_text(c).replace("\\\n", " ").split())
                for b in ALL_BLOCKS if b.page == "docs/tutorial.md" and b.runs
                for c in b.to_run()}
    assert len(commands) >= 5, "the tour's commands were not found"
    assert commands <= tutorial, f"not in the tutorial's blocks: {sorted(commands - tutorial)}"


# ---- the runner itself --------------------------------------------------------------------

FAKE_PAGE = """# A page

```sh
cd sub
echo "in $(basename "$PWD")"
```

```python
import sys
print("python", sys.version_info[0])
```

```text
this is output: false
```

```sh
python3 -c 'raise ValueError("shown, not fatal")' || true
false   # the failing one
echo never
```
"""


def test_a_page_runs_in_one_shell_and_fails_on_a_traceback_or_an_exit_status(tmp_path):
    from docs_commands import parse_page

    page = tmp_path / "page.md"
    page.write_text(FAKE_PAGE)
    (tmp_path / "sub" / ".venv" / "bin").mkdir(parents=True)
    python = shutil.which("python3")
    (tmp_path / "sub" / ".venv" / "bin" / "python").symlink_to(python)
    parsed = parse_page(page, tmp_path)
    result = run_page(parsed, tmp_path, clean_env(tmp_path), tmp_path / "scripts", 60)
    found = [(f.command.line, f.why) for f in result.failures]
    # the traceback of line 18 (exit status 0) and the exit of line 19; line 20 never ran
    assert found == [(18, "printed a Python traceback"), (19, "exited with status 1")]
    message = str(result.failures[1])
    assert message.startswith("page.md:19 (sh block at line 17): exited with status 1")
    assert "$ false   # the failing one" in message
    # the python block ran with .venv/bin/python of sub/, where the first block went
    assert [c.line for c, _ in result.seconds] == [4, 5, 9, 18, 19, 20]
    assert result.seconds[-1][1] == 0.0  # never started


def test_a_page_past_its_time_limit_is_stopped_and_named(tmp_path):
    page = Block("page.md", 1, "sh", "echo start\nsleep 30\n")
    text, steps = page_script([page], tmp_path)
    (tmp_path / "page.sh").write_text(text)
    status, output = run_script(tmp_path / "page.sh", tmp_path, clean_env(tmp_path), 2)
    assert status is None
    (failure,) = failures(steps, status, output)
    assert failure.command.text == "sleep 30" and "time limit" in failure.why


# ---- the pages ----------------------------------------------------------------------------

@dataclass
class SetUp:
    base: Path  # the temporary folder everything goes in
    home: Path
    clone: Path  # after `make run`
    real: Path  # the environment whose packages the clones link


def checked_out() -> bool:
    """Whether git is here and ROOT is a checkout (its files are what a clone holds)."""
    if shutil.which("git") is None:
        return False
    done = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=ROOT,
                          capture_output=True, text=True)
    return done.returncode == 0 and done.stdout.strip() == "true"


def fresh_set_up(base: Path, quick: bool) -> SetUp:
    """A fresh clone after ``make run`` (the set-up's one command that leaves anything a
    page reads); fails when make would redo any of its set-up or ``make run`` fails."""
    real = real_venv()
    if real is None:
        pytest.fail("run the tests from the project's environment (make test): the clones "
                    "link its packages")
    if not checked_out():
        pytest.skip(f"{ROOT} is not a git checkout (or git is missing): a fresh clone is "
                    f"what git ls-files lists")
    if not list((ROOT / "sim").glob("_native*")):
        pytest.fail("sim/_native* is not built: run make (make test builds it first)")
    home = base / "home"
    home.mkdir()
    clone = make_clone(base / "set-up" / CLONE, real)
    env = page_env(home, quick)
    stale = subprocess.run(["make", "--question", "native", ".venv/.installed"], cwd=clone,
                           env=env, capture_output=True, text=True)
    assert stale.returncode == 0, f"make would redo its set-up in the clone: {stale.stdout}"
    # from elsewhere (no clone on sys.path through the current folder): the editable install
    where = subprocess.run([clone / ".venv" / "bin" / "python", "-c",
                            "import sim; print(sim.__file__)"], cwd=home, env=env,
                           capture_output=True, text=True)
    assert Path(where.stdout.strip()) == clone / "sim" / "__init__.py", where
    set_up = Block("(set-up)", 0, "sh", "make run\n")
    result = run_page([set_up], clone, env, base / "set-up-scripts", PAGE_TIMEOUT_S * 2)
    if result.failures:
        pytest.fail("the set-up failed\n\n" + "\n\n".join(map(str, result.failures)),
                    pytrace=False)
    return SetUp(base, home, clone, real)


def page_env(home: Path, quick: bool) -> dict[str, str]:
    return clean_env(home, **({VARIABLE: "1"} if quick else {}))


def run_docs_page(set_up: SetUp, page: str, quick: bool, timeout_s: float) -> None:
    """Run ``page``'s blocks in a clone of its own that has the set-up's runs/."""
    folder = set_up.base / page.replace("/", "_")
    clone = make_clone(folder / CLONE, set_up.real)
    shutil.copytree(set_up.clone / "runs", clone / "runs", symlinks=True)
    page_blocks = [b for b in ALL_BLOCKS if b.page == page]
    result = run_page(page_blocks, clone, page_env(set_up.home, quick), folder / "scripts",
                      timeout_s)
    if result.failures:
        pytest.fail(f"{len(result.failures)} documented command(s) failed (the slowest "
                    f"commands: {result.slowest()})\n\n"
                    + "\n\n".join(map(str, result.failures)), pytrace=False)
    assert result.seconds, f"{page}: no command ran"


@pytest.fixture(scope="module")
def quick_set_up(tmp_path_factory) -> SetUp:
    return fresh_set_up(tmp_path_factory.mktemp("docs-commands"), quick=True)


@pytest.fixture(scope="module")
def full_set_up(tmp_path_factory) -> SetUp:
    return fresh_set_up(tmp_path_factory.mktemp("docs-commands-full"), quick=False)


@pytest.mark.parametrize("page", PAGES)
def test_page_commands_run(quick_set_up, page):
    """In the reduced form (SGD_LAB_QUICK=1): every page, in seconds."""
    run_docs_page(quick_set_up, page, quick=True, timeout_s=PAGE_TIMEOUT_S)


@pytest.mark.docs_full
@pytest.mark.timeout(FULL_PAGE_TIMEOUT_S + 300)
@pytest.mark.parametrize("page", PAGES)
def test_page_commands_run_as_written(full_set_up, page):
    """As a reader runs them: no variable but PATH and HOME."""
    run_docs_page(full_set_up, page, quick=False, timeout_s=FULL_PAGE_TIMEOUT_S)
