"""The layering: no import cycles among sim's modules, and no executor branching on
strategy names (what a strategy does is its rules')."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIM = ROOT / "sim"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in SIM.rglob("*.py")}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The sim modules ``path`` imports anywhere (functions and TYPE_CHECKING included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `from m import f` names m.f
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (module -> modules it imports), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_sim_has_no_import_cycles():
    mods = modules()
    known = set(mods)
    # a package's __init__ importing its own submodules is how packages re-export: not a cycle
    graph = {name: {m for m in imports(name, path, known)
                    if not (path.name == "__init__.py" and m.startswith(name + "."))}
             for name, path in mods.items()}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


STRATEGY_BRANCH = re.compile(
    r"(\bkind|\.kind|strategy)\s*(==|!=|\bin\b)\s*[(\[{]?\s*[\"'](bsp|bsp-ps|backup|asp|ssp|"
    r"local-sgd|easgd)[\"']")


def test_executors_do_not_branch_on_strategy_names():
    places = [*(SIM / "real").rglob("*.py"), *(SIM / "training").rglob("*.py")]
    hits = [f"{p.relative_to(ROOT)}:{n}" for p in places
            for n, line in enumerate(p.read_text().splitlines(), 1) if STRATEGY_BRANCH.search(line)]
    assert hits == []


def test_readme_points_only_inside_the_repository():
    """A clone has no ../shared: the README's links and paths stay inside the repository,
    and every repository path it names in backquotes exists."""
    import re

    root = Path(__file__).resolve().parents[1]
    text = (root / "README.md").read_text()
    assert "../" not in text
    for link in re.findall(r"\]\(([^)#][^)]*)\)", text):
        assert link.startswith("http") or (root / link).exists(), link
    named = set(re.findall(r"`((?:sim|native|notebooks|experiments|tests)/[\w./-]*)`", text))
    missing = [p for p in named if "*" not in p and "<" not in p
               and not any((root / f"{p}{ext}").exists() for ext in ("", ".py"))]
    assert not missing, missing
