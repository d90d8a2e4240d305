"""Names a user types: experiment names for config paths, and "did you mean" for typos.

:func:`config_path` is the one resolver every command taking a config uses, so
``python -m sim run quickstart`` finds what ``python -m sim list experiments`` prints.
:func:`unknown` words the error for a name not in a registry (strategy kinds, fabric
presets, topologies, models, data sets, host profiles, experiments), :func:`unknown_key`
the one for a config key the schema lacks, and :func:`literal_hint` the hint for a value
outside a key's fixed set; each suggests the closest known name.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel

from sim.errors import UserError

# the checkout's experiments; an installed package carries a copy inside it instead
# (native/build.py puts experiments/ there when it builds the package)
CHECKOUT_EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
PACKAGED_EXPERIMENTS = Path(__file__).resolve().parent / "experiments"
CONFIG_HELP = ("experiment config: a TOML file, or an experiment's name "
               "(`python -m sim list experiments`)")


def edit_distance(a: str, b: str) -> int:
    """Levenshtein's distance: the fewest insertions, deletions and substitutions that
    turn ``a`` into ``b``."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        current = [i]
        for j, y in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def close_match(name: str, known: Iterable[str]) -> str | None:
    """The known name closest to ``name`` (difflib's ratio at least 0.6) if it is also a
    typo away (at most a third of ``name``'s characters to change, at least 2) or its
    start (``nvlink2`` of ``nvlink2-v100``). None otherwise, so an unrelated name is never
    suggested (``missing.toml`` is not a misspelt ``syntax.toml``)."""
    matches = difflib.get_close_matches(name, list(known), n=3)
    near = [m for m in matches if m.startswith(name)
            or edit_distance(name, m) <= max(2, len(name) // 3)]
    return near[0] if near else None


def unknown(what: str, name: str, known: Iterable[str]) -> str:
    """One line for a name not in ``known``: "unknown WHAT 'x' (did you mean 'y'?);
    expected one of a, b, c" (the suggestion only when one is close)."""
    known = list(known)
    match = close_match(name, known)
    hint = f" (did you mean {match!r}?)" if match else ""
    return f"unknown {what} {name!r}{hint}; expected one of {', '.join(known)}"


# ---- config keys: the schema's tables, walked along a dotted path --------------------

def _table(annotation: Any) -> type[BaseModel] | None:
    """The table (model) an annotation holds (``Slowdown`` in ``list[Slowdown]``), or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next(filter(None, map(_table, get_args(annotation))), None)


def _table_at(root: type[BaseModel], path: Sequence[str | int]) -> type[BaseModel] | None:
    """The table at ``path`` below ``root`` (list indices skipped), or None where the path
    leaves the schema's tables (a value, or a free-form table: [sweep], a custom fabric)."""
    table: type[BaseModel] | None = root
    for part in path:
        if isinstance(part, int):
            continue
        field = table.model_fields.get(part) if table else None
        if field is None:
            return None
        table = _table(field.annotation)
    return table


def field_at(root: type[BaseModel], path: Sequence[str | int]) -> Any:
    """The schema's field (pydantic ``FieldInfo``) at ``path``, or None where the path
    leaves the schema's tables or names no key."""
    table = _table_at(root, path[:-1])
    return table.model_fields.get(str(path[-1])) if table is not None and path else None


def unknown_key(root: type[BaseModel], path: Sequence[str | int]) -> str | None:
    """Why ``path`` names no key of ``root`` ("strategy.stalenes: unknown key (did you mean
    strategy.staleness?)"), or None if it does or the schema does not fix the keys there."""
    for i, part in enumerate(path):
        table = _table_at(root, path[:i])
        if isinstance(part, int) or table is None:
            continue
        if part not in table.model_fields:
            where = ".".join(map(str, path[:i]))
            prefix = f"{where}." if where else ""
            match = close_match(part, table.model_fields)
            hint = (f" (did you mean {prefix}{match}?)" if match else
                    f"; {where or 'a config'} has {', '.join(table.model_fields)}")
            return f"{prefix}{part}: unknown key{hint}"
    return None


def _literals(annotation: Any) -> list[str]:
    """The values a ``Literal[...]`` annotation (possibly inside a union) allows."""
    if get_origin(annotation) is Literal:
        return [str(value) for value in get_args(annotation)]
    return [value for arg in get_args(annotation) for value in _literals(arg)]


def literal_hint(root: type[BaseModel], loc: Sequence[str | int], got: Any) -> str:
    """" (did you mean 'topk'?)" when ``got`` is close to a value the key at ``loc``
    allows (a ``Literal``), else ""."""
    table = _table_at(root, loc[:-1])
    field = table.model_fields.get(str(loc[-1])) if table and loc else None
    if field is None or not isinstance(got, str):
        return ""
    match = close_match(got, _literals(field.annotation))
    return f" (did you mean {match!r}?)" if match else ""


# ---- experiment names ----------------------------------------------------------------

def experiment_dirs() -> list[Path]:
    """Where experiment names are looked up: ./experiments, then the checkout's, then the
    installed package's (so `sim run quickstart` works after `pip install` anywhere)."""
    dirs: list[Path] = []
    for folder in (Path("experiments"), CHECKOUT_EXPERIMENTS, PACKAGED_EXPERIMENTS):
        if folder.is_dir() and not any(d.resolve() == folder.resolve() for d in dirs):
            dirs.append(folder)
    return dirs


def experiments() -> dict[str, Path]:
    """Experiment name (a run config's path under an experiments folder, without ``.toml``:
    ``quickstart``, ``validation/base``) -> its path; the first directory of
    :func:`experiment_dirs` holding a name wins. A TOML file that is no run config (the
    validation matrix, the papers' files) is left out."""
    found: dict[str, Path] = {}
    for folder in experiment_dirs():
        for path in sorted([*folder.glob("*.toml"), *folder.glob("*/*.toml")]):
            name = path.relative_to(folder).with_suffix("").as_posix()
            if name not in found and _is_run_config(path):
                found[name] = path
    return dict(sorted(found.items()))


def _is_run_config(path: Path) -> bool:
    """Whether ``path``'s top level holds tables only, as a run config's sections are (the
    validation matrix has keys there, a paper file its list of figures); an unreadable file
    is left to whoever runs it to say why."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return True
    return all(isinstance(value, dict) for value in data.values())


def config_path(text: str) -> Path:
    """The config file ``text`` names: a path to a TOML file, or an experiment's name as
    ``python -m sim list experiments`` prints it (``quickstart``, ``quickstart.toml`` or
    ``validation/base``, looked up in ``experiments/``).

    A path that exists nowhere is returned as given (reading it says "no such config
    file"); a bare name that is no experiment raises UserError with the closest one."""
    path = Path(text)
    if path.is_file() or path.is_absolute():
        return path
    relative = path if path.suffix == ".toml" else path.with_name(path.name + ".toml")
    for folder in experiment_dirs():
        if (folder / relative).is_file():
            return folder / relative
    if len(path.parts) == 1 and path.suffix in ("", ".toml") and (names := experiments()):
        match = close_match(path.stem, names)
        hint = f" (did you mean {match!r}?)" if match else ""
        raise UserError(f"{text}: neither a config file nor an experiment{hint}; "
                        f"experiments: {', '.join(names)}")
    return path
