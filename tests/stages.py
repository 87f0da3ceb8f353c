"""`make test`: every stage of the test suite, two lanes side by side, and each stage's
time at the end.

Most of the suite waits (for a collective's timeout, a rank's deadline, a browser), so
two lanes share the cores:

    lane 1: lint, unit, binder-build-check, browser
    lane 2: notebooks-fork, notebooks-forkserver, notebooks-spawn, soak

Each stage is the Makefile target of that name, its output in ``build/test-logs/<stage>.log``;
a stage is added by naming a target in ``LANES``. Every stage runs even when an earlier one
failed (a failure in one says nothing about the others); a name with no target in the
Makefile fails as its stage, saying so; the end of a failed stage's log is printed, and the
exit status is 1 if any failed. ``python tests/stages.py unit soak`` runs only the targets
named, in one lane.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "build" / "test-logs"
LANES = (("lint", "unit", "binder-build-check", "browser"),
         ("notebooks-fork", "notebooks-forkserver", "notebooks-spawn", "soak"))
TAIL_LINES = 60


@dataclass
class Stage:
    name: str
    lane: int
    started_s: float = 0.0
    seconds: float = 0.0
    status: int | None = None

    @property
    def log(self) -> Path:
        return LOGS / f"{self.name}.log"


def makefile_targets(makefile: Path = ROOT / "Makefile") -> set[str]:
    """The names of the Makefile's rules (``name:`` at the start of a line)."""
    return set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", makefile.read_text(), re.MULTILINE))


def run_stage(stage: Stage, t0: float, make: str, printer) -> None:
    stage.started_s = time.monotonic() - t0
    printer(f"[{_clock(stage.started_s)}] {stage.name} started (log: "
            f"{stage.log.relative_to(ROOT)})")
    with open(stage.log, "w") as log:
        if stage.name in makefile_targets():
            status = subprocess.run([make, "--no-print-directory", stage.name], cwd=ROOT,
                                    stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL).returncode
        else:
            print(f"error: the Makefile has no target {stage.name!r}", file=log)
            status = 2
    stage.seconds = time.monotonic() - t0 - stage.started_s
    stage.status = status
    verdict = "passed" if status == 0 else f"FAILED (exit status {status})"
    printer(f"[{_clock(time.monotonic() - t0)}] {stage.name} {verdict} in "
            f"{_clock(stage.seconds)}: {_summary(stage.log)}")


def _summary(log: Path) -> str:
    """The last line pytest (or ruff) printed: its count of passed and failed."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines()
             if line.strip()]
    for line in reversed(lines):
        if any(word in line for word in ("passed", "failed", "error", "All checks")):
            return line.strip("= ")
    return lines[-1] if lines else "(no output)"


def _clock(seconds: float) -> str:
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes}:{rest:02d}"


def table(stages: list[Stage], setup_s: float, total_s: float) -> str:
    rows = ["| stage | lane | started | time | result |", "| --- | ---: | ---: | ---: | --- |",
            f"| setup | | 0:00 | {_clock(setup_s)} | done |"]
    for s in stages:
        result = "passed" if s.status == 0 else f"FAILED ({s.status})"
        rows.append(f"| {s.name} | {s.lane} | {_clock(setup_s + s.started_s)} | "
                    f"{_clock(s.seconds)} | {result} |")
    rows.append(f"| **all** | | | **{_clock(total_s)}** | "
                f"{'passed' if all(s.status == 0 for s in stages) else 'FAILED'} |")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    make = os.environ.get("MAKE", "make")
    lanes = [tuple(argv)] if argv else LANES
    unknown = [name for lane in lanes for name in lane if name not in makefile_targets()]
    if argv and unknown:
        raise SystemExit(f"no Makefile target {', '.join(unknown)}: the stages of `make test` "
                         f"are {', '.join(name for lane in LANES for name in lane)}")
    LOGS.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    # The set-up (a fresh clone's first install) before anything runs on top of it.
    setup = subprocess.run([make, "--no-print-directory", "setup"], cwd=ROOT)
    setup_s = time.monotonic() - t0
    if setup.returncode != 0:
        print(f"setup FAILED (exit status {setup.returncode}) after {_clock(setup_s)}")
        return 1
    lock = threading.Lock()

    def printer(text: str) -> None:
        with lock:
            print(text, flush=True)

    stages = [Stage(name, lane) for lane, names in enumerate(lanes, 1) for name in names]
    t1 = time.monotonic()

    def lane_runner(number: int) -> None:
        for stage in stages:
            if stage.lane == number:
                run_stage(stage, t1, make, printer)

    threads = [threading.Thread(target=lane_runner, args=(n,)) for n in range(1, len(lanes) + 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    total_s = time.monotonic() - t0
    for stage in stages:
        if stage.status != 0:
            tail = stage.log.read_text(errors="replace").splitlines()[-TAIL_LINES:]
            print(f"\n----- the end of {stage.log.relative_to(ROOT)} -----")
            print("\n".join(tail))
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nmake test: each stage's time (load average now {load}, {os.cpu_count()} cores)")
    print(table(stages, setup_s, total_s))
    return 0 if all(stage.status == 0 for stage in stages) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
