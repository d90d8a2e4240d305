"""Many series drawn by their swept axes instead of one legend entry each.

Beyond :data:`MAX_SERIES` lines, a figure of a sweep over several keys takes colour from the
key with the most values (at most the palette's ten), dashes from a key with at most four,
and one panel per combination of the keys left over; its legend has one column per styled
key, under the panels, so it never runs off the figure (issue 47: the pipeline-bubble sweep's
36 loss curves had 14 legend entries shown and colours repeated).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from matplotlib.lines import Line2D

from sim.plots import style as st
from sim.plots.legends import CLOCK, flatten, key_value, label_keys
from sim.training.strategies import fmt

MAX_SERIES = 10  # lines one legend lists; more are drawn by their axes
MAX_COLOURS = 10  # the palette's distinct colours
MAX_DASHES = 4  # distinct dash patterns
MAX_PANELS = 12


@dataclass(frozen=True)
class Facets:
    """Which key sets colour, dashes and panels, and each key's values in first-seen order."""

    colour_key: str
    dash_key: str | None
    panel_keys: tuple[str, ...]
    values: Mapping[str, tuple[Any, ...]]  # key -> its distinct values, formatted

    @property
    def panels(self) -> list[tuple[Any, ...]]:
        """Every combination of the panel keys' values that a config has, in order."""
        return list(self.values.get("panels", ((),)))

    def place(self, config: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """The panel index and the line style of ``config``'s series."""
        flat = flatten(config)
        colour = self.values[self.colour_key].index(fmt(flat.get(self.colour_key)))
        dash = 0 if self.dash_key is None else self.values[self.dash_key].index(
            fmt(flat.get(self.dash_key)))
        panel = self.panels.index(tuple(fmt(flat.get(k)) for k in self.panel_keys))
        return panel, {"color": st.colour(colour), "linestyle": st.dash(dash)}

    def panel_title(self, index: int) -> str:
        return ", ".join(key_value(k, v) for k, v in
                         zip(self.panel_keys, self.panels[index], strict=True))

    def product(self, configs: Sequence[Mapping[str, Any]]
                ) -> tuple[list[str], list[str]] | None:
        """The colour's and the dashes' values (named, in legend order) of ``configs`` when
        they are every pairing of those values, else None."""
        keys = [self.colour_key, *([self.dash_key] if self.dash_key else [])]
        flats = [flatten(c) for c in configs]
        values = [sorted({fmt(f.get(k)) for f in flats}, key=self.values[k].index)
                  for k in keys]
        if len(flats) != math.prod(map(len, values)):
            return None
        names = [[key_value(k, v) for v in vs] for k, vs in zip(keys, values, strict=True)]
        return names[0], (names[1] if len(names) > 1 else [])

    def describe(self, groups: Sequence[Sequence[Mapping[str, Any]]]) -> list[str]:
        """Notes naming groups of series that coincide, by their styled keys' values.
        Groups of one colour over several dash patterns share a note (``IB HDR and 10 GbE
        coincide for batch 8 and batch 16``): one fact, such as a fabric that changes no
        loss against updates, is said once rather than once per colour."""
        per_colour: dict[tuple[str, ...], list[str]] = {}
        notes = []
        for configs in groups:
            named = self.product(configs)
            if named is None:  # not a product: each series by its colour and dashes
                keys = [self.colour_key, *([self.dash_key] if self.dash_key else [])]
                notes.append(and_list([", ".join(key_value(k, fmt(flatten(c).get(k)))
                                                 for k in keys) for c in configs]))
            elif len(named[0]) == 1 and len(named[1]) > 1:
                per_colour.setdefault(tuple(named[1]), []).extend(named[0])
            elif named[1]:
                each = ", each" if len(named[0]) > 1 and len(named[1]) > 1 else ""
                notes.append(f"{and_list(named[0])}{each} with {and_list(named[1])}")
            else:
                notes.append(and_list(named[0]))
        return ([f"{and_list(list(dashes))} coincide for {and_list(colours)}"
                 for dashes, colours in per_colour.items()]
                + [f"{note} coincide" for note in notes])

    def legend(self, notes: Sequence[str] = ()) -> tuple[list[Any], list[str], int]:
        """Handles, texts and columns of the legend: one column per styled key, its name
        first, then a line per value (colour, or dashes in black); ``notes`` (which series
        coincide) as text alone under the shortest column, where the padding would be;
        short columns padded."""
        columns = [[(None, self.colour_key)] + [
            (Line2D([], [], color=st.colour(i)), key_value(self.colour_key, v))
            for i, v in enumerate(self.values[self.colour_key])]]
        if self.dash_key is not None:
            columns.append([(None, self.dash_key)] + [
                (Line2D([], [], color="0.2", linestyle=st.dash(i)),
                 key_value(self.dash_key, v))
                for i, v in enumerate(self.values[self.dash_key])])
        min(columns, key=len).extend((None, st.wrap(note, 30)) for note in notes)
        rows = max(map(len, columns))
        handles, texts = [], []
        for column in columns:  # a legend fills column by column
            for handle, text in column + [(None, "")] * (rows - len(column)):
                handles.append(handle or Line2D([], [], linestyle="none"))
                texts.append(text)
        return handles, texts, len(columns)


def and_list(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def facets(configs: Sequence[Mapping[str, Any]]) -> Facets | None:
    """How to draw one series per config by its keys, or None when a plain legend holds
    them: at most :data:`MAX_SERIES` series, fewer than two keys, simulated beside real
    runs (their own styling), or a layout that would need too many colours or panels."""
    keys = label_keys(configs)
    flats = [flatten(c) for c in configs]
    series = {tuple(fmt(f.get(k)) for k in keys) for f in flats}
    if len(series) <= MAX_SERIES or len(keys) < 2 or CLOCK in keys:
        return None
    values = {k: tuple(dict.fromkeys(fmt(f.get(k)) for f in flats)) for k in keys}
    by_count = sorted(keys, key=lambda k: (len(values[k]), keys.index(k)))
    dash_key = next((k for k in by_count if len(values[k]) <= MAX_DASHES), None)
    rest = [k for k in keys if k != dash_key]
    colour_key = max((k for k in rest if len(values[k]) <= MAX_COLOURS),
                     key=lambda k: len(values[k]), default=None)
    if colour_key is None:
        return None
    panel_keys = tuple(k for k in rest if k != colour_key)
    panels = tuple(dict.fromkeys(tuple(fmt(f.get(k)) for k in panel_keys) for f in flats))
    if len(panels) > MAX_PANELS:
        return None
    return Facets(colour_key, dash_key, panel_keys, {**values, "panels": panels})
