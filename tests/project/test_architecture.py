"""The layering: no import cycles among sim's modules, and no executor branching on
strategy names (what a strategy does is its rules')."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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


def test_only_the_strategy_table_names_strategies():
    """A strategy's facts live in its row (sim/training/strategies.py): nothing in sim/ or
    notebooks/ compares a name with a strategy's."""
    table = SIM / "training" / "strategies.py"
    places = [p for p in (*SIM.rglob("*.py"), *(ROOT / "notebooks").glob("*.py")) if p != table]
    hits = [f"{p.relative_to(ROOT)}:{n}" for p in places
            for n, line in enumerate(p.read_text().splitlines(), 1) if STRATEGY_BRANCH.search(line)]
    assert hits == []


def test_readme_points_only_inside_the_repository():
    """A clone has no ../shared: the README's links and paths stay inside the repository,
    and every repository path it names in backquotes exists."""
    import re

    root = Path(__file__).resolve().parents[2]
    text = (root / "README.md").read_text()
    assert "../" not in text
    for link in re.findall(r"\]\(([^)#][^)]*)\)", text):
        assert link.startswith("http") or (root / link).exists(), link
    named = set(re.findall(r"`((?:sim|native|notebooks|experiments|tests)/[\w./-]*)`", text))
    missing = [p for p in named if "*" not in p and "<" not in p
               and not any((root / f"{p}{ext}").exists() for ext in ("", ".py"))]
    assert not missing, missing


# ---- the layers (docs/architecture.md): a module imports only from layers below its own ----

LAYERS: list[tuple[str, ...]] = [  # top to bottom
    ("sim.__main__", "sim.docs"),  # entry points: the CLI, and the docs' generated pages
    ("sim.cli",),
    ("sim.commands",),
    ("sim.validation", "sim.bench", "sim.papers"),
    ("sim.calibration",),  # measures with real ranks, fits, writes profiles
    ("sim.analysis",),
    ("sim.sweep",),
    ("sim.plots",),
    ("sim.simulated", "sim.real"),
    ("sim.training",),
    ("sim.network", "sim.faults", "sim.workloads"),
    ("sim.config", "sim.results", "sim.kernels", "sim.seeds", "sim.progress"),
    ("sim.recorder", "sim.calibrated"),
    ("sim.rundir",),
    ("sim.trace", "sim.stats", "sim.names", "sim.quick", "sim.machine"),
    ("sim.errors", "sim._native", "sim"),
]


def layer_of(module: str) -> tuple[int, str]:
    """(the layer's index from the top, the top-level part) of a sim module."""
    for index, parts in enumerate(LAYERS):
        for part in parts:
            if module == part or module.startswith(part + "."):
                return index, part
    raise AssertionError(f"{module}: in no layer of LAYERS")


def test_every_module_imports_only_from_layers_below_it():
    """Same-layer imports stay inside one part (a package or module): the two executors never
    import each other, nor do the network, failure and workload models."""
    mods = modules()
    known = set(mods) | {"sim._native"}
    wrong = []
    for name, path in sorted(mods.items()):
        layer, part = layer_of(name)
        for target in sorted(imports(name, path, known)):
            if target == "sim" and part != "sim":
                continue  # `from sim import kernels`: names the module, checked below
            t_layer, t_part = layer_of(target)
            if t_layer < layer or (t_layer == layer and t_part != part and part != "sim"):
                wrong.append(f"{name} -> {target}")
    assert wrong == [], "\n".join(wrong)


def test_one_module_imports_the_c_library():
    """sim/kernels/library.py is the only importer of ``sim._native``: every other module
    reaches the C kernels through sim.kernels' checked wrappers."""
    mods = modules()
    known = set(mods) | {"sim._native"}
    importers = sorted(name for name, path in mods.items()
                       if "sim._native" in imports(name, path, known))
    assert importers == ["sim.kernels.library"]


def test_no_two_modules_share_a_file_name():
    """A module's name says what it is about without its folder (no second recovery.py)."""
    names: dict[str, list[str]] = {}
    for path in SIM.rglob("*.py"):
        if path.name != "__init__.py":
            names.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in names.items() if len(paths) > 1} == {}
