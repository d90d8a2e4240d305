"""Write notebooks/NAME.ipynb from each percent-format source notebooks/NAME.py.

The sources are the notebooks (edit them, not the ``.ipynb``): plain Python that ruff lints,
split into cells the way jupytext's "percent" format does:

- ``# %%`` starts a code cell; ``# %% [markdown]`` a Markdown cell, whose lines are
  ``# text`` (or a bare ``#`` for a blank line);
- after the marker, ``key=<JSON>`` pairs become cell metadata (``# %% tags=["parameters"]``);
- in a code cell, a commented IPython magic (``# %matplotlib inline``) is uncommented;
- blank lines around a cell are dropped; a cell left empty is skipped.

Each ``.ipynb`` is nbformat v4 without outputs, with stable cell ids, written the same way
every time (regenerating gives identical bytes), so the committed files diff cleanly.
``--check`` writes nothing and exits 1 when a notebook is missing, differs from its source,
or has no source (the test suite runs it).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import nbformat

HERE = Path(__file__).resolve().parent
#: The notebooks: every notebooks/*.py but this builder, by name (the .ipynb's stem).
NOTEBOOKS = sorted(p.stem for p in HERE.glob("*.py") if p.name != Path(__file__).name)

MARKER = re.compile(r"^# %%(?P<rest>.*)$")
MAGIC = re.compile(r"^(?P<indent>\s*)# (?P<magic>%{1,2}[A-Za-z].*)$")  # jupytext's escape
METADATA = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"}}


class SourceError(ValueError):
    """A source file that is not in the percent format; the message names file and line."""


def _options(text: str, where: str) -> tuple[str, dict[str, Any]]:
    """What follows ``# %%``: the cell type and the ``key=<JSON>`` metadata."""
    text = text.strip()
    kind = "code"
    if text.startswith("[markdown]"):
        kind, text = "markdown", text[len("[markdown]"):].strip()
    metadata: dict[str, Any] = {}
    decoder = json.JSONDecoder()
    while text:
        key, sep, rest = text.partition("=")
        if not sep or not key.isidentifier():
            raise SourceError(f"{where}: expected key=<JSON> after the cell marker, got {text!r}")
        try:
            metadata[key], end = decoder.raw_decode(rest)
        except json.JSONDecodeError as exc:
            raise SourceError(f"{where}: {key}: not a JSON value: {exc}") from None
        text = rest[end:].strip()
    return kind, metadata


def parse(text: str, name: str = "<source>") -> list[tuple[str, str, dict[str, Any]]]:
    """A percent-format source -> its cells as (kind, source, metadata), in order.

    Raises SourceError for text before the first marker, a malformed marker or a Markdown
    line that is not a comment."""
    cells: list[tuple[str, list[str], dict[str, Any]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        where = f"{name}:{number}"
        marker = MARKER.match(line)
        if marker:
            kind, metadata = _options(marker["rest"], where)
            cells.append((kind, [], metadata))
        elif not cells:
            if line.strip():
                raise SourceError(f"{where}: text before the first '# %%' cell marker")
        elif cells[-1][0] == "markdown":
            if line.strip() and not (line == "#" or line.startswith("# ")):
                raise SourceError(f"{where}: a Markdown cell's lines start with '# '")
            cells[-1][1].append(line[2:])
        else:
            magic = MAGIC.match(line)
            cells[-1][1].append(f"{magic['indent']}{magic['magic']}" if magic else line)
    out = []
    for kind, lines, metadata in cells:
        source = "\n".join(lines).strip("\n")
        if source.strip():
            out.append((kind, source, metadata))
    return out


def notebook(name: str) -> nbformat.NotebookNode:
    """The notebook of notebooks/NAME.py (validated)."""
    path = HERE / f"{name}.py"
    nb = nbformat.v4.new_notebook()
    nb.metadata = json.loads(json.dumps(METADATA))
    for i, (kind, source, metadata) in enumerate(parse(path.read_text(), path.name)):
        new = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
        cell = new(source, metadata=metadata)
        cell.id = f"{name[:2]}-{i:02d}"  # stable ids: the files diff cleanly
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def render(name: str) -> str:
    """The bytes of notebooks/NAME.ipynb, as text."""
    return nbformat.writes(notebook(name)) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a notebook differs from its source; write nothing")
    args = parser.parse_args(argv)
    stale = []
    try:
        for name in NOTEBOOKS:
            path = HERE / f"{name}.ipynb"
            text = render(name)
            if path.is_file() and path.read_text() == text:
                continue
            if args.check:
                stale.append(path.name)
            else:
                path.write_text(text)
                print(f"wrote {path}")
    except SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    orphans = sorted(p.name for p in HERE.glob("*.ipynb") if p.stem not in NOTEBOOKS)
    if orphans:
        print(f"no source notebooks/NAME.py for: {', '.join(orphans)}", file=sys.stderr)
        return 1
    if stale:
        print(f"out of date (run python notebooks/build_notebooks.py): {', '.join(stale)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
