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
timeout-lesson-N: N + 1 s), the rule of benchmarks/notebook_times.py; the set-up on the
title slide (tagged slow-lesson) has its own target on ``fork``, 8 s. The talk must hold
its targets on ``fork`` and ``mac``; ``forkserver`` and ``spawn`` are reported.

Times mean something only on a quiet machine: each path's line prints the load average
beside its times (the 1-minute load before the path ran, over the core count). A machine
is quiet when that load is under half its cores. Exit status 1 when a cell raised an error
it was not meant to, or was over its target on a judged path of a quiet machine; on a
loaded one what is over is printed, and the run does not fail for it. Nothing is written
back to the notebook.
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
SETUP_TARGET_S = {"fork": 8.0}  # the set-up's target, where it has one
QUIET_LOAD = 0.5  # a quiet machine: 1-minute load average under half its cores


def rehearse(notebook: Path, path: str) -> list[dict]:
    """One run on PATH: a row per code cell (``shown``: a slide shows it)."""
    method, extra, _ = PATHS[path]
    cells = nbformat.read(notebook, as_version=4).cells
    load = os.getloadavg()[0]
    with variables_set(extra):
        rows, _wall, _watch_cpu = time_notebook(notebook, method, cores=os.cpu_count() or 1)
    for row in rows:
        kind = cells[row["cell"]].get("metadata", {}).get("slideshow", {}).get("slide_type")
        row["shown"] = kind not in ("skip", "notes")
        row["load"] = load
        if row["target"] == float("inf") and path in SETUP_TARGET_S:
            row["setup_target"] = SETUP_TARGET_S[path]
    return rows


def quiet(rows: list[dict]) -> bool:
    """Whether the machine was quiet when this path's run began."""
    return bool(rows) and rows[0]["load"] < QUIET_LOAD * (os.cpu_count() or 1)


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
        slow_setup = [r for r in setup if r["seconds"] is not None
                      and r["seconds"] > r.get("setup_target", float("inf"))]
        errors = [r for r in rows if r["error"]]
        judged = name in JUDGED
        load = (f"load {rows[0]['load']:.1f} on {os.cpu_count()} cores, "
                + ("quiet" if quiet(rows) else "loaded: times not judged")) if rows else ""
        bad += len(errors) + (len(slow) + len(slow_setup) if judged and quiet(rows) else 0)
        head = (f"{name} ({PATHS[name][2]}{'' if judged else '; reported, not judged'}; "
                f"{load}): ")
        if setup:
            target = setup[0].get("setup_target")
            head += (f"set-up {setup[0]['seconds'] or 0:.1f} s on the title slide"
                     + (f" (target {target:g} s)" if target else "") + "; ")
        if not slow and not errors and not slow_setup:
            lines.append(head + "✔ every shown cell within its target")
            continue
        lines.append(head + f"✘ {len(slow) + len(slow_setup)} cell(s) over, "
                     f"{len(errors)} error(s)")
        for row in slow_setup:
            lines.append(f"    set-up {row['seconds']:.1f} s > {row['setup_target']:g} s: "
                         "the title slide waits; run start_talk() before the room sits down")
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
    return (f"{seconds:.1f} s > {row['target']:g} s: the room sees the sign ⏳ running and an "
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
    judged = " and ".join(p for p in paths if p in JUDGED)
    loaded = [p for p in paths if p in JUDGED and not quiet(runs[p])]
    if bad:
        print(f"✘ {bad} cell(s) over or failed on {judged}")
    elif loaded:
        print(f"✔ no error; the machine was loaded on {', '.join(loaded)}: what is over "
              "above is not judged, rehearse again on a quiet machine")
    else:
        print(f"✔ every shown cell within its target on {judged}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
