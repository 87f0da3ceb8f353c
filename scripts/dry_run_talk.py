"""Rehearse the talk: run every cell of notebooks/talk.ipynb on each platform's path and
print how long each took, so a speaker knows the live demos answer on their laptop.

Usage: python scripts/dry_run_talk.py [--paths fork,forkserver,spawn,mac] [NOTEBOOK]

Four paths, each in a fresh kernel (the talk's first cell, ``start_talk()``, picks the
start method from the platform, see talk_helpers/notebook/talk.py):

* ``fork``: Linux up to Python 3.13 (``TALK_START_METHOD=fork``);
* ``forkserver``: Linux from Python 3.14 (``TALK_START_METHOD=forkserver``);
* ``spawn``: Windows, spawn and no forkserver (``TALK_START_METHOD=spawn``,
  ``TALK_NO_FORKSERVER=1``): every DataLoader worker is a new interpreter;
* ``mac``: the talk's own path on a Mac, where spawn is the default and forkserver exists
  (``TALK_START_METHOD=spawn``): the talk takes forkserver, preloaded with torch.

A shown cell is over when it takes longer than its target (3 s; a cell tagged
timeout-lesson-N: N + 1 s), the rule of benchmarks/notebook_times.py; a cell tagged
slow-lesson (the set-up on the title slide) has no target and is listed with its reason.
The talk must hold its targets on ``fork`` and ``mac``; ``forkserver`` and ``spawn`` are
reported. Exit status 1 when a cell is over on a judged path or raised an error it was
not meant to. Nothing is written back to the notebook. Times on a shared machine are
noisy: rerun before you trust one.
"""

import argparse
import os
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.notebook_times import time_notebook  # noqa: E402
from talk_helpers.environment import variables_set  # noqa: E402

TALK = ROOT / "notebooks" / "talk.ipynb"
# name -> (start method the platform gives, the environment that says so, who has it)
PATHS = {
    "fork": ("fork", {}, "Linux, Python ≤ 3.13"),
    "forkserver": ("forkserver", {}, "Linux, Python ≥ 3.14"),
    "spawn": ("spawn", {"TALK_NO_FORKSERVER": "1"}, "Windows: spawn, no forkserver"),
    "mac": ("spawn", {}, "macOS: spawn by default; the talk takes forkserver"),
}
JUDGED = ("fork", "mac")


def rehearse(notebook: Path, path: str) -> list[dict]:
    """One run on PATH: a row per code cell (``shown``: a slide shows it)."""
    method, extra, _ = PATHS[path]
    cells = nbformat.read(notebook, as_version=4).cells
    with variables_set(extra):
        rows, _wall, _watch_cpu = time_notebook(notebook, method, cores=os.cpu_count() or 1)
    for row in rows:
        kind = cells[row["cell"]].get("metadata", {}).get("slideshow", {}).get("slide_type")
        row["shown"] = kind not in ("skip", "notes")
    return rows


def over(row: dict) -> bool:
    return row["shown"] and (row["seconds"] is None or row["seconds"] > row["target"])


def _seconds(row: dict | None) -> str:
    if row is None:
        return "-"
    mark = " ✘" if row["error"] else (" *" if over(row) else "")
    return ("?" if row["seconds"] is None else f"{row['seconds']:.2f}") + mark


def report(runs: dict[str, list[dict]]) -> tuple[str, int]:
    """The table a speaker reads, what the audience sees where a demo is slow, and how
    many cells were over or failed on the judged paths."""
    names = list(runs)
    first = runs[names[0]]
    lines = ["  ".join([f"{'cell':>4}", *(f"{n:>10}" for n in names), "target  first line"])]
    for k, row in enumerate(first):
        target = "set-up" if row["target"] == float("inf") else f"{row['target']:g}"
        lines.append("  ".join([f"{row['cell']:>4}",
                                *(f"{_seconds(runs[n][k]):>10}" for n in names),
                                f"{target:>6}  {row['first_line']}"]))
    lines.append("  ".join(["sum ", *(f"{_total(runs[n]):>10.1f}" for n in names),
                            "        the shown cells, set-up excluded"]))
    lines += ["", "* over its target  ✘ an error it was not meant to raise", ""]
    bad = 0
    for name in names:
        rows = runs[name]
        setup = [r for r in rows if r["target"] == float("inf")]
        slow = [r for r in rows if over(r) and r["target"] != float("inf")]
        errors = [r for r in rows if r["error"]]
        judged = name in JUDGED
        if judged:
            bad += len(slow) + len(errors)
        head = f"{name} ({PATHS[name][2]}{'' if judged else '; reported, not judged'}): "
        if setup:
            head += (f"set-up {setup[0]['seconds'] or 0:.1f} s on the title slide; ")
        if not slow and not errors:
            lines.append(head + "✔ every shown cell within its target")
            continue
        lines.append(head + f"✘ {len(slow)} cell(s) over, {len(errors)} error(s)")
        for row in slow:
            lines.append(f"    cell {row['cell']} ({row['first_line']}): "
                         f"{_audience(row)}")
        for row in errors:
            lines.append(f"    cell {row['cell']} ({row['first_line']}): raised an error")
    return "\n".join(lines), bad


def _total(rows: list[dict]) -> float:
    return sum(r["seconds"] or 0.0 for r in rows
               if r["shown"] and r["target"] != float("inf"))


def _audience(row: dict) -> str:
    """What the room sees while a slow cell runs."""
    seconds = row["seconds"]
    if seconds is None:
        return "no time recorded: the cell did not finish"
    return (f"{seconds:.1f} s > {row['target']:g} s: the room sees the cell's [*] and an "
            f"empty output for {seconds:.0f} s; say the slide's point (its notes) while it "
            "runs, or run it before you show it")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", default=",".join(PATHS),
                        help=f"paths to rehearse, comma-separated (default: {','.join(PATHS)})")
    parser.add_argument("notebook", nargs="?", default=str(TALK))
    args = parser.parse_args(argv)
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = [p for p in paths if p not in PATHS]
    if unknown or not paths:
        parser.error(f"--paths takes {', '.join(PATHS)}; got {args.paths!r}")
    runs = {}
    for path in paths:
        print(f"rehearsing on {path} ({PATHS[path][2]}) ...", file=sys.stderr, flush=True)
        runs[path] = rehearse(Path(args.notebook), path)
    text, bad = report(runs)
    print(text)
    print("✔ every shown cell within its target on " + " and ".join(
        p for p in paths if p in JUDGED) if not bad else
        f"✘ {bad} cell(s) over or failed on " + " or ".join(p for p in paths if p in JUDGED))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
