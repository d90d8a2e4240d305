"""Config validity has one home: the validator (sim/training/validator.py, with what real
runs support in sim/training/real_checks.py), the schema (sim/config.py) and the strategy
rows (sim/training/strategies.py). No other module words an error about a config key, and
the real ranks never call the validator: they receive a config it already accepted."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from sim.config import Config, dump_config
from sim.real.executors.rank_spec import RankSpec
from sim.training.validator import validate

ROOT = Path(__file__).resolve().parents[2]
SIM = ROOT / "sim"

VALIDATOR = {"sim/training/validator.py", "sim/training/real_checks.py",
             "sim/training/engine_checks.py"}
HOMES = VALIDATOR | {"sim/config.py", "sim/training/strategies.py"}
# the config's tables; [sweep] is the grid's own input (sim/sweep/grid.py words its shape)
SECTIONS = ("cluster", "workload", "strategy", "parallel", "embeddings", "compute", "run",
            "faults", "checkpoint")
# errors that name a key but are about another input: (module, the message's start)
OWN_INPUTS = {
    # the validation matrix's calibrated profiles: a twin of a gRPC run needs one measured
    ("sim/validation/matrix.py", "{}: cluster.transport = {} needs a calibrated transport"),
}
# "cluster.workers: ...", or "{source}: cluster.workers ...": an error naming a config key
KEY_ERROR = re.compile(rf"^(\{{\}}: )?({'|'.join(SECTIONS)})\.[a-z_]+\b")


def _text(node: ast.expr) -> str | None:
    """A message's literal text, each formatted value as ``{}``; None if it is not a string."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left = _text(node.left)
        return None if left is None else left + (_text(node.right) or "{}")
    return None


def key_errors(path: Path) -> list[tuple[int, str]]:
    """The config-key errors ``path`` raises, (line, text): ``raise UserError("section.key:
    ...")`` or ValueError."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
            continue
        func = node.exc.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if name in ("UserError", "ValueError") and node.exc.args:
            text = _text(node.exc.args[0])
            if text is not None and KEY_ERROR.match(text):
                found.append((node.lineno, text))
    return found


def test_the_grep_finds_the_validators_key_errors():
    """The pattern sees the errors where they are (else the next test proves nothing)."""
    assert len(key_errors(SIM / "training" / "validator.py")) > 30
    assert len(key_errors(SIM / "training" / "real_checks.py")) > 15


def test_only_the_validator_raises_config_key_errors():
    outside = [f"{module}:{line}: {text[:60]}" for path in sorted(SIM.rglob("*.py"))
               if (module := str(path.relative_to(ROOT))) not in HOMES
               for line, text in key_errors(path)
               if not any(module == m and text.startswith(start) for m, start in OWN_INPUTS)]
    assert not outside, "config-key errors outside the validator:\n" + "\n".join(outside)


def _imports(path: Path) -> set[str]:
    """The modules ``path`` imports anywhere (inside functions too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def _module_path(name: str) -> Path | None:
    path = ROOT / Path(*name.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def test_the_real_ranks_never_reach_the_validator():
    """Every module a rank program can import (from sim/real/executors/, followed through
    sim/) leaves the validator out: the ranks trust the config in their spec."""
    seen: set[str] = set()
    todo = [f"sim.real.executors.{p.stem}" for p in (SIM / "real" / "executors").glob("*.py")]
    while todo:
        name = todo.pop()
        path = _module_path(name)
        if name in seen or path is None:
            continue
        seen.add(name)
        todo += [m for m in _imports(path) if m.startswith("sim.")]
    validators = {f"sim.{p.removeprefix('sim/').removesuffix('.py').replace('/', '.')}"
                  for p in VALIDATOR}
    assert "sim.real.executors.rank" in seen
    assert not seen & validators, sorted(seen & validators)


def test_a_rank_spec_carries_the_resolved_config_unchanged(tiny_config_data, tmp_path):
    """The spec's config reads back equal to the parent's, and resolves to the same
    config.toml, byte for byte."""
    config = validate(tiny_config_data(workload__model="mlp", compute__time_s=1e-3,
                                       cluster__fabric={"base": "ib-hdr", "latency_s": 2e-6}))
    spec = RankSpec(config, tmp_path, tmp_path / "result.json", "shm", "mpi", "schedule",
                    "spin", 1, {"elastic": True})
    back = RankSpec.from_json(spec.to_json())
    assert back == spec and back.elastic
    assert dump_config(back.config) == dump_config(config)
    assert json.loads(spec.to_json())["config"] == config.model_dump(mode="json")


def test_a_config_is_frozen():
    config = Config()
    try:
        config.cluster.workers = 8  # type: ignore[misc]
    except ValueError:  # pydantic's ValidationError: the instance is frozen
        pass
    else:
        raise AssertionError("a Config took an assignment")
    assert config.cluster.workers == 4
