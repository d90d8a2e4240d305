"""``calibrated:PATH`` profiles: the one place that reads a measured profile from disk.

Every setting that takes a preset name (``cluster.fabric``, ``compute.device``,
``cluster.host``, ``checkpoint.storage``) also takes ``calibrated:PATH``, a JSON object
written by ``sim calibrate`` whose optional ``format`` names what it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sim.names import unknown

CALIBRATED = "calibrated:"



def preset_or_path(spec: str, presets: dict[str, Any], what: str) -> tuple[Any, Path | None]:
    """(the preset named ``spec``, None), or (None, PATH) for ``calibrated:PATH``. Raises
    ValueError for an unknown name, listing the presets."""
    if spec.startswith(CALIBRATED):
        return None, Path(spec[len(CALIBRATED):])
    if spec not in presets:
        raise ValueError(f"{unknown(what, spec, presets)} or {CALIBRATED}PATH")
    return presets[spec], None


def read_profile(path: Path, fmt: str, what: str) -> dict[str, Any]:
    """A calibrated profile: a JSON object whose optional ``format`` is ``fmt``. Raises
    ValueError starting "``what`` PATH:"."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{what} {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("format", fmt) != fmt:
        raise ValueError(f"{what} {path}: expected a JSON object of format {fmt!r}")
    return data
