"""Rehearse the talk: run every cell of notebooks/talk.ipynb under each start method and
print how long each took, so a speaker knows the live demos fit the slot.

Usage: python scripts/dry_run_talk.py [--methods fork,forkserver,spawn] [NOTEBOOK]

Each start method gets a fresh kernel (TALK_START_METHOD), as `make talk` under that
method would. A cell is over when it takes longer than its target (3 s; a cell whose lesson
is an N-second timeout, tagged timeout-lesson-N: N + 1 s), the rule of
benchmarks/notebook_times.py. Cells that no slide shows (slide type "skip": the set-up the
speaker runs before going on stage) are timed but not judged. Nothing is written back to
the notebook. Exit status 1 when a shown cell is over its target or a cell raised an error
it was not meant to.
"""

import argparse
import os
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.notebook_times import METHODS, time_notebook  # noqa: E402

TALK = ROOT / "notebooks" / "talk.ipynb"


def rehearse(notebook: Path, method: str) -> tuple[list[dict], float]:
    """One run under METHOD: a row per code cell (``shown``: a slide shows it), and the
    total of the shown cells' times."""
    cells = nbformat.read(notebook, as_version=4).cells
    rows, _wall, _watch_cpu = time_notebook(notebook, method, cores=os.cpu_count() or 1)
    for row in rows:
        kind = cells[row["cell"]].get("metadata", {}).get("slideshow", {}).get("slide_type")
        row["shown"] = kind != "skip"
    return rows, sum(r["seconds"] or 0.0 for r in rows if r["shown"])


def report(method: str, rows: list[dict], total: float) -> tuple[str, int]:
    """The table a speaker reads, and how many cells were over their target or failed."""
    lines = [f"## {method}", f"{'cell':>4}  {'seconds':>7}  {'target':>6}  verdict  first line"]
    bad = 0
    for row in rows:
        seconds = row["seconds"]
        over = row["shown"] and (seconds is None or seconds > row["target"])
        verdict = "✘ error" if row["error"] else ("✘ over" if over else "✔")
        if not row["shown"] and not row["error"]:
            verdict = "set-up"
        bad += row["error"] or over
        shown = "?" if seconds is None else f"{seconds:.2f}"
        lines.append(f"{row['cell']:>4}  {shown:>7}  {row['target']:>6g}  {verdict:<7}  "
                     f"{row['first_line']}")
    shown = [r for r in rows if r["shown"]]
    lines.append(f"total {total:.1f} s over the {len(shown)} cells the slides show; slowest "
                 f"{max((r['seconds'] or 0.0) for r in shown):.2f} s")
    return "\n".join(lines), bad


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default=",".join(METHODS),
                        help="start methods to rehearse, comma-separated (default: all three)")
    parser.add_argument("notebook", nargs="?", default=str(TALK))
    args = parser.parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        parser.error(f"--methods takes {', '.join(METHODS)}; got {args.methods!r}")
    bad = 0
    for method in methods:
        rows, total = rehearse(Path(args.notebook), method)
        text, over = report(method, rows, total)
        print(text, flush=True)
        bad += over
    print("✔ every cell within its target" if not bad else f"✘ {bad} cell(s) over or failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
