"""Sizes with units: parse ``100MB`` / ``1GiB`` / ``4096`` / ``1e6``, and print them back."""

from __future__ import annotations

import math
import re

# Decimal SI and binary IEC byte units (case-insensitive); bare numbers are bytes.
_BYTE_UNITS: dict[str, int] = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_bytes(text: str) -> int:
    """``"100MB"`` -> 100_000_000, ``"1GiB"`` -> 1_073_741_824, ``"1e6"`` -> 1_000_000.

    Raises ValueError when the text is not a number with an optional byte unit
    (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB) or is not a whole number of bytes.
    """
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _BYTE_UNITS:
        units = ", ".join(u for u in ("B", "kB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB"))
        raise ValueError(f"expected a size like 100MB, 1GiB or 4096 (units: {units}), "
                         f"got {text!r}")
    value = float(match.group(1)) * _BYTE_UNITS[unit]
    if not math.isfinite(value) or value != round(value):
        raise ValueError(f"expected a whole number of bytes, got {text!r} = {value} bytes")
    return int(round(value))


def format_bytes(n: float) -> str:
    """1e8 -> '100 MB' (decimal units, 3 significant digits)."""
    return _scaled(n, ("B", "kB", "MB", "GB", "TB"))


def format_rate(bytes_per_s: float) -> str:
    """12.5e9 -> '12.5 GB/s'."""
    return _scaled(bytes_per_s, ("B/s", "kB/s", "MB/s", "GB/s", "TB/s"))


def format_seconds(t: float) -> str:
    """0.0123 -> '12.3 ms'."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if abs(t) >= scale or scale == 1e-9:
            return f"{t / scale:.4g} {unit}"
    raise AssertionError("unreachable")


def _scaled(value: float, units: tuple[str, ...]) -> str:
    index = 0
    while abs(value) >= 1000 and index < len(units) - 1:
        value /= 1000
        index += 1
    return f"{value:.4g} {units[index]}"
