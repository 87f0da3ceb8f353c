"""How long does each notebook cell take under fork, forkserver and spawn?

Run: ``make bench-notebooks`` (or ``.venv/bin/python -m benchmarks.notebook_times
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
* a cell whose lesson needs new processes, tagged ``startup-bound`` with the reason in its
  metadata (``"startup_reason": "..."``: why the lesson needs that many): the start-up of
  the new interpreters it was seen to start, plus 1 s (plus its timeout, for a timeout
  lesson), if that is more than the target above. Starting a new interpreter that imports
  torch costs what ``python -c "import os, torch; os._exit(0)"`` costs here in CPU seconds
  (measured at the start of the run); n of them on c cores cannot start in less than n
  times that over c. Fork starts none (a forked process is not a new interpreter), so
  such a cell keeps the usual target there;
* the whole collection (sum of the cells): 150 s under fork, 240 s under spawn and
  forkserver.

Every cell over 3 s that its lesson excuses (a timeout, the wait itself, or the processes
it needs) and that stays within its own target is listed under "Honest exceptions" with
its reason, so the excuses stay visible.

Every cell's new processes are counted by :mod:`process_starts` (a thread that polls the
kernel's descendants), and the table shows them.

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

from benchmarks.process_starts import STARTUP_CODE, ProcessWatch, interpreter_cpu_s

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "notebook_times.md"
METHODS = ("fork", "forkserver", "spawn")
CELL_TARGET_S = 3.0
TIMEOUT_MARGIN_S = 1.0
TOTAL_TARGET_S = {"fork": 150.0, "forkserver": 240.0, "spawn": 240.0}
TIMEOUT_TAG = re.compile(r"^timeout-lesson-(\d+(?:\.\d+)?)$")
SLOW_TAG = "slow-lesson"
SLOW_REASON_KEY = "slow_lesson_reason"
STARTUP_TAG = "startup-bound"
STARTUP_REASON_KEY = "startup_reason"


def _reason(cell, tag: str, key: str) -> str:
    reason = str(cell.get("metadata", {}).get(key, "")).strip()
    if not reason:
        raise ValueError(f"a cell tagged {tag!r} needs its reason in metadata "
                         f"{key!r}: {_first_line(cell.get('source', ''))!r}")
    return reason


def cell_target(cell, interpreters: int = 0, interpreter_cpu_s: float = 0.0,
                cores: int = 1) -> tuple[float, str]:
    """The time a cell may take (``inf``: no target), and why it is not the usual 3 s.

    ``interpreters``: the new torch interpreters the cell started, each costing
    ``interpreter_cpu_s`` on ``cores`` cores (used only for a ``startup-bound`` cell).
    """
    tags = cell.get("metadata", {}).get("tags", [])
    if SLOW_TAG in tags:
        return float("inf"), _reason(cell, SLOW_TAG, SLOW_REASON_KEY)
    startup_reason = _reason(cell, STARTUP_TAG, STARTUP_REASON_KEY) if STARTUP_TAG in tags else ""
    target, why, timeout = CELL_TARGET_S, "", 0.0
    for tag in tags:
        match = TIMEOUT_TAG.match(tag)
        if match:
            timeout = float(match.group(1))
            target, why = timeout + TIMEOUT_MARGIN_S, f"its lesson is a {timeout:g} s timeout"
    floor = interpreters * interpreter_cpu_s / max(cores, 1)
    if startup_reason and timeout + floor + TIMEOUT_MARGIN_S > target:
        target = timeout + floor + TIMEOUT_MARGIN_S
        why = (f"{interpreters} new interpreters import torch, {interpreters} × "
               f"{interpreter_cpu_s:.2f} CPU-s on {cores} cores = {floor:.1f} s"
               + (f", plus its {timeout:g} s timeout" if timeout else "")
               + f": {startup_reason}")
    return target, why


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


def time_notebook(path: Path, method: str, interpreter_cpu_s: float = 0.0,
                  cores: int = 1) -> tuple[list[dict], float, float]:
    """Run one notebook under ``method``; return one row per code cell, the wall time and
    the CPU seconds the process watch used."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:  # a tag without its reason fails before the run
        if cell.cell_type == "code":
            cell_target(cell)
    previous = os.environ.get("TALK_START_METHOD")
    os.environ["TALK_START_METHOD"] = method
    started = time.perf_counter()
    watch: list[ProcessWatch] = []
    try:
        client = NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=True,
                                allow_errors=True,
                                resources={"metadata": {"path": str(path.parent)}})
        client.on_notebook_start = lambda **_: watch.append(
            ProcessWatch(client.km.provisioner.pid).start())
        client.on_cell_execute = lambda cell_index, **_: watch[0].mark(cell_index)
        try:
            client.execute()
        finally:
            for w in watch:
                w.stop()
    finally:
        if previous is None:
            os.environ.pop("TALK_START_METHOD", None)
        else:
            os.environ["TALK_START_METHOD"] = previous
    wall = time.perf_counter() - started
    starts = watch[0].by_label() if watch else {}
    rows = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        seconds = _seconds(cell.metadata.get("execution", {}))
        new = starts.get(index, [])
        interpreters = sum(s.torch_interpreter for s in new)
        target, why = cell_target(cell, interpreters, interpreter_cpu_s, cores)
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        expected_error = "raises-exception" in cell.metadata.get("tags", [])
        rows.append({
            "notebook": path.stem, "cell": index, "count": cell.execution_count,
            "first_line": _first_line(cell.source), "seconds": seconds,
            "target": target, "why": why, "processes": len(new),
            "interpreters": interpreters,
            "error": bool(errors) and not expected_error,
        })
    return rows, wall, (watch[0].thread_cpu_s if watch else 0.0)


def combine(runs: list[list[dict]]) -> list[dict]:
    """One row per cell from several runs of a notebook: the median and the spread, and the
    strictest target any run gave it (the fewest processes started)."""
    rows = []
    for cells in zip(*runs, strict=True):
        times = [c["seconds"] for c in cells if c["seconds"] is not None]
        row = dict(min(cells, key=lambda c: c["target"]))
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


def _target(seconds: float) -> str:
    return "none" if seconds == float("inf") else f"{round(seconds, 1):g}"


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
          load_after: str, watch_cpu_s: float | None = None) -> str:
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
        f"load average {next(iter(loads.values()), '?')} at the start, {load_after} at the end"
        + ("" if watch_cpu_s is None
           else f"; counting new processes took {watch_cpu_s:.1f} CPU-s") + ".",
        "",
    ]
    if over:
        lines.append(f"Cells over target ({len(over)}): " + ", ".join(
            f"{r['notebook'][:2]} cell {r['cell']} "
            f"({_fmt(r['seconds'], 1)} s > {_target(r['target'])} s)"
            for r in over) + ".")
    else:
        lines.append("Every cell within its target.")
    excused = honest_exceptions(rows)
    if excused:
        lines += ["", f"Honest exceptions: cells over {CELL_TARGET_S:g} s that their lesson "
                  f"excuses and that stay within their own target ({len(excused)}):", ""]
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
              "New processes: the processes the cell started (ranks, workers, servers, "
              "commands); torch: how many of them were new interpreters that imported torch.",
              "",
              "| notebook | cell | first line | s | spread s | new processes | torch | target s "
              "| |",
              "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        seconds = _fmt(r["seconds"], 2)
        spread = "" if not r.get("spread") else f"{r['spread'][0]:.2f}–{r['spread'][1]:.2f}"
        mark = "over" if r in over else ""
        code = r["first_line"].replace("|", "\\|")
        target = _target(r["target"])
        lines.append(f"| {r['notebook'][:2]} | {r['cell']} | `{code}` | {seconds} | {spread} | "
                     f"{r.get('processes', '?')} | {r.get('interpreters', '?')} | "
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

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cost = interpreter_cpu_s()
    sections = [
        "# Notebook cell times under each start method",
        "",
        f"`make bench-notebooks` on {platform.system()}, Python {platform.python_version()}, "
        f"torch {torch.__version__}, {os.cpu_count()} cores, {_commit()}, "
        f"{datetime.now().astimezone():%Y-%m-%d %H:%M %Z}. "
        f"{'One run' if args.repeat == 1 else f'Median of {args.repeat} runs'} per notebook "
        "and method; "
        f"targets: a cell {CELL_TARGET_S:g} s (a cell tagged `timeout-lesson-N`: N + "
        f"{TIMEOUT_MARGIN_S:g} s; a cell tagged `{SLOW_TAG}`: none, its reason listed; a cell "
        f"tagged `{STARTUP_TAG}`: the start-up of the new interpreters it starts + "
        f"{TIMEOUT_MARGIN_S:g} s, if more, its reason listed), the collection "
        + ", ".join(f"{TOTAL_TARGET_S[m]:g} s under {m}" for m in METHODS) + ".",
        "",
        f"A new interpreter that imports torch costs {cost:.2f} CPU-s here to start (median "
        f"of 3 runs of `python -c \"{STARTUP_CODE}\"`), so n of them need at least n × "
        f"{cost:.2f} / "
        f"{cores} s on {cores} cores: under spawn every rank and every DataLoader worker is "
        "one, under forkserver each rank's own server.",
        "",
    ]
    for method in args.methods:
        rows, walls, loads, watch_cpu = [], {}, {}, 0.0
        for path in paths:
            loads[path.stem] = _load()
            runs, run_walls = [], []
            for _ in range(args.repeat):
                nb_rows, wall, watched = time_notebook(path, method, cost, cores)
                runs.append(nb_rows)
                run_walls.append(wall)
                watch_cpu += watched
            nb_rows = combine(runs)
            rows += nb_rows
            walls[path.stem] = statistics.median(run_walls)
            print(f"{method:10s} {path.stem}: {sum(r['seconds'] or 0 for r in nb_rows):6.1f} s"
                  f" (wall {walls[path.stem]:.1f} s)", file=sys.stderr, flush=True)
        sections.append(table(method, rows, walls, loads, _load(), watch_cpu))
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
