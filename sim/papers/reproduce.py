"""A paper's figures reproduced: calibrate, run every row, compare, and write the results.

:func:`reproduce` runs one paper file; :func:`summarise` gives the median and worst |error|
over rows that are predictions (the calibration row is left out: it matches by
construction); :func:`write_results` writes ``results.csv`` and ``results.json``;
:func:`markdown_table` is the table ``docs/measurements/papers.md`` holds.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sim.errors import UserError
from sim.papers.paper_calibration import Calibrated, explain_row, fit_baseline
from sim.papers.paper_file import Figure, Paper
from sim.papers.quantities import QUANTITIES, Measure, relative_error
from sim.papers.row_run import row_config, run_row
from sim.rundir import write_atomic


@dataclass(frozen=True)
class RowResult:
    paper: str
    id: str
    quantity: str
    source: str
    published: float | None  # None: a reference row
    lab: float | None        # None when the row could not run
    error: float | None      # lab / published - 1; None for a reference row or a failure
    wall_s: float            # the simulator's wall time for this row (0 if it did not run)
    calibration: bool        # the row the parameter was fitted to
    failure: str = ""        # one line: why the row did not run
    note: str = ""
    explained: str = ""      # beyond EXPLAIN_OVER: the measured explanation, one line


EXPLAIN_OVER = 0.15  # |error| beyond which a row's explanation is measured

@dataclass(frozen=True)
class PaperResult:
    paper: Paper
    calibrated: Calibrated | None
    rows: tuple[RowResult, ...]


def _failed(paper: Paper, figure: Figure, why: str, is_cal: bool) -> RowResult:
    return RowResult(paper.name, figure.id, figure.quantity, figure.source, figure.published,
                     None, None, 0.0, is_cal, why, figure.note)


def _keys(figure: Figure) -> str:
    return json.dumps(figure.overrides, sort_keys=True)


def reproduce(paper: Paper, run: Callable = run_row,
              report: Callable[[RowResult], None] = lambda row: None,
              report_calibration: Callable[[Calibrated], None] = lambda c: None,
              only: Callable[[str], bool] = lambda figure_id: True) -> PaperResult:
    """Every row of ``paper`` whose id ``only`` accepts (the rows it is taken against run as
    needed); ``report`` is called with each row as it finishes. A row that cannot run (an
    unknown key, a failed reference row) is kept with its reason."""
    cal_row = paper.calibration.row if paper.calibration else None
    fitted: dict[str, Any] = {}
    calibrated = None
    if paper.calibration is not None:
        try:
            calibrated = fit_baseline(paper, run)
        except UserError as exc:
            why = f"calibration failed: {exc}"
            rows = tuple(_failed(paper, f, why, f.id == cal_row) for f in paper.figures
                         if only(f.id))
            for row in rows:
                report(row)
            return PaperResult(paper, None, rows)
        report_calibration(calibrated)
        fitted = {calibrated.parameter: calibrated.value}
    # rows with the same keys (a step time and a ratio of it) share one run
    measures: dict[str, Measure | str] = {}  # the row's keys -> its run, or why it failed
    walls: dict[str, float] = {}

    def measure_of(figure: Figure) -> Measure | str:
        key = _keys(figure)
        if key not in measures:
            try:
                config = row_config(paper.base, {**figure.overrides, **fitted},
                                    f"{paper.path.name}: figure {figure.id}")
                done = run(config)
                measures[key], walls[key] = done.measure, done.wall_s
            except UserError as exc:
                measures[key] = str(exc)
        return measures[key]

    rows = []
    for figure in paper.figures:
        if not only(figure.id):
            continue
        is_cal = figure.id == cal_row
        mine = measure_of(figure)
        ref = measure_of(paper.figure(figure.relative_to)) if figure.relative_to else None
        if isinstance(mine, str) or isinstance(ref, str):
            why = mine if isinstance(mine, str) else f"its reference row failed: {ref}"
            row = _failed(paper, figure, why, is_cal)
        else:
            try:
                lab = QUANTITIES[figure.quantity].value(mine, ref)
            except UserError as exc:
                row = _failed(paper, figure, f"{paper.path.name}: figure {figure.id}: {exc}",
                              is_cal)
            else:
                error = (None if figure.published is None
                         else relative_error(lab, figure.published))
                row = RowResult(paper.name, figure.id, figure.quantity, figure.source,
                                figure.published, lab, error,
                                walls[_keys(figure)], is_cal, "", figure.note,
                                _explained(paper, figure, error, fitted, ref, run))
        rows.append(row)
        report(row)
    return PaperResult(paper, calibrated, tuple(rows))


def _explained(paper: Paper, figure: Figure, error: float | None, fitted: dict[str, Any],
               reference: Measure | None, run: Callable) -> str:
    """The row's measured explanation when it misses by more than EXPLAIN_OVER: the search
    over the parameter its file names for the missing mechanism, or a note of the file's
    that starts "beyond" (a closed form the row cannot reach); else ""."""
    if error is None or abs(error) <= EXPLAIN_OVER:
        return ""
    if figure.explain is None:  # a closed form in the file's note, or nothing
        return figure.note if figure.note.startswith("beyond") else ""
    given = {**paper_defaults(paper, figure), **fitted}.get(figure.explain.parameter, "the default")
    try:
        return explain_row(paper, figure, fitted, reference, run).text(given)
    except UserError as exc:
        return f"not measured: {exc}"


def paper_defaults(paper: Paper, figure: Figure) -> dict[str, Any]:
    """The dotted keys the row sets itself, over the file's base."""
    flat = {f"{table}.{key}": value for table, keys in paper.base.items()
            if isinstance(keys, dict) for key, value in keys.items()}
    return {**flat, **figure.overrides}


def summarise(rows: list[RowResult]) -> dict[str, Any]:
    """Median and worst |error| over the predicted rows that ran; counts of the rest."""
    predicted = [r for r in rows if not r.calibration and r.error is not None]
    errors = [abs(r.error) for r in predicted]
    worst = max(predicted, key=lambda r: abs(r.error), default=None)
    return {"predicted": len(predicted),
            "failed": sum(bool(r.failure) for r in rows),
            "median_abs_error": statistics.median(errors) if errors else None,
            "worst_abs_error": abs(worst.error) if worst else None,
            "worst_row": f"{worst.paper}/{worst.id}" if worst else None,
            "within_15": sum(e <= 0.15 for e in errors),
            "explained": sum(bool(r.explained) and abs(r.error) > EXPLAIN_OVER
                             for r in predicted),
            "within_5": sum(e <= 0.05 for e in errors)}


FIELDS = ("paper", "id", "quantity", "source", "published", "lab", "error", "wall_s",
          "calibration", "failure", "note", "explained")


def write_results(out: Path, results: list[PaperResult]) -> None:
    """``out/results.csv`` (a row per figure) and ``out/results.json`` (rows, calibrations,
    summary)."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [row for result in results for row in result.rows]
    text = io.StringIO()
    writer = csv.DictWriter(text, FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(asdict(row))
    write_atomic(out / "results.csv", text.getvalue())
    data = {"papers": [{"paper": r.paper.name, **r.paper.meta,
                        "calibrated": asdict(r.calibrated) if r.calibrated else None}
                       for r in results],
            "rows": [asdict(row) for row in rows],
            "summary": summarise(rows)}
    write_atomic(out / "results.json", json.dumps(data, indent=2) + "\n")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def markdown_table(results: list[PaperResult]) -> str:
    """The table of every row, then the calibrations and the summary line."""
    lines = ["| paper | figure | source | quantity | published | lab | error | wall (s) |",
             "|---|---|---|---|---|---|---|---|"]
    for result in results:
        for r in result.rows:
            lab = "-" if r.lab is None else f"{r.lab:.4g}"
            error = (f"not run: {r.failure.split('; ')[0]}" if r.failure  # no key list
                     else f"{_pct(r.error)} (calibration)" if r.calibration
                     else "reference" if r.error is None else _pct(r.error))
            published = "-" if r.published is None else f"{r.published:.4g}"
            lines.append(f"| {r.paper} | {r.id} | {r.source} | {r.quantity} | "
                         f"{published} | {lab} | {error.replace('|', '/')} | "
                         f"{r.wall_s:.2f} |")
    lines.append("")
    for result in results:
        c = result.calibrated
        if c:
            lines.append(f"- {result.paper.name}: `{c.parameter}` = {c.value:.6g}, fitted to "
                         f"row {c.row} ({c.published:g}; {c.source}) in {c.runs} runs")
    s = summarise([row for result in results for row in result.rows])
    if s["median_abs_error"] is not None:
        lines.append(f"- over {s['predicted']} predicted figures: median |error| "
                     f"{s['median_abs_error']:.1%}, worst {s['worst_abs_error']:.1%} "
                     f"({s['worst_row']}); {s['within_15']} within 15%, {s['within_5']} "
                     f"within 5%, {s['explained']} beyond 15% with a measured explanation; "
                     f"{s['failed']} not run")
    explained = [r for result in results for r in result.rows if r.explained]
    if explained:
        lines += ["", f"Rows beyond {EXPLAIN_OVER:.0%}, measured (the value at which the "
                  "row would match the paper, of the parameter standing for the mechanism "
                  "the lab lacks):", ""]
        lines += [f"- {r.paper} {r.id} ({_pct(r.error)}): {r.explained}" for r in explained]
    return "\n".join(lines) + "\n"


START, END = "<!-- papers table: start -->", "<!-- papers table: end -->"


def write_markdown(path: Path, table: str) -> None:
    """The table into ``path`` between the START and END markers if it has them (the rest of
    the page kept), else ``path`` holding the table alone."""
    text = path.read_text() if path.exists() else ""
    if START in text and END in text:
        head, rest = text.split(START, 1)
        tail = rest.split(END, 1)[1]
        text = f"{head}{START}\n{table}{END}{tail}"
    else:
        text = table
    write_atomic(path, text)
