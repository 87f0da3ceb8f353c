"""``python -m talk_helpers.audit module:factory``: audit your own loader before a long run.

``factory(rank, world_size, epoch)`` returns what your training loop iterates, the same
contract as :func:`talk_helpers.audit.audit`. ``module:factory`` is imported from the
current directory or ``PYTHONPATH``, as ``torchrun -m`` users expect.

* On one machine the command starts its own world of ``--world-size`` ranks
  (:func:`talk_helpers.runtime.world.run_world`, gloo on loopback).
* Under ``torchrun`` (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` set) it joins the world
  torchrun made (env:// rendezvous), each rank iterates its own loader, every rank gathers
  what all ranks saw with ``all_gather_object``, rank 0 prints, and every rank exits with
  the same status. This is the multi-node form.

Exit status: 0 every check passed (⚠ warnings allowed), 1 a check failed or the audit
could not finish (a rank failed, hung past ``--timeout`` or died), 2 usage error (bad
target, import error, bad argument), with a one-line message naming what was wrong.
The report is plain text (no ANSI codes); ``--json`` prints one JSON document instead.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import threading
import time
from datetime import timedelta

PROG = "python -m talk_helpers.audit"
START_METHODS = ("fork", "forkserver", "spawn")
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A bad target or argument: exit status 2 with a one-line message."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage block
        raise UsageError(message)


def parse_args(argv=None) -> argparse.Namespace:
    parser = _Parser(
        prog=PROG,
        description="Audit your own loader before a long run: run it in every rank of a "
                    "real world and check that each sample is read once per epoch, "
                    "ranks take equal batches, workers all read, and the order changes.",
        epilog="exit status: 0 every check passed (warnings allowed), 1 a check failed or "
               "the audit could not finish, 2 usage error. Under torchrun: torchrun "
               "--nproc-per-node N -m talk_helpers.audit module:factory ...")
    parser.add_argument("target", help="module:factory, factory(rank, world_size, epoch) "
                                       "returns what the training loop iterates")
    parser.add_argument("--world-size", type=int, default=None,
                        help="ranks to start (default 2; under torchrun: WORLD_SIZE)")
    parser.add_argument("--epochs", type=int, default=2, help="epochs to audit (default 2)")
    parser.add_argument("--expected", type=int, default=None,
                        help="ids 0..N-1 expected once per epoch (default: the ids of epoch 0)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="also check that every batch holds this many samples")
    shuffle = parser.add_mutually_exclusive_group()
    shuffle.add_argument("--shuffle", dest="shuffle", action="store_const", const=True,
                         default=None, help="the loader is meant to shuffle: judge the order")
    shuffle.add_argument("--no-shuffle", dest="shuffle", action="store_const", const=False,
                         help="the loader is not meant to shuffle: do not judge the order")
    parser.add_argument("--start-method", choices=START_METHODS, default=None,
                        help="how the ranks are started (not under torchrun)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="deadline in seconds for the whole audit (default 120)")
    parser.add_argument("--backend", default="gloo",
                        help="process group backend under torchrun (default gloo)")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    for name in ("world_size", "epochs", "batch_size"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"argument --{name.replace('_', '-')}: must be ≥ 1, got {value}")
    if args.expected is not None and args.expected < 0:
        raise UsageError(f"argument --expected: must be ≥ 0, got {args.expected}")
    if not args.timeout > 0:
        raise UsageError(f"argument --timeout: must be > 0 seconds, got {args.timeout:g}")
    return args


class ImportedFactory:
    """``module:factory`` imported where it is called, so rank processes started with
    spawn or forkserver import it themselves (it pickles as the target string)."""

    def __init__(self, target: str, path: str | None = None):
        self.target = target
        self.path = path if path is not None else os.getcwd()

    def resolve(self):
        if self.path not in sys.path:
            sys.path.insert(0, self.path)
        module_name, _, attr = self.target.partition(":")
        module = importlib.import_module(module_name)
        factory = module
        for part in attr.split("."):
            factory = getattr(factory, part)
        return factory

    def __call__(self, rank: int, world_size: int, epoch: int):
        return self.resolve()(rank, world_size, epoch)

    def __repr__(self) -> str:
        return self.target


def load_target(target: str) -> ImportedFactory:
    """Check ``module:factory`` now, in this process, so a typo is a usage error."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"target {target!r} must be module:factory, e.g. my_project.data:"
                         "make_loader")
    factory = ImportedFactory(target)
    try:
        resolved = factory.resolve()
    except ImportError as exc:
        raise UsageError(f"cannot import module {module_name!r} "
                         f"({type(exc).__name__}: {exc})") from None
    except AttributeError:
        raise UsageError(f"module {module_name!r} has no attribute {attr!r}") from None
    except Exception as exc:  # the user's module raised while importing
        raise UsageError(f"importing {module_name!r} raised {type(exc).__name__}: {exc}") \
            from None
    if not callable(resolved):
        raise UsageError(f"{target} is {type(resolved).__name__}, not a callable "
                         "factory(rank, world_size, epoch)")
    return factory


def under_torchrun() -> bool:
    return all(v in os.environ for v in TORCHRUN_VARS)


def main(argv=None) -> int:
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="replace")
    try:
        args = parse_args(argv)
        factory = load_target(args.target)
        if under_torchrun():
            return _main_torchrun(args, factory)
        return _main_local(args, factory)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _report_kwargs(args) -> dict:
    return dict(expected=args.expected, batch_size=args.batch_size, shuffle=args.shuffle)


def _emit(report, args, stream=None) -> int:
    status = EXIT_PASS if report.ok else EXIT_FAIL
    stream = stream or sys.stdout
    if args.json:
        doc = {"target": args.target, **report.to_dict(), "exit_status": status}
        print(json.dumps(doc, ensure_ascii=False), file=stream)
    else:
        print(repr(report), file=stream)
    stream.flush()
    return status


def _main_local(args, factory: ImportedFactory) -> int:
    from talk_helpers.audit.core import audit

    # One call: ranks kept warm for a next call would only cost their shutdown at exit.
    report = audit(factory, world_size=args.world_size or 2, epochs=args.epochs,
                   timeout_s=args.timeout, start_method=args.start_method, reuse=False,
                   **_report_kwargs(args))
    return _emit(report, args)


# ------------------------------------------------------------------ under torchrun


# A rank that finished its own loader and waits for the others outlives the deadline by
# this much, so the stuck rank reports first: torchrun stops every rank when one exits
# and names the first to exit as the root cause.
WAITING_GRACE_S = 5.0


def _main_torchrun(args, factory: ImportedFactory) -> int:
    import torch.distributed as dist

    from talk_helpers.audit.core import build_report, collect_batches, failed_report

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.world_size is not None and args.world_size != world_size:
        raise UsageError(f"argument --world-size: {args.world_size} disagrees with "
                         f"torchrun's WORLD_SIZE={world_size}; drop it under torchrun")
    if args.start_method is not None and rank == 0:
        print(f"{PROG}: note: --start-method is ignored under torchrun, which starts "
              "the ranks", file=sys.stderr)
    progress = {"last": "joining the process group"}
    _start_watchdog(rank, args.timeout, progress)
    try:
        if args.backend == "nccl":  # all_gather_object then goes through this GPU
            import torch

            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        # The watchdogs time the audit; a collective that gave up first would make a rank
        # waiting for the stuck one fail before the stuck one could say where it is.
        dist.init_process_group(args.backend,
                                timeout=timedelta(seconds=args.timeout + WAITING_GRACE_S))
    except Exception as exc:
        print(f"rank {rank}: cannot join torchrun's world ({_describe(exc)})",
              file=sys.stderr)
        return EXIT_FAIL
    try:
        progress["last"] = "iterating the loader"
        try:
            payload = ("ok", collect_batches(rank, world_size, _Tracked(factory, progress),
                                             args.epochs))
        except Exception as exc:
            payload = ("error", _describe(exc))
        progress["last"] = "gathering every rank's results (all_gather_object)"
        progress["waiting"] = True
        gathered = [None] * world_size
        try:
            dist.all_gather_object(gathered, payload)
        except Exception as exc:
            print(f"rank {rank}: could not gather the other ranks' results "
                  f"({_describe(exc)}); another rank failed or hung", file=sys.stderr)
            # Leave after the rank that failed: torchrun (polling every 0.1 s) names the
            # first rank it sees exit as the root cause.
            time.sleep(1.0)
            return EXIT_FAIL
        failed = [(r, p[1]) for r, p in enumerate(gathered) if p[0] != "ok"]
        if failed:
            r, what = failed[0]
            report = failed_report(world_size, args.epochs,
                                   f"the audit could not finish: rank {r}: {what}",
                                   shuffle=args.shuffle)
        else:
            report = build_report([p[1] for p in gathered], **_report_kwargs(args))
        status = _emit(report, args) if rank == 0 else (EXIT_PASS if report.ok else EXIT_FAIL)
        # Leave together once rank 0 has printed: torchrun stops the other ranks as soon
        # as one exits with an error, which could cut the report short.
        try:
            dist.barrier()
        except Exception:
            pass
        return status
    finally:
        progress["done"] = True
        try:
            dist.destroy_process_group()
        except Exception:
            pass


class _Tracked:
    """The factory, noting which epoch this rank is in for the watchdog's message."""

    def __init__(self, factory, progress: dict):
        self.factory, self.progress = factory, progress

    def __call__(self, rank, world_size, epoch):
        self.progress["last"] = f"epoch {epoch}: building the loader"
        loader = self.factory(rank, world_size, epoch)
        self.progress["last"] = f"epoch {epoch}: iterating the loader"
        return loader


def _start_watchdog(rank: int, seconds: float, progress: dict) -> None:
    """At the deadline: say where this rank is stuck, stop its workers, exit 1."""
    started = time.monotonic()

    def watch():
        while True:
            time.sleep(0.2)
            if progress.get("done"):
                return
            deadline = seconds + (WAITING_GRACE_S if progress.get("waiting") else 0.0)
            if time.monotonic() - started >= deadline:
                break
        where = (f"waiting for the other ranks: {progress['last']}"
                 if progress.get("waiting") else f"stuck: {progress['last']}")
        print(f"rank {rank}: the audit did not finish within {seconds:g} s ({where})",
              file=sys.stderr, flush=True)
        try:
            import psutil

            from talk_helpers.runtime.processes import kill_tree

            kill_tree([psutil.Process()], include_roots=False)
        finally:
            os._exit(EXIT_FAIL)

    threading.Thread(target=watch, name="audit-deadline", daemon=True).start()


def _describe(exc: BaseException) -> str:
    from talk_helpers.runtime.report import mask_volatile

    lines = str(exc).strip().splitlines()
    return mask_volatile(f"{type(exc).__name__}: {lines[0] if lines else ''}")
