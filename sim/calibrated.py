"""``calibrated:PATH`` profiles: the one loader and the one writer of every measured profile.

Every setting that takes a preset name (``cluster.fabric``, ``compute.device``,
``cluster.host``, ``checkpoint.storage``) also takes ``calibrated:PATH``, a JSON object
written by ``sim calibrate`` whose optional ``format`` names what it is. A profile is a
dataclass: :func:`load_profile` builds it from the JSON by field name (a number field takes
a JSON number, a text field a string, a flag true or false), and :func:`write_profile` writes
its fields by name, beside ``format`` and the measurements it came from::

    {"format": "sgd-lab.host-profile/1", "name": ..., <every field by name>, "source": ...,
     <measurements: fits, samples, ... (read back by nothing but people)>}
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, TypeVar

from sim.names import unknown
from sim.rundir import write_atomic

CALIBRATED = "calibrated:"

P = TypeVar("P")


def load_profile(spec: str, presets: Mapping[str, P], profile: type[P], fmt: str, *,
                 what: str, preset: str | None = None, measurements: Collection[str] = (),
                 required: Collection[str] | None = None,
                 defaults: Callable[[Path], dict[str, Any]] | None = None) -> P:
    """The preset named ``spec``, or the ``profile`` dataclass read from ``calibrated:PATH``
    (a JSON object of format ``fmt``).

    ``what`` starts every error about the file ("device profile" -> "device profile PATH:
    ..."), ``preset`` names the presets in an unknown name's (default ``what``); ``measurements``:
    the other keys the profile's writer records beside the fields (kept in the file, not
    loaded); ``required``: the fields the file must have (default: those without a default
    in the dataclass and in ``defaults``); ``defaults(PATH)``: values of fields the file may
    leave out, e.g. a name from the file name. Raises ValueError for an unknown preset
    (listing the presets), an unreadable file, a missing, unknown or mistyped key (naming
    it), or a value the dataclass refuses.
    """
    named, path = preset_or_path(spec, presets, preset or what)
    if path is None:
        return named
    data = read_profile(path, fmt, what)
    fields = {f.name: f for f in dataclasses.fields(profile)}
    known = set(fields) | set(measurements) | {"format"}
    extra = sorted(set(data) - known)
    if extra:
        raise ValueError(f"{what} {path}: unknown key {extra[0]!r}; expected keys "
                         f"{', '.join(sorted(known))}")
    values = {**(defaults(path) if defaults else {}),
              **{k: _typed(path, what, k, v, fields[k].type) for k, v in data.items()
                 if k in fields}}
    needed = required if required is not None else [
        name for name, f in fields.items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [name for name in needed if name not in values]
    if missing:
        raise ValueError(f"{what} {path}: missing key {missing[0]!r}"
                         + (f" (and {', '.join(map(repr, missing[1:]))})" if missing[1:] else ""))
    try:
        return profile(**values)
    except ValueError as exc:
        raise ValueError(f"{what} {path}: {exc}") from None


def profile_json(profile: Any, fmt: str, **extra: Any) -> str:
    """The text of ``profile`` (a dataclass) as a calibrated profile of format ``fmt`` that
    :func:`load_profile` reads back: ``format``, every field by name, then ``extra`` (how it
    was measured: fits, samples; an extra ``source`` replaces the field's)."""
    return _text({"format": fmt, **dataclasses.asdict(profile), **extra})


def write_profile(path: str | Path, profile: Any, fmt: str, **extra: Any) -> Path:
    """Write :func:`profile_json` to ``path`` atomically; the path. Raises OSError."""
    return write_atomic(Path(path), profile_json(profile, fmt, **extra))


def write_profile_data(path: str | Path, data: dict[str, Any]) -> Path:
    """Write a profile's JSON object as :func:`read_profile` returned it, some values
    changed (a fit to real runs replacing a microbenchmark's), atomically, in the text
    :func:`profile_json` writes; the path. Raises OSError."""
    return write_atomic(Path(path), _text(data))


def _text(data: dict[str, Any]) -> str:
    """Every profile's text: its JSON object indented by 2, then a newline."""
    return json.dumps(data, indent=2) + "\n"


def preset_or_path(spec: str, presets: Mapping[str, Any], what: str) -> tuple[Any, Path | None]:
    """(the preset named ``spec``, None), or (None, PATH) for ``calibrated:PATH``. Raises
    ValueError for an unknown name, listing the presets."""
    if spec.startswith(CALIBRATED):
        return None, Path(spec[len(CALIBRATED):])
    if spec not in presets:
        raise ValueError(f"{unknown(what, spec, presets)} or {CALIBRATED}PATH")
    return presets[spec], None


def read_profile(path: Path, fmt: str, what: str) -> dict[str, Any]:
    """A calibrated profile's JSON object, whose optional ``format`` is ``fmt``. Raises
    ValueError starting "``what`` PATH:"."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{what} {path}: cannot read it as JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what} {path}: expected a JSON object")
    if data.get("format", fmt) != fmt:
        raise ValueError(f"{what} {path}: format {data['format']!r} is not {fmt!r}")
    return data


def _typed(path: Path, what: str, key: str, value: Any, annotation: Any) -> Any:
    """``value`` of field ``key`` as its annotation (float, str or bool, each optionally
    ``| None``) takes it: a JSON number (as a float), a string, true or false, or null where
    the field may be None. Raises ValueError naming the key."""
    kind = annotation if isinstance(annotation, str) else annotation.__name__
    if kind.endswith(" | None"):
        if value is None:
            return None
        kind = kind.removesuffix(" | None")
    if kind == "float":
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:  # an integer beyond a float's range
                raise ValueError(f"{what} {path}: {key} is beyond a float's range") from None
        expected = "a number"
    elif kind == "bool":
        if isinstance(value, bool):
            return value
        expected = "true or false"
    else:
        if isinstance(value, str):
            return value
        expected = "a string"
    raise ValueError(f"{what} {path}: {key} must be {expected}, got {value!r}")
