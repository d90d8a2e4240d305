"""The documentation site: it builds with --strict (no broken link, no page outside the nav),
its generated reference pages are what the code generates now, README.md stays short, and
every repository path the pages name exists."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# backquoted repository paths, as tests/project/test_architecture.py reads them in README.md
REPO_PATH = re.compile(r"`((?:sim|native|notebooks|experiments|tests)/[\w./-]*)`")


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def nav_pages(node) -> list[str]:
    """Every page named in mkdocs.yml's nav (its entries: strings, lists, {title: entry})."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [p for item in node for p in nav_pages(item)]
    if isinstance(node, dict):
        return [p for item in node.values() for p in nav_pages(item)]
    return []


def test_generated_reference_pages_are_up_to_date():
    from sim.docs import pages as generated

    stale = [str(path.relative_to(ROOT)) for path, text in generated().items()
             if not path.exists() or path.read_text() != text]
    assert not stale, f"{stale}: run `make docs` (or python -m sim.docs) and commit them"


def test_every_page_is_in_the_nav_and_every_nav_entry_exists():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed = nav_pages(config["nav"])
    assert len(listed) == len(set(listed)), "a page is in the nav twice"
    on_disk = {str(p.relative_to(DOCS)) for p in pages()}
    assert sorted(on_disk - set(listed)) == [], "pages missing from mkdocs.yml's nav"
    assert sorted(set(listed) - on_disk) == [], "nav entries with no page"


def test_site_builds_strictly(tmp_path):
    """mkdocs --strict fails on a broken link or anchor and on a page left out of the nav."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").exists()


def test_readme_is_short_and_keeps_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 200, "README.md: the rest belongs in docs/"
    assert "make run" in text and "make test" in text


def test_docs_point_only_inside_the_repository():
    """Links stay inside the repository, and every repository path a page names in
    backquotes exists (docs/architecture.md writes the target layout's paths as plain text,
    so this does not read them)."""
    problems = []
    for page in pages():
        text = page.read_text()
        for link in re.findall(r"\]\(([^)#][^)]*)\)", text):
            target = link.split("#")[0]
            if link.startswith(("http://", "https://")) or not target:
                continue
            resolved = (page.parent / target).resolve()
            if not resolved.is_relative_to(ROOT) or not resolved.exists():
                problems.append(f"{page.relative_to(ROOT)}: link {link}")
        for path in set(REPO_PATH.findall(text)):
            if "*" in path or "<" in path:
                continue
            if not any((ROOT / f"{path}{ext}").exists() for ext in ("", ".py")):
                problems.append(f"{page.relative_to(ROOT)}: `{path}` does not exist")
    assert not problems, problems


def test_the_architecture_page_names_every_package_and_top_level_module():
    """docs/architecture.md is the map of sim/: every package (a folder with an __init__.py)
    and every module directly in sim/ is named there in backquotes, so a new one cannot be
    added without a line saying what it owns."""
    text = (DOCS / "architecture.md").read_text()
    named = set(REPO_PATH.findall(text))
    sim = ROOT / "sim"
    wanted = {f"{p.parent.relative_to(ROOT)}/" for p in sim.rglob("__init__.py")} - {"sim/"}
    wanted |= {str(p.relative_to(ROOT)) for p in sim.glob("*.py") if p.name != "__init__.py"}
    missing = sorted(p for p in wanted if p not in named)
    assert not missing, f"docs/architecture.md does not name {missing}"


def test_the_readme_lists_every_shipped_experiment():
    """The README's experiment table names exactly the experiments `sim list experiments`
    shows (issue 47: it left out pipeline-bubble and data-vs-model-parallel)."""
    from sim.commands.list import experiments

    shipped = {line.split()[0] for line in experiments() if line and not line.startswith(" ")}
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Experiments"):]
    table = table[:table.index("\n\n", table.index("|---|"))]
    named = set(re.findall(r"^\| `([\w/-]+)` \|", table, re.M))
    assert named == shipped
