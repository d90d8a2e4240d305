"""Calibration has one home (issue 45): every profile is written through sim/calibrated.py,
and one calibrate() sequence serves ``sim calibrate``, ``sim validate`` and ``--twin``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIM = ROOT / "sim"
CALIBRATED = SIM / "calibrated.py"

# what marks a write as a profile's: a profile's file name or format
PROFILE = re.compile(r"\b(device|fabric|host|storage|recovery|transport)\.json\b|-profile/|"
                     r"PROFILE_FORMAT|RECOVERY_FORMAT|calibrated:")
# what writes a file's text
WRITES = {"dump", "write_atomic", "write_text", "write_bytes"}
# what reads a JSON file back, and a read from a file named for a profile's kind
READS = {"load", "loads", "read_profile"}
KIND = re.compile(r"\b(host|device|fabric|storage|transport|recovery)(_json)?\b")
# the JSON the calibration package writes that is not a profile: netbench's spec and
# result, and the record of a validation's fits beside its profiles
NOT_PROFILES = {("measure_fabric", "netbench"), ("netbench", "main"), ("sequence", "calibrate")}


def functions(path: Path) -> list[ast.FunctionDef]:
    """Every function of ``path``, methods and nested ones included."""
    return [node for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]


def calls(function: ast.AST, names: set[str]) -> list[ast.Call]:
    """The calls of ``names`` in ``function``'s own code (not a nested function's)."""
    found, todo = [], list(ast.iter_child_nodes(function))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else \
                getattr(node.func, "id", "")
            if name in names:
                found.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return found


def writes_a_profile(function: ast.AST, text: str) -> bool:
    """Whether ``function`` writes a file naming a profile (its file or format), or dumps
    JSON it read from a profile (``data = json.loads(host_json.read_text())`` or
    ``read_profile(...)``, then ``write(json.dumps(data))``, or both in one call)."""
    def from_profile(node: ast.AST) -> bool:
        return any(PROFILE.search(source) or KIND.search(source) or "read_profile" in source
                   for source in (ast.get_source_segment(text, c) or ""
                                  for c in calls(ast.Expr(node), READS)))

    read = {target.id for node in ast.walk(function)
            if isinstance(node, ast.Assign) and from_profile(node.value)
            for target in node.targets if isinstance(target, ast.Name)}
    for call in calls(function, WRITES):
        if PROFILE.search(ast.get_source_segment(text, call) or ""):
            return True
        dumped = [arg for dump in [call, *calls(call, {"dumps"})]
                  if getattr(dump.func, "attr", "") in {"dump", "dumps"} for arg in dump.args[:1]]
        if any(from_profile(arg) or {n.id for n in ast.walk(arg)
                                     if isinstance(n, ast.Name)} & read for arg in dumped):
            return True
    return False


def test_profiles_have_one_writer():
    """No function outside sim/calibrated.py writes a profile (a file named by a profile's
    file name or format, or a JSON file it read, changed): each kind's writer goes through
    :func:`sim.calibrated.write_profile`, a fitted copy through ``write_profile_data``."""
    found = [f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
             for path in sorted(SIM.rglob("*.py")) if path != CALIBRATED
             for node in functions(path) if writes_a_profile(node, path.read_text())]
    assert found == [], "profiles written outside sim/calibrated.py:\n" + "\n".join(found)


def test_the_calibration_package_writes_json_only_through_calibrated():
    """In sim/calibration every JSON or text write that is not a profile is named here (so a
    new profile writer cannot hide behind an unmarked name)."""
    found = [f"{path.name}:{node.lineno} {node.name}"
             for path in sorted((SIM / "calibration").glob("*.py"))
             for node in functions(path)
             if calls(node, WRITES) and (path.stem, node.name) not in NOT_PROFILES]
    assert found == [], "\n".join(found)


def test_only_one_calibrate_sequence():
    """One ``calibrate`` in sim/, the sequence's; nothing else runs the calibration's phases
    (the validation re-times the kernels for drift, and that only)."""
    defined = [f"{path.relative_to(ROOT)}" for path in SIM.rglob("*.py")
               for node in functions(path) if node.name == "calibrate"]
    assert defined == ["sim/calibration/sequence.py"]
    phases = {"measure_kernels", "measure_network", "calibrate_host", "calibrate_recovery",
              "calibrate_transport", "measure_host"}
    callers = set()
    for path in SIM.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else \
                    getattr(node.func, "id", "")
                if name in phases:
                    callers.add((str(path.relative_to(ROOT)), name))
    assert callers - {("sim/validation/matrix.py", "measure_kernels")} == {
        ("sim/calibration/sequence.py", name) for name in phases}
