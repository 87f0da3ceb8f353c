"""`make test`: every stage of the test suite on a small pool of lanes, longest first, and
each stage's time at the end.

Much of the suite waits (for a collective's timeout, a rank's deadline, a browser, pip), so
stages share the cores: :data:`LANES` of them run at once (``TEST_LANES`` to change it).
Each lane takes the longest stage not yet started, so the long ones do not end up last
on a lane of their own. How long a stage takes is what it took in the last run here
(``build/test-logs/times.json``, written by each full run), else :data:`EXPECTED_S`.

Each stage is the Makefile target of that name, its output in
``build/test-logs/<stage>.log``; a stage is added by naming a target in :data:`STAGES`.
A stage whose target needs the .venv (``$(STAMP)``) starts once `make setup` is done; one
that needs none (binder-build-check) starts beside the set-up. Every stage runs even when
another one failed (a failure in one says nothing about the
others); a name with no target in the Makefile fails as its stage, saying so; the end of
a failed stage's log is printed, and the exit status is 1 if any failed. The end table
gives each stage's lane, start, time and CPU time (user + system, its processes and the
ones they waited for). ``python tests/stages.py unit soak`` runs only the targets named,
one after the other, in one lane (``TEST_LANES=N``: in N, in the order named).
"""

from __future__ import annotations

import json
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
TIMES = LOGS / "times.json"
STAGES = ("lint", "unit", "notebooks-fork", "notebooks-forkserver", "notebooks-spawn",
          "soak", "binder-build-check", "browser")
# Seconds each stage took in `make test` from a fresh clone on a quiet 2-core machine.
EXPECTED_S = {"lint": 1, "unit": 1071, "notebooks-fork": 253, "notebooks-forkserver": 366,
              "notebooks-spawn": 771, "soak": 286, "binder-build-check": 307, "browser": 683}
LANES = 3
TAIL_LINES = 60


@dataclass
class Stage:
    name: str
    lane: int = 0
    started_s: float = 0.0
    seconds: float = 0.0
    cpu_s: float = 0.0
    status: int | None = None

    @property
    def log(self) -> Path:
        return LOGS / f"{self.name}.log"


def makefile_targets(makefile: Path = ROOT / "Makefile") -> set[str]:
    """The names of the Makefile's rules (``name:`` at the start of a line)."""
    return set(makefile_rules(makefile))


def makefile_rules(makefile: Path = ROOT / "Makefile") -> dict[str, str]:
    """Each rule's name and what it needs (the rest of its ``name: ...`` line)."""
    found = re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)(.*)$", makefile.read_text(), re.MULTILINE)
    return {name: needs.strip() for name, needs in found}


def needs_setup(rules: dict[str, str]) -> set[str]:
    """The targets that need the set-up's .venv (``$(STAMP)`` or ``setup`` among what they
    need); the others (binder-build-check builds its own) start while it installs."""
    return {name for name, needs in rules.items()
            if {"$(STAMP)", "setup"} & set(needs.split())}


def expected_seconds(names, times_file: Path | None = None) -> dict[str, float]:
    """How long each stage is expected to take: its time in the last run, else
    :data:`EXPECTED_S`, else (a new stage) longer than any, so that it starts first."""
    try:
        last = json.loads((times_file or TIMES).read_text())
    except (OSError, ValueError):
        last = {}
    longest = max(EXPECTED_S.values())
    return {name: float(last.get(name, EXPECTED_S.get(name, longest + 1))) for name in names}


def longest_first(names, expected: dict[str, float]) -> list[str]:
    """The stages in the order lanes take them: longest first, ties in the given order."""
    return sorted(names, key=lambda name: -expected[name])


def lanes_from_env(value: str | None) -> int:
    """``TEST_LANES``: how many stages run at once (default :data:`LANES`)."""
    if value is None or not value.strip():
        return LANES
    if not value.strip().isdigit() or int(value) < 1:
        raise SystemExit(f"TEST_LANES={value!r}: give a whole number of lanes, 1 or more")
    return int(value)


def run_make(name: str, log, make: str) -> tuple[int, float]:
    """Run ``make name``, its output into ``log``; its exit status and CPU seconds."""
    process = subprocess.Popen([make, "--no-print-directory", name], cwd=ROOT, stdout=log,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    _, wait_status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(wait_status)
    return process.returncode, usage.ru_utime + usage.ru_stime


def run_stage(stage: Stage, t0: float, make: str, printer, targets: set[str],
              setup_failed: bool = False) -> None:
    stage.started_s = time.monotonic() - t0
    printer(f"[{_clock(stage.started_s)}] {stage.name} started in lane {stage.lane} (log: "
            f"{stage.log.relative_to(ROOT)})")
    with open(stage.log, "w") as log:
        if setup_failed:
            print("error: `make setup` failed: this stage needs its .venv", file=log)
            stage.status = 4
        elif stage.name in targets:
            stage.status, stage.cpu_s = run_make(stage.name, log, make)
        else:
            print(f"error: the Makefile has no target {stage.name!r}", file=log)
            stage.status = 2
    stage.seconds = time.monotonic() - t0 - stage.started_s
    verdict = "passed" if stage.status == 0 else f"FAILED (exit status {stage.status})"
    printer(f"[{_clock(time.monotonic() - t0)}] {stage.name} {verdict} in "
            f"{_clock(stage.seconds)}: {_summary(stage.log)}")


def run_lanes(stages: list[Stage], lanes: int, run, waits_for_setup=frozenset(),
              setup_done: threading.Event | None = None) -> None:
    """Run every stage through ``run(stage)``, ``lanes`` at a time, in the list's order:
    each lane takes the next stage it may start as soon as its last one ends, whatever its
    result. A stage named in ``waits_for_setup`` starts only once ``setup_done`` is set."""
    queue = list(stages)
    changed = threading.Condition()
    done = setup_done or threading.Event()
    if setup_done is None:
        done.set()

    def next_stage() -> Stage | None:
        with changed:
            while queue:
                for stage in queue:
                    if stage.name not in waits_for_setup or done.is_set():
                        queue.remove(stage)
                        return stage
                changed.wait(timeout=1.0)  # until the set-up is done
            return None

    def lane(number: int) -> None:
        while (stage := next_stage()) is not None:
            stage.lane = number
            try:
                run(stage)
            except Exception as error:  # a stage's own crash fails that stage only
                stage.status = stage.status if stage.status not in (None, 0) else 3
                print(f"{stage.name}: {type(error).__name__}: {error}", flush=True)

    threads = [threading.Thread(target=lane, args=(n,)) for n in range(1, lanes + 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


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


def table(stages: list[Stage], setup_s: float, setup_status: int, total_s: float) -> str:
    rows = ["| stage | lane | started | time | CPU | result |",
            "| --- | ---: | ---: | ---: | ---: | --- |",
            f"| setup | | 0:00 | {_clock(setup_s)} | | "
            f"{'done' if setup_status == 0 else f'FAILED ({setup_status})'} |"]
    for s in sorted(stages, key=lambda s: (s.started_s, s.lane)):
        result = "passed" if s.status == 0 else f"FAILED ({s.status})"
        rows.append(f"| {s.name} | {s.lane} | {_clock(s.started_s)} | "
                    f"{_clock(s.seconds)} | {_clock(s.cpu_s)} | {result} |")
    cpu = sum(s.cpu_s for s in stages)
    passed = setup_status == 0 and all(s.status == 0 for s in stages)
    rows.append(f"| **all** | | | **{_clock(total_s)}** | {_clock(cpu)} | "
                f"{'passed' if passed else 'FAILED'} |")
    return "\n".join(rows)


def save_times(stages: list[Stage], times_file: Path | None = None) -> None:
    """Keep each stage's time for the next run's order (a failed stage's too: it ran)."""
    times_file = times_file or TIMES
    try:
        times = json.loads(times_file.read_text())
    except (OSError, ValueError):
        times = {}
    times.update({s.name: round(s.seconds, 1) for s in stages})
    times_file.write_text(json.dumps(times, indent=1, sort_keys=True) + "\n")


def main(argv: list[str]) -> int:
    make = os.environ.get("MAKE", "make")
    targets = makefile_targets()
    if argv:
        unknown = [name for name in argv if name not in targets]
        if unknown:
            raise SystemExit(f"no Makefile target {', '.join(unknown)}: the stages of "
                             f"`make test` are {', '.join(STAGES)}")
        names = list(argv)
        lanes = lanes_from_env(os.environ.get("TEST_LANES")) if "TEST_LANES" in os.environ else 1
    else:
        names = longest_first(STAGES, expected_seconds(STAGES))
        lanes = lanes_from_env(os.environ.get("TEST_LANES"))
    LOGS.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()

    def printer(text: str) -> None:
        with lock:
            print(text, flush=True)

    t0 = time.monotonic()
    # The set-up (a fresh clone's first install) before any stage that runs on top of it;
    # a stage that needs none starts beside it.
    setup_done, setup = threading.Event(), {}

    def run_setup() -> None:
        setup["status"] = subprocess.run([make, "--no-print-directory", "setup"],
                                         cwd=ROOT).returncode
        setup["seconds"] = time.monotonic() - t0
        if setup["status"] != 0:
            printer(f"setup FAILED (exit status {setup['status']}) after "
                    f"{_clock(setup['seconds'])}: the stages that need it fail")
        setup_done.set()

    setup_thread = threading.Thread(target=run_setup)
    setup_thread.start()
    waits = needs_setup(makefile_rules())
    stages = [Stage(name) for name in names]

    def run(stage: Stage) -> None:
        failed = stage.name in waits and setup.get("status", 0) != 0
        run_stage(stage, t0, make, printer, targets, setup_failed=failed)

    run_lanes(stages, lanes, run, waits_for_setup=waits, setup_done=setup_done)
    setup_thread.join()
    total_s = time.monotonic() - t0
    if not argv:
        save_times(stages)
    for stage in stages:
        if stage.status != 0:
            tail = stage.log.read_text(errors="replace").splitlines()[-TAIL_LINES:]
            print(f"\n----- the end of {stage.log.relative_to(ROOT)} -----")
            print("\n".join(tail))
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    lanes_said = f"{lanes} lanes" if lanes > 1 else "one lane"
    print(f"\nmake test: each stage's time ({lanes_said}; load average now {load}, "
          f"{os.cpu_count()} cores)")
    print(table(stages, setup["seconds"], setup["status"], total_s))
    return 0 if setup["status"] == 0 and all(s.status == 0 for s in stages) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
