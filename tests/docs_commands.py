"""The documented commands as data, and a fresh clone to run them in (for
tests/project/test_docs_commands.py, which says why each choice is made).

- :func:`blocks` reads the fenced code blocks of README.md and docs/**/*.md, with the
  ``<!-- not run: REASON -->`` markers before them;
- :func:`make_clone` copies the checkout as a fresh clone has it (``git ls-files -co
  --exclude-standard``), gives it its own ``.venv`` and the built kernels, as ``make`` would;
- :func:`run_page` runs a page's blocks in order in one clean bash process and returns what
  failed.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import venv
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What a reader types: shell blocks run in bash, python blocks with the project's interpreter.
SHELL = {"sh", "bash", "shell"}
PYTHON = {"python"}
# What a page shows without meaning "type this": output, config fragments, diagrams, queries.
SHOWN = {"text", "toml", "sql", "json", "yaml"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[^\s`]*)")
MARKER = re.compile(r"^\s*<!--\s*not run(?:\s+`(?P<command>[^`]+)`)?\s*:\s*(?P<reason>.*?)"
                    r"\s*-->\s*$")
TRACEBACK = "Traceback (most recent call last)"
# A line the page's script prints before each command: the output after it is that command's.
STEP = "@@@ docs-step "


@dataclass(frozen=True)
class Command:
    line: int  # where it starts on its page (1-based)
    text: str  # as written, continuation lines joined with their backslash-newlines


@dataclass
class Block:
    page: str  # relative to the checkout, e.g. docs/tutorial.md
    line: int  # the opening fence's line (1-based)
    lang: str
    body: str  # the text between the fences, the fence's indentation removed
    not_run: str | None = None  # the reason, when the whole block is not run
    # command text (without its trailing comment) -> the reason it is not run
    not_run_commands: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.not_run is None and self.lang in SHELL | PYTHON

    def commands(self) -> list[Command]:
        """A shell block's commands: its lines, a trailing backslash joining the next one;
        blank and comment-only lines are none."""
        found: list[Command] = []
        pending: list[str] = []
        start = 0
        for number, text in enumerate(self.body.splitlines(), self.line + 1):
            if not pending:
                start = number
                if not text.strip() or text.lstrip().startswith("#"):
                    continue
            pending.append(text)
            if not text.endswith("\\"):
                found.append(Command(start, "\n".join(pending)))
                pending = []
        if pending:
            found.append(Command(start, "\n".join(pending)))
        return found

    def to_run(self) -> list[Command]:
        """The commands that run: all but those a marker names."""
        return [c for c in self.commands() if bare(c.text) not in self.not_run_commands]


def bare(command: str) -> str:
    """A command without its trailing ``# comment``, as a marker names it."""
    return re.sub(r"\s+#.*$", "", command).strip()


def pages(root: Path = ROOT) -> list[Path]:
    """README.md, then every page under docs/ in path order."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def parse_page(path: Path, root: Path = ROOT) -> list[Block]:
    """The fenced blocks of a Markdown page with the markers right before them. Raises
    ValueError for a marker that does not parse or is not right before a block, and for a
    fence left open."""
    lines = path.read_text().splitlines()
    page = str(path.relative_to(root))
    found: list[Block] = []
    markers: list[tuple[int, str | None, str]] = []  # (line, command or None, reason)
    i = 0
    while i < len(lines):
        text = lines[i]
        opening = FENCE.match(text)
        if opening is None:
            if text.lstrip().startswith("<!--") and "not run" in text:
                marker = MARKER.match(text)
                if marker is None or not marker["reason"]:
                    raise ValueError(f"{page}:{i + 1}: expected <!-- not run: REASON --> or "
                                     f"<!-- not run `COMMAND`: REASON -->, got {text.strip()}")
                markers.append((i + 1, marker["command"], marker["reason"]))
            elif text.strip() and markers:
                raise ValueError(f"{page}:{markers[0][0]}: a not-run marker must be right "
                                 f"before a fenced block")
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        end = next((j for j in range(i + 1, len(lines))
                    if re.match(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}\s*$",
                                lines[j])), None)
        if end is None:
            raise ValueError(f"{page}:{i + 1}: the fence is never closed")
        body = "\n".join(line[len(indent):] if line.startswith(indent) else line.lstrip()
                         for line in lines[i + 1:end])
        block = Block(page, i + 1, opening["lang"].lower(), body)
        for _, command, reason in markers:
            if command is None:
                block.not_run = reason
            else:
                block.not_run_commands[command.strip()] = reason
        found.append(block)
        markers = []
        i = end + 1
    if markers:
        raise ValueError(f"{page}:{markers[0][0]}: a not-run marker must be right before a "
                         f"fenced block")
    return found


def blocks(root: Path = ROOT) -> list[Block]:
    return [b for path in pages(root) for b in parse_page(path, root)]


# ---- a fresh clone -------------------------------------------------------------------------

def tracked_files(root: Path = ROOT) -> list[str]:
    """What a fresh clone holds: the tracked files, and the untracked ones git does not
    ignore (work not committed yet), that exist now."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root,
                            capture_output=True, text=True, check=True).stdout
    return [name for name in listed.split("\0") if name and (root / name).is_file()]


def copy_files(root: Path, names: list[str], dst: Path) -> None:
    for name in names:
        target = dst / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target, follow_symlinks=False)  # as git checks out


def real_venv() -> Path | None:
    """The virtual environment running these tests (``make test`` runs them from .venv), or
    None when this interpreter is not in one."""
    return Path(sys.prefix) if sys.prefix != sys.base_prefix else None


def make_venv(real: Path, clone: Path) -> Path:
    """``clone/.venv``: a new virtual environment whose packages are ``real``'s (linked, not
    reinstalled) and whose editable install of sgd-lab is the clone's, as ``pip install -e
    .`` run in the clone would make it; the console scripts start the clone's interpreter."""
    target = clone / ".venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(target)
    overlay(real, target, real, target)
    (target / ".installed").touch()  # after requirements.txt: make reinstalls nothing
    return target


def overlay(src: Path, dst: Path, real: Path, target: Path) -> None:
    """Link each entry of ``src`` missing from ``dst`` (recursing into folders both have),
    but rewrite the scripts that name ``real``'s interpreter and the editable install."""
    for entry in sorted(src.iterdir()):
        there = dst / entry.name
        if entry.name in (".installed", "pyvenv.cfg") or entry.name.startswith("__pycache__"):
            continue
        if entry.name.startswith("__editable__") and "sgd_lab" in entry.name:
            there.write_text(editable_for(entry, target.parent))
        elif there.is_dir() and entry.is_dir() and not entry.is_symlink():
            overlay(entry, there, real, target)
        elif there.exists() or there.is_symlink():
            continue  # made by venv: the interpreter, activate (naming this environment)
        elif (script := script_for(entry, real, target)) is not None:
            there.write_text(script)
            there.chmod(entry.stat().st_mode)
        else:
            there.symlink_to(entry.resolve() if entry.is_symlink() else entry)


def script_for(script: Path, real: Path, target: Path) -> str | None:
    """A console script of ``real`` with its ``#!`` line naming ``target``'s interpreter, or
    None for anything else (a binary, a script of another interpreter, a package's file)."""
    if script.parent != real / "bin" or script.is_symlink():
        return None
    try:
        text = script.read_text()
    except (UnicodeDecodeError, OSError):
        return None
    first, _, rest = text.partition("\n")
    if not first.startswith("#!") or not first[2:].strip().startswith(str(real / "bin")):
        return None
    return f"#!{target / 'bin' / 'python'}\n{rest}"


def editable_for(path: Path, clone: Path) -> str:
    """setuptools' editable-install file ``path`` (its .pth, or its finder) for the clone:
    the finder's MAPPING sends ``import sim`` to ``clone/sim``."""
    text = path.read_text()
    if path.suffix != ".py":
        return text
    mapping = f"MAPPING: dict[str, str] = {{'sim': {str(clone / 'sim')!r}}}"
    new, count = re.subn(r"^MAPPING: .*$", lambda _: mapping, text, flags=re.M)
    if count != 1:
        raise RuntimeError(f"{path}: no MAPPING line to point at the clone")
    return new


def make_clone(dst: Path, real: Path, root: Path = ROOT) -> Path:
    """A fresh clone of ``root`` in ``dst`` after ``make``'s set-up: the files, ``.venv`` and
    the kernels' library, newer than their sources (``make`` rebuilds nothing)."""
    copy_files(root, tracked_files(root), dst)
    make_venv(real, dst)
    for library in (root / "sim").glob("_native*"):
        shutil.copy(library, dst / "sim" / library.name)  # copy: a new mtime
    return dst


# ---- running a page ------------------------------------------------------------------------

@dataclass
class Failure:
    block: Block
    command: Command
    why: str
    tail: str

    def __str__(self) -> str:
        return (f"{self.block.page}:{self.command.line} ({self.block.lang} block at line "
                f"{self.block.line}): {self.why}\n$ {self.command.text}\n"
                f"--- last lines of its output ---\n{self.tail}")


Step = tuple[Block, Command]


def page_script(page_blocks: list[Block], scripts: Path) -> tuple[str, list[Step]]:
    """The bash script of a page's runnable blocks, and its steps: (block, command) each.

    Each command is preceded by a line naming its step (so the output can be cut into
    commands) and followed by a check of its exit status, ``set -e`` made explicit so that
    the status is printed; a python block is written to a file under ``scripts`` and run
    with ``.venv/bin/python``, the interpreter the pages name.
    """
    lines: list[str] = []
    steps: list[Step] = []
    for block in page_blocks:
        if not block.runs:
            continue
        if block.lang in PYTHON:
            source = scripts / f"{Path(block.page).stem}-{block.line}.py"
            source.write_text(block.body + "\n")
            commands = [(Command(block.line + 1, block.body),
                         f".venv/bin/python {shlex.quote(str(source))}")]
        else:
            commands = [(c, c.text) for c in block.to_run()]
        for command, text in commands:
            lines += [f"printf '\\n{STEP}%d %s\\n' {len(steps)} \"$EPOCHREALTIME\"", text,
                      f"status=$?; [ $status -eq 0 ] || {{ printf '\\n{STEP}exit %d\\n' "
                      f"$status; exit $status; }}"]
            steps.append((block, command))
    return "\n".join(lines) + "\n", steps


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """``env -i``: a new login's PATH and HOME, and nothing else but ``extra``."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), **extra}


def run_script(script: Path, cwd: Path, env: dict[str, str], timeout_s: float
               ) -> tuple[int | None, str]:
    """Run the bash ``script`` in ``cwd`` and ``env``, with no input (a command reading
    stdin gets end-of-file at once): (exit status, or None when it ran past ``timeout_s``
    and was killed with everything it started; stdout and stderr together)."""
    proc = subprocess.Popen(["bash", "--noprofile", "--norc", str(script)], cwd=cwd, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace",
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
        return proc.returncode, output
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return None, output
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def split_steps(output: str) -> dict[int, str]:
    """The output of each step, by step number (-1: before the first)."""
    parts: dict[int, str] = {}
    current = -1
    for line in output.splitlines():
        if line.startswith(STEP):  # a step's start, or the exit status after it
            tag = line[len(STEP):].split()
            if tag and tag[0].isdigit():
                current = int(tag[0])
                parts[current] = ""  # it started, whether it prints or not
            continue
        parts[current] = parts.get(current, "") + line + "\n"
    return parts


def step_times(output: str, end: float) -> dict[int, float]:
    """Seconds each step took, from the start times its marker line carries; the last one
    until ``end`` (the shell's exit, on the same clock: ``time.time()``)."""
    starts = [(int(m[1]), float(m[2])) for m in
              re.finditer(rf"^{re.escape(STEP)}(\d+) ([\d.]+)$", output, flags=re.M)]
    ends = [t for _, t in starts[1:]] + [end]
    return {n: stop - start for (n, start), stop in zip(starts, ends, strict=True)}


def failures(steps: list[Step], status: int | None, output: str, tail_lines: int = 40
             ) -> list[Failure]:
    """A failure for the step that exited non-zero (or ran out of time) and one for every
    step whose output holds a Python traceback."""
    parts = split_steps(output)
    found: list[Failure] = []

    def tail(n: int) -> str:
        return "\n".join(parts.get(n, "").rstrip("\n").splitlines()[-tail_lines:])

    for n, (block, command) in enumerate(steps):
        if TRACEBACK in parts.get(n, ""):
            found.append(Failure(block, command, "printed a Python traceback", tail(n)))
    if status == 0 or not steps:
        return found
    exited = re.search(rf"^{re.escape(STEP)}exit (\d+)$", output, flags=re.M)
    if status is None:
        why = "ran past the page's time limit"
    elif exited:
        why = f"exited with status {exited[1]}"
    else:  # bash itself stopped: a quote or a bracket left open swallows what follows
        why = f"the page's shell stopped with status {status} (a syntax error?)"
    last = max((n for n in parts if n >= 0), default=None)
    if last is None:
        return [*found, Failure(*steps[0], f"{why}, before its first command",
                                output[-3000:])]
    return [*found, Failure(*steps[last], why, tail(last))]


@dataclass
class PageRun:
    """What running a page gave: its failures and how long each command took."""

    failures: list[Failure]
    seconds: list[tuple[Command, float]]

    def slowest(self, count: int = 3) -> str:
        ranked = sorted(self.seconds, key=lambda c: -c[1])[:count]
        return "; ".join(f"line {c.line}: {s:.1f} s" for c, s in ranked)


def run_page(page_blocks: list[Block], clone: Path, env: dict[str, str], scripts: Path,
             timeout_s: float) -> PageRun:
    """Run a page's blocks in order in one bash process in ``clone`` (so that ``cd``,
    ``source`` and variables carry over as for a reader), with ``env`` only."""
    scripts.mkdir(parents=True, exist_ok=True)
    text, steps = page_script(page_blocks, scripts)
    script = scripts / "page.sh"
    script.write_text(text)
    status, output = run_script(script, clone, env, timeout_s)
    times = step_times(output, time.time())
    return PageRun(failures(steps, status, output),
                   [(command, times.get(n, 0.0)) for n, (_, command) in enumerate(steps)])
