"""How long does each notebook cell take under fork, forkserver and spawn?

Run: ``make bench-notebooks`` (or ``.venv/bin/python benchmarks/notebook_times.py
[--methods fork,spawn] [notebooks/05_ddp_sharding.ipynb ...]``: a partial run prints its
tables and writes them only where ``--output`` says). Every notebook runs top to
bottom in a fresh kernel once per start method (``TALK_START_METHOD``), one notebook at a
time, and nothing is written back to the notebooks. Writes one table per start method to
``benchmarks/results/notebook_times.md``, naming every cell over its target:

* a cell: 3 s;
* a cell whose lesson is a timeout, tagged ``timeout-lesson-<N>`` (N seconds): N + 1 s;
* a cell whose lesson *is* the wait, tagged ``slow-lesson`` with the reason in its metadata
  (``"slow_lesson_reason": "..."``, e.g. a fresh spawned world whose start-up is what the
  cell shows): no target;
* the whole collection (sum of the cells): 150 s under fork, 240 s under spawn and
  forkserver.

Every cell over 3 s that its lesson excuses (a timeout lesson or a slow lesson) is listed
under "Honest exceptions" with its reason, so the excuses stay visible.

Times are wall-clock seconds from the kernel's own timestamps (execute_input to
execute_reply). The machine may be shared: the load average when each notebook started is
in its table. ``--repeat N`` runs every notebook N times in a row and reports each cell's
median with its min-max spread; a cell is over target when its median is.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "notebook_times.md"
METHODS = ("fork", "forkserver", "spawn")
CELL_TARGET_S = 3.0
TIMEOUT_MARGIN_S = 1.0
TOTAL_TARGET_S = {"fork": 150.0, "forkserver": 240.0, "spawn": 240.0}
TIMEOUT_TAG = re.compile(r"^timeout-lesson-(\d+(?:\.\d+)?)$")
SLOW_TAG = "slow-lesson"
SLOW_REASON_KEY = "slow_lesson_reason"


def cell_target(cell) -> tuple[float, str]:
    """The time a cell may take (``inf``: no target), and why it is not the usual 3 s."""
    metadata = cell.get("metadata", {})
    tags = metadata.get("tags", [])
    if SLOW_TAG in tags:
        reason = str(metadata.get(SLOW_REASON_KEY, "")).strip()
        if not reason:
            raise ValueError(f"a cell tagged {SLOW_TAG!r} needs its reason in metadata "
                             f"{SLOW_REASON_KEY!r}: {_first_line(cell.get('source', ''))!r}")
        return float("inf"), reason
    for tag in tags:
        match = TIMEOUT_TAG.match(tag)
        if match:
            timeout = float(match.group(1))
            return timeout + TIMEOUT_MARGIN_S, f"its lesson is a {timeout:g} s timeout"
    return CELL_TARGET_S, ""


def honest_exceptions(rows: list[dict]) -> list[dict]:
    """Cells over the usual 3 s that their lesson excuses (and that stay within their own
    target)."""
    return [r for r in rows if r["why"] and r["seconds"] is not None
            and CELL_TARGET_S < r["seconds"] <= r["target"]]


def _seconds(execution: dict) -> float | None:
    try:
        start = datetime.fromisoformat(execution["iopub.execute_input"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(execution["shell.execute_reply"].replace("Z", "+00:00"))
    except (KeyError, ValueError):
        return None
    return (end - start).total_seconds()


def time_notebook(path: Path, method: str) -> tuple[list[dict], float]:
    """Run one notebook under ``method``; return one row per code cell and the wall time."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:  # a slow-lesson tag without its reason fails before the run
        if cell.cell_type == "code":
            cell_target(cell)
    previous = os.environ.get("TALK_START_METHOD")
    os.environ["TALK_START_METHOD"] = method
    started = time.perf_counter()
    try:
        client = NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=True,
                                allow_errors=True,
                                resources={"metadata": {"path": str(path.parent)}})
        client.execute()
    finally:
        if previous is None:
            os.environ.pop("TALK_START_METHOD", None)
        else:
            os.environ["TALK_START_METHOD"] = previous
    wall = time.perf_counter() - started
    rows = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        seconds = _seconds(cell.metadata.get("execution", {}))
        target, why = cell_target(cell)
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        expected_error = "raises-exception" in cell.metadata.get("tags", [])
        rows.append({
            "notebook": path.stem, "cell": index, "count": cell.execution_count,
            "first_line": _first_line(cell.source), "seconds": seconds,
            "target": target, "why": why,
            "error": bool(errors) and not expected_error,
        })
    return rows, wall


def combine(runs: list[list[dict]]) -> list[dict]:
    """One row per cell from several runs of a notebook: the median and the spread."""
    rows = []
    for cells in zip(*runs, strict=True):
        times = [c["seconds"] for c in cells if c["seconds"] is not None]
        row = dict(cells[0])
        row["seconds"] = statistics.median(times) if times else None
        row["spread"] = (min(times), max(times)) if len(times) > 1 else None
        row["error"] = any(c["error"] for c in cells)
        rows.append(row)
    return rows


def _first_line(source: str) -> str:
    for line in source.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            return line if len(line) <= 60 else line[:59] + "…"
    return source.strip().splitlines()[0][:60] if source.strip() else ""


def _fmt(seconds: float | None, digits: int) -> str:
    return "?" if seconds is None else f"{seconds:.{digits}f}"


def _commit() -> str:
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "an unknown commit"
    return f"commit {head}"


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "?"


def table(method: str, rows: list[dict], walls: dict[str, float], loads: dict[str, str],
          load_after: str) -> str:
    total = sum(r["seconds"] or 0.0 for r in rows)
    over = [r for r in rows if r["seconds"] is None or r["seconds"] > r["target"]]
    errors = [r for r in rows if r["error"]]
    target = TOTAL_TARGET_S[method]
    verdict = "within" if total <= target else "OVER"
    lines = [
        f"## {method}",
        "",
        f"Sum of the cells **{total:.1f} s** ({verdict} the {target:g} s target); "
        f"notebooks with kernel start-up {sum(walls.values()):.1f} s; "
        f"load average {next(iter(loads.values()), '?')} at the start, {load_after} at the end.",
        "",
    ]
    if over:
        lines.append(f"Cells over target ({len(over)}): " + ", ".join(
            f"{r['notebook'][:2]} cell {r['cell']} ({_fmt(r['seconds'], 1)} s > {r['target']:g} s)"
            for r in over) + ".")
    else:
        lines.append("Every cell within its target.")
    excused = honest_exceptions(rows)
    if excused:
        lines += ["", f"Honest exceptions: cells over {CELL_TARGET_S:g} s that their lesson "
                  f"excuses ({len(excused)}):", ""]
        lines += [f"- {r['notebook'][:2]} cell {r['cell']} ({_fmt(r['seconds'], 1)} s): "
                  f"{r['why']}" for r in excused]
    if errors:
        lines.append("")
        lines.append("Cells with an unexpected error: " + ", ".join(
            f"{r['notebook'][:2]} cell {r['cell']}" for r in errors) + ".")
    lines += ["", "| notebook | load at start | total s | slowest cell | s |",
              "| --- | ---: | ---: | --- | ---: |"]
    for name in walls:
        nb_rows = [r for r in rows if r["notebook"] == name]
        slowest = max(nb_rows, key=lambda r: r["seconds"] or 0.0, default=None)
        if slowest is None:
            continue
        lines.append(f"| {name} | {loads.get(name, '?')} | "
                     f"{sum(r['seconds'] or 0.0 for r in nb_rows):.1f} | "
                     f"{slowest['cell']}: `{slowest['first_line']}` | "
                     f"{slowest['seconds'] or 0.0:.1f} |")
    lines += ["", "<details><summary>Every code cell</summary>", "",
              "| notebook | cell | first line | s | spread s | target s | |",
              "| --- | ---: | --- | ---: | ---: | ---: | --- |"]
    for r in rows:
        seconds = _fmt(r["seconds"], 2)
        spread = "" if not r.get("spread") else f"{r['spread'][0]:.2f}–{r['spread'][1]:.2f}"
        mark = "over" if r in over else ""
        code = r["first_line"].replace("|", "\\|")
        target = "none" if r["target"] == float("inf") else f"{r['target']:g}"
        lines.append(f"| {r['notebook'][:2]} | {r['cell']} | `{code}` | {seconds} | {spread} | "
                     f"{target}{' (' + r['why'] + ')' if r['why'] else ''} | {mark} |")
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def _methods(text: str) -> list[str]:
    methods = [m.strip() for m in text.split(",") if m.strip()]
    wrong = [m for m in methods if m not in METHODS]
    if wrong or not methods:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give one or more of {', '.join(METHODS)}, separated by commas")
    return methods


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--methods", type=_methods, default=list(METHODS),
                        help="comma-separated start methods (default: fork,forkserver,spawn)")
    parser.add_argument("--output", type=Path, default=None,
                        help=f"where to write the tables (default: {RESULTS.relative_to(ROOT)} "
                             "for a full run of every notebook under every method, "
                             "else nowhere: a partial run only prints)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each notebook; each cell reports the median (default 1)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    import torch

    sections = [
        "# Notebook cell times under each start method",
        "",
        f"`make bench-notebooks` on {platform.system()}, Python {platform.python_version()}, "
        f"torch {torch.__version__}, {os.cpu_count()} cores, {_commit()}, "
        f"{datetime.now().astimezone():%Y-%m-%d %H:%M %Z}. "
        f"{'One run' if args.repeat == 1 else f'Median of {args.repeat} runs'} per notebook "
        "and method; "
        f"targets: a cell {CELL_TARGET_S:g} s (a cell tagged `timeout-lesson-N`: N + "
        f"{TIMEOUT_MARGIN_S:g} s; a cell tagged `{SLOW_TAG}`: none, its reason listed), "
        "the collection "
        + ", ".join(f"{TOTAL_TARGET_S[m]:g} s under {m}" for m in METHODS) + ".",
        "",
    ]
    for method in args.methods:
        rows, walls, loads = [], {}, {}
        for path in paths:
            loads[path.stem] = _load()
            runs, run_walls = [], []
            for _ in range(args.repeat):
                nb_rows, wall = time_notebook(path, method)
                runs.append(nb_rows)
                run_walls.append(wall)
            nb_rows = combine(runs)
            rows += nb_rows
            walls[path.stem] = statistics.median(run_walls)
            print(f"{method:10s} {path.stem}: {sum(r['seconds'] or 0 for r in nb_rows):6.1f} s"
                  f" (wall {walls[path.stem]:.1f} s)", file=sys.stderr, flush=True)
        sections.append(table(method, rows, walls, loads, _load()))
    text = "\n".join(sections)
    output = args.output
    if output is None and not args.notebooks and list(args.methods) == list(METHODS):
        output = RESULTS
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
    print(text)
    return text


if __name__ == "__main__":
    main()
