"""Which processes does each notebook cell start, and how many are new interpreters that
import torch (the cost spawn pays per rank and per DataLoader worker)?

:class:`ProcessWatch` polls a process's descendants in a thread and files every new one
under the label given by the last :meth:`ProcessWatch.mark` (the cell running). A process
counts as a *new torch interpreter* when its command line differs from its parent's (it
was exec'ed: spawn, a forkserver's server, a subprocess, not a fork) and it has mapped
``libtorch``. Such a process lives a second or more, so polling every 0.1 s sees each one.

:func:`interpreter_cpu_s` measures what starting one costs here: the CPU seconds of
``python -c "import torch"``, ended with ``os._exit`` (a spawned DataLoader worker of
these notebooks also skips Python's teardown, which costs 0.3 CPU-s more).
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import psutil

TORCH_LIBRARY = "libtorch"
STARTUP_CODE = "import os, torch; os._exit(0)"


@dataclass
class Start:
    """One process a cell started, as last seen."""
    pid: int
    label: object
    new_interpreter: bool = False
    imports_torch: bool = False

    @property
    def torch_interpreter(self) -> bool:
        return self.new_interpreter and self.imports_torch


@dataclass
class ProcessWatch:
    """Poll ``root_pid``'s descendants every ``interval_s`` until :meth:`stop`."""
    root_pid: int
    interval_s: float = 0.1
    starts: dict[tuple[int, float], Start] = field(default_factory=dict)
    thread_cpu_s: float = 0.0

    def __post_init__(self):
        if self.interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {self.interval_s!r}")
        self._label = None
        self._cmdlines: dict[int, list[str]] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="process-watch", daemon=True)
        self._root = psutil.Process(self.root_pid)
        self._known = {(p.pid, p.create_time()) for p in self._descendants()}

    def start(self) -> ProcessWatch:
        self._thread.start()
        return self

    def mark(self, label) -> None:
        """File the processes first seen from now on under ``label``."""
        self.poll()  # what started before the mark belongs to the previous label
        with self._lock:
            self._label = label

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.poll()

    def __enter__(self) -> ProcessWatch:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def by_label(self) -> dict[object, list[Start]]:
        out: dict[object, list[Start]] = {}
        for s in self.starts.values():
            out.setdefault(s.label, []).append(s)
        return out

    def _run(self) -> None:
        began = time.thread_time()
        while not self._stop.wait(self.interval_s):
            self.poll()
        self.thread_cpu_s = time.thread_time() - began

    def _descendants(self) -> list[psutil.Process]:
        try:
            return self._root.children(recursive=True)
        except psutil.Error:
            return []

    def poll(self) -> None:
        with self._lock:
            for p in self._descendants():
                try:
                    key = (p.pid, p.create_time())
                    if key in self._known:
                        continue
                    start = self.starts.get(key)
                    if start is None:
                        start = self.starts[key] = Start(p.pid, self._label)
                    if not start.torch_interpreter:
                        self._classify(p, start)
                except psutil.Error:  # gone meanwhile: keep what was seen
                    continue

    def _classify(self, p: psutil.Process, start: Start) -> None:
        cmdline = p.cmdline()
        self._cmdlines[p.pid] = cmdline
        parent = self._cmdlines.get(p.ppid())
        if parent is None:
            try:
                parent = self._cmdlines[p.ppid()] = psutil.Process(p.ppid()).cmdline()
            except psutil.Error:
                parent = []
        start.new_interpreter = cmdline != parent
        if start.new_interpreter and not start.imports_torch:
            try:
                with open(f"/proc/{p.pid}/maps") as maps:
                    start.imports_torch = TORCH_LIBRARY in maps.read()
            except OSError:
                pass


def interpreter_cpu_s(runs: int = 3, python: str = sys.executable) -> float:
    """Median CPU seconds (user + system) that a new interpreter importing torch takes
    here, without Python's teardown at exit."""
    if runs < 1:
        raise ValueError(f"runs must be at least 1, got {runs!r}")
    costs = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([python, "-c", STARTUP_CODE], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        costs.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(costs)
