"""``python -m sim papers [NAME ...] [--out DIR] [--markdown FILE] [--list]``: the published
figures of ``experiments/papers/`` against the lab's, with the error of each."""

from __future__ import annotations

import argparse
import fnmatch
from pathlib import Path

from sim.errors import UserError
from sim.names import CHECKOUT_EXPERIMENTS, PACKAGED_EXPERIMENTS

# ./experiments/papers, else the checkout's, else an installed package's copy
PAPERS = next((folder / "papers" for folder in (Path("experiments"), CHECKOUT_EXPERIMENTS,
                                                  PACKAGED_EXPERIMENTS)
               if (folder / "papers").is_dir()), Path("experiments") / "papers")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="papers: a file stem of experiments/papers/ (goyal-2017) or a "
                             "path; default: all of them")
    parser.add_argument("--out", type=Path, help="write results.csv and results.json here")
    parser.add_argument("--markdown", type=Path, metavar="FILE",
                        help="write the table into FILE (between its papers-table markers, "
                             "e.g. docs/measurements/papers.md)")
    parser.add_argument("--only", metavar="PATTERNS",
                        help="run only the rows whose id matches one of these comma-separated "
                             "shell patterns, e.g. 'fig5-mp*,table8-*' (a calibration runs "
                             "as always; the rows a ratio is taken against run as needed)")
    parser.add_argument("--list", action="store_true",
                        help="list the papers and their rows without running anything")


def paper_paths(names: list[str]) -> list[Path]:
    """The files ``names`` mean (all of experiments/papers/ for none). Raises UserError."""
    if not names:
        found = sorted(PAPERS.glob("*.toml"))
        if not found:
            raise UserError(f"no paper files in {PAPERS}/ (run from the repository's root)")
        return found
    paths = []
    for name in names:
        path = Path(name) if name.endswith(".toml") else PAPERS / f"{name}.toml"
        if not path.exists():
            known = ", ".join(p.stem for p in sorted(PAPERS.glob("*.toml")))
            raise UserError(f"{name}: no such paper file ({path}); known: {known or 'none'}")
        paths.append(path)
    return paths


def _published(value: float | None) -> str:
    return "ref" if value is None else f"{value:.4g}"


def main(args: argparse.Namespace) -> int:
    from sim.papers.paper_file import load_paper
    from sim.papers.reproduce import (
        markdown_table,
        reproduce,
        summarise,
        write_markdown,
        write_results,
    )

    papers = [load_paper(path) for path in paper_paths(args.names)]  # all checked first
    if args.list:
        for paper in papers:
            meta = paper.meta
            print(f"{paper.name}: {meta['authors']} ({meta['year']}), {meta['title']}")
            for f in paper.figures:
                against = f" vs {f.relative_to}" if f.relative_to else ""
                print(f"  {f.id:<24} {f.quantity}{against} = {_published(f.published)}"
                      f"  ({f.source})")
        return 0
    print(f"{'paper':<18} {'figure':<24} {'published':>10} {'lab':>10} {'error':>8} "
          f"{'wall s':>7}  source")

    last_failure = [""]

    def report(row) -> None:
        lab = "-" if row.lab is None else f"{row.lab:.4g}"
        error = "-" if row.error is None else f"{row.error:+.1%}"
        mark = (" (calibration)" if row.calibration else
                " (reference row)" if row.published is None else "")
        print(f"{row.paper:<18} {row.id:<24} {_published(row.published):>10} {lab:>10} "
              f"{error:>8} {row.wall_s:>7.2f}  {row.source}{mark}", flush=True)
        if row.failure:  # a failed calibration fails every row: said once
            same = row.failure == last_failure[0]
            print(f"  not run: {'as above' if same else row.failure}", flush=True)
        last_failure[0] = row.failure
        if row.explained:
            print(f"  explained: {row.explained}", flush=True)

    def report_calibration(c) -> None:
        print(f"calibrated {c.parameter} = {c.value:.6g} on row {c.row} (published "
              f"{c.published:g}, lab {c.lab:.6g}; {c.source}; {c.runs} runs, "
              f"{c.wall_s:.1f} s)", flush=True)

    patterns = args.only.split(",") if args.only else ["*"]

    def only(figure_id: str) -> bool:
        return any(fnmatch.fnmatchcase(figure_id, pattern) for pattern in patterns)

    results = [reproduce(paper, report=report, report_calibration=report_calibration,
                         only=only) for paper in papers]
    rows = [row for result in results for row in result.rows]
    s = summarise(rows)
    if s["median_abs_error"] is None:
        print(f"no predicted figure ran ({s['failed']} not run)")
    else:
        print(f"{s['predicted']} predicted figures: median |error| {s['median_abs_error']:.1%}, "
              f"worst {s['worst_abs_error']:.1%} ({s['worst_row']}); {s['within_15']} within "
              f"15%, {s['within_5']} within 5%, {s['explained']} beyond 15% with a measured "
              f"explanation; {s['failed']} not run")
    if args.out:
        write_results(args.out, results)
        print(f"results: {args.out}/ (results.csv, results.json)")
    if args.markdown:
        write_markdown(args.markdown, markdown_table(results))
        print(f"table: {args.markdown}")
    return 1 if s["failed"] else 0
