"""Run a loader in a ``/dev/shm`` as small as a container's, on a machine whose own is large.

:func:`run_in_small_shm` starts one process (with the start method in force), gives it a
private mount namespace with a fresh tmpfs of ``shm_bytes`` on ``/dev/shm`` (what
``docker run --shm-size`` sets), and there iterates the loader ``make_loader()`` returns
the way a training loop does: one batch at a time, each held for ``step_s`` seconds
while the workers fill the queue. The loader's workers start from that process, so they
see the small ``/dev/shm``; nothing outside the process sees it, and it disappears with
the process.

:func:`compare_in_small_shm` does the same for several loaders, each under every start
method of its workers, in one such process: which data fits a container under fork,
forkserver and spawn.

Mounting needs root (CAP_SYS_ADMIN), or user namespaces where the kernel allows them.
Where neither works, the run reports that it could not, and why, instead of running.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import html
import os
import queue
import re
import signal
import threading
import time
from dataclasses import dataclass

import psutil
import torch.multiprocessing as mp

from talk_helpers.arguments import require_int, require_seconds
from talk_helpers.checks.one_line import OneLineReport
from talk_helpers.checks.sizes import size_text
from talk_helpers.runtime.processes import kill_tree
from talk_helpers.runtime.start_method import RANK_FORKSERVER_PRELOAD, START_METHODS
from talk_helpers.verdicts.render import (
    BAD_MARK,
    NOTE_MARK,
    OK_MARK,
    mark,
    table_html,
)

__all__ = ["SmallShmRun", "SmallShmTable", "compare_in_small_shm", "run_in_small_shm"]

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_REC, MS_PRIVATE = 0x4000, 0x40000
_TORCH_SHM_FILE = re.compile(r"</torch_[\d_]+>")


@dataclass(frozen=True, repr=False)
class SmallShmRun(OneLineReport):
    """What happened: ``status`` is ``"finished"``, ``"failed"`` or ``"unavailable"``.

    ``batches``: how many the loop took; ``error``: the loader's exception, last line,
    file names masked; ``worker_signals``: signals that killed workers (e.g. SIGBUS);
    ``peak_bytes``: the most of the private ``/dev/shm`` in use, polled every millisecond.
    """

    status: str
    shm_bytes: int
    batches: int = 0
    error: str | None = None
    worker_signals: tuple[str, ...] = ()
    peak_bytes: int = 0
    reason: str | None = None

    @property
    def ok(self) -> bool:
        """True when the loop took every batch."""
        return self.status == "finished"

    def _where(self) -> str:
        return f"in a private /dev/shm of {size_text(self.shm_bytes)}"

    def _verdict(self) -> str:
        if self.status == "unavailable":
            return f"not run: this machine cannot give a process a private /dev/shm ({self.reason})"
        if self.status == "finished":
            return f"{self._where()}: {self.batches} batches, no failure"
        if self.worker_signals:
            killed = ", ".join(f"{name} ({signal.strsignal(signal.Signals[name])})"
                               for name in self.worker_signals)
            return f"{self._where()}: a worker was killed by {killed}"
        return f"{self._where()}: the loader failed: {self.error}"

    def _mark(self) -> str:
        return NOTE_MARK if self.status == "unavailable" else mark(self.ok)


def run_in_small_shm(make_loader, *, shm_bytes: int, step_s: float = 0.1,
                     timeout_s: float = 60.0, batches: int | None = None) -> SmallShmRun:
    """Iterate ``make_loader()`` in a process whose ``/dev/shm`` holds ``shm_bytes``.

    ``make_loader`` must be picklable (a module-level function, one from an
    ``%%importable`` cell, or a ``functools.partial`` of one). ``batches``: stop after that
    many (default: the whole loader). The whole run, workers included, is stopped after
    ``timeout_s``.
    """
    _check_loader("make_loader", make_loader)
    _check_run(shm_bytes, step_s, timeout_s, batches)
    runs = _in_child(_one_run, (make_loader, step_s, batches), shm_bytes, timeout_s)
    return runs if isinstance(runs, SmallShmRun) else runs[0]


def compare_in_small_shm(loaders: dict, *, shm_bytes: int,
                         start_methods: tuple[str, ...] = START_METHODS, batches: int = 4,
                         step_s: float = 0.05, timeout_s: float = 120.0) -> SmallShmTable:
    """Each of ``loaders`` (``{label: make_loader}``) with its workers started by each of
    ``start_methods``, all in one process whose ``/dev/shm`` holds ``shm_bytes``.

    A run takes ``batches`` batches, or fails. ``make_loader()`` must leave the start
    method to the default (no ``multiprocessing_context``): each run sets it. Under fork
    a worker inherits the dataset; under forkserver and spawn it receives it pickled, and
    a tensor in it goes through ``/dev/shm``.
    """
    if not isinstance(loaders, dict) or not loaders:
        raise TypeError(f"loaders must be a non-empty dict {{label: make_loader}}, got {loaders!r}")
    for label, make_loader in loaders.items():
        _check_loader(f"loaders[{label!r}]", make_loader)
    methods = tuple(start_methods)
    unknown = [m for m in methods if m not in START_METHODS]
    if not methods or unknown:
        raise ValueError(f"start_methods must name some of {', '.join(START_METHODS)}, "
                         f"got {start_methods!r}")
    _check_run(shm_bytes, step_s, timeout_s, batches)
    work = tuple((label, method, make_loader) for label, make_loader in loaders.items()
                 for method in methods)
    runs = _in_child(_runs_by_method, (work, step_s, batches), shm_bytes, timeout_s)
    if isinstance(runs, SmallShmRun):  # unavailable, or no answer: the same for every run
        runs = [runs] * len(work)
    return SmallShmTable(shm_bytes, tuple(loaders), methods,
                         {(label, method): run for (label, method, _), run
                          in zip(work, runs, strict=True)})


@dataclass(frozen=True)
class SmallShmTable:
    """Runs by loader (rows) and start method (columns), in one private ``/dev/shm``."""

    shm_bytes: int
    labels: tuple[str, ...]
    methods: tuple[str, ...]
    runs: dict

    @property
    def ok(self) -> bool:
        return all(run.ok for run in self.runs.values())

    def cell(self, label: str, method: str) -> str:
        run = self.runs[(label, method)]
        if run.status == "finished":
            return f"{OK_MARK} {run.batches} batches"
        if run.status == "unavailable":
            return f"{NOTE_MARK} not run"
        if run.worker_signals or not run.error:
            return f"{BAD_MARK} {run._verdict().split(': ', 1)[-1]}"
        return f"{BAD_MARK} {_cause(run.error)}"

    def _headline(self) -> str:
        first = next(iter(self.runs.values()))
        if first.status == "unavailable":
            return first._verdict()
        return f"in a private /dev/shm of {size_text(self.shm_bytes)}, workers started by:"

    def __repr__(self) -> str:
        rows = [("", *self.methods)] + [(label, *(self.cell(label, m) for m in self.methods))
                                        for label in self.labels]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                 for row in rows]
        return "\n".join([self._headline(), *lines])

    __str__ = __repr__

    def _repr_html_(self) -> str:
        table = table_html(["", *self.methods],
                           [[label, *(self.cell(label, m) for m in self.methods)]
                            for label in self.labels])
        return f"<div>{html.escape(self._headline())}{table}</div>"


def _check_loader(name: str, make_loader) -> None:
    if not callable(make_loader):
        raise TypeError(f"{name} must be callable with no arguments, got {make_loader!r}")


def _check_run(shm_bytes, step_s, timeout_s, batches) -> None:
    require_int("shm_bytes", shm_bytes, minimum=4096)
    if isinstance(step_s, bool) or not isinstance(step_s, int | float) or step_s < 0:
        raise ValueError(f"step_s must be a number of seconds ≥ 0, got {step_s!r}")
    require_seconds("timeout_s", timeout_s)
    require_int("batches", batches, minimum=1, allow_none=True)


def _in_child(job, args: tuple, shm_bytes: int, timeout_s: float):
    """Run ``job(*args)`` in a new process with a private /dev/shm; return what it put in
    the queue, or a failed (or unavailable) run."""
    ctx = mp.get_context()
    results = ctx.Queue()
    process = ctx.Process(target=_child, args=(job, args, shm_bytes, results),
                          name="small-shm", daemon=False)
    process.start()
    try:
        outcome = results.get(timeout=timeout_s)
    except queue.Empty:
        outcome = SmallShmRun("failed", shm_bytes, error=f"no answer within {timeout_s:g} s")
    finally:  # the answer is in: stop the process and its workers now, whatever they do
        with contextlib.suppress(psutil.Error):
            kill_tree([psutil.Process(process.pid)])
        process.join(1.0)
        results.close()
        results.cancel_join_thread()
    return outcome


def _child(job, args: tuple, shm_bytes: int, results) -> None:
    """In the new process: a private /dev/shm, then the job."""
    # What a dying worker prints (a Bus error note from torch's signal handler) would land
    # in the notebook among the outputs; the run's report says what happened instead.
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    try:
        _private_dev_shm(shm_bytes)
    except OSError as exc:
        results.put(SmallShmRun("unavailable", shm_bytes, reason=str(exc)))
        return
    _forget_an_inherited_forkserver()
    if mp.get_start_method(allow_none=True) == "forkserver":
        # This process's workers come from a server of its own, started (after the mount)
        # at the first loader; preloaded with torch, it forks each in hundredths of a second.
        mp.set_forkserver_preload(list(RANK_FORKSERVER_PRELOAD))
    results.put(job(shm_bytes, *args))


def _forget_an_inherited_forkserver() -> None:
    """A forked process keeps its parent's fork server (pid, address) as its own: its
    forkserver workers would then come from a server that sees the parent's /dev/shm, and
    multiprocessing's check on that server (``os.waitpid`` on a process that is not this
    one's child) fails with ECHILD. Forget it, so that a server of this process's own
    starts at its first forkserver loader."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    if server._forkserver_pid is not None:
        with contextlib.suppress(OSError):
            os.close(server._forkserver_alive_fd)   # this process's copy only
        server._forkserver_address = server._forkserver_alive_fd = None
        server._forkserver_pid = None


def _one_run(shm_bytes: int, make_loader, step_s: float, batches: int | None) -> SmallShmRun:
    """The training-like loop over ``make_loader()``, as one run."""
    peak = _PeakWatch()
    taken, iterator = 0, None
    try:
        iterator = iter(make_loader())
        for _ in iterator:
            taken += 1
            time.sleep(step_s)  # the training step: slower than loading, as on a GPU
            if batches is not None and taken >= batches:
                break
    except Exception as exc:  # noqa: BLE001 - the loader's failure is the result
        run = SmallShmRun("failed", shm_bytes, taken, _last_line(exc),
                          _worker_signals(iterator), peak.stop())
    else:
        run = SmallShmRun("finished", shm_bytes, taken, peak_bytes=peak.stop())
    _stop_workers(iterator)
    return run


def _runs_by_method(shm_bytes: int, work: tuple, step_s: float,
                    batches: int) -> list[SmallShmRun]:
    """One run per (label, start method, make_loader), the workers' start method set
    before each loader is made."""
    preloaded = False
    runs = []
    for _label, method, make_loader in work:
        if method == "forkserver" and not preloaded:
            mp.set_forkserver_preload(list(RANK_FORKSERVER_PRELOAD))
            preloaded = True
        mp.set_start_method(method, force=True)
        runs.append(_one_run(shm_bytes, make_loader, step_s, batches))
    return runs


def _stop_workers(iterator) -> None:
    """End a DataLoader iterator's workers now (a run stopped early leaves them running)."""
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        with contextlib.suppress(Exception):
            shutdown()


def _private_dev_shm(shm_bytes: int) -> None:
    """Give this process its own mount namespace with a tmpfs of ``shm_bytes`` on /dev/shm."""
    libc = ctypes.CDLL(None, use_errno=True)

    def call(what: str, result: int) -> None:
        if result != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"{what} failed: {errno.errorcode.get(code, code)}")

    if libc.unshare(CLONE_NEWNS) != 0:  # not root: try a user namespace of our own
        uid, gid = os.getuid(), os.getgid()
        call("unshare", libc.unshare(CLONE_NEWUSER | CLONE_NEWNS))
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"0 {uid} 1")
        _write("/proc/self/gid_map", f"0 {gid} 1")
    call("making mounts private", libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None))
    call("mounting a tmpfs on /dev/shm",
         libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", 0, f"size={shm_bytes}".encode()))


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


class _PeakWatch:
    """Polls how much of /dev/shm is in use, in a thread, until stopped."""

    def __init__(self):
        self.peak, self._running = 0, True
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while self._running:
            st = os.statvfs("/dev/shm")
            self.peak = max(self.peak, (st.f_blocks - st.f_bfree) * st.f_frsize)
            time.sleep(0.001)

    def stop(self) -> int:
        self._running = False
        self._thread.join(1.0)
        return self.peak


def _last_line(exc: BaseException) -> str:
    """The exception's last line (a worker's error arrives wrapped), file names masked."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    text = lines[-1] if lines else ""
    if not re.match(r"^\w+(Error|Exception)\b", text):
        text = f"{type(exc).__name__}: {text}"
    return _TORCH_SHM_FILE.sub("</torch_…>", text)


def _cause(error: str) -> str:
    """The last clause of an error, without its errno: "No space left on device"."""
    return re.sub(r"\s*\(\d+\)$", "", error.rsplit(": ", 1)[-1])


def _worker_signals(iterator) -> tuple[str, ...]:
    """Names of the signals that ended the loader's workers (read from the iterator)."""
    workers = getattr(iterator, "_workers", ()) or ()
    found = []
    for worker in workers:
        code = worker.exitcode
        if code is not None and code < 0:
            found.append(signal.Signals(-code).name)
    return tuple(sorted(set(found)))
