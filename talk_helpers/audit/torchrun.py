"""The audit inside a world torchrun made (``torchrun … -m talk_helpers.audit TARGET``, or
the command's own ``--nproc-per-node``): each rank iterates its own loader, rank 0
gathers what every rank saw (``gather_object``), judges it, prints, and every rank exits
with the same status.

Ranks keep each other informed through the process group's store: how far each got
(``audit/progress/<rank>``), and whether one failed (``audit/failed``: the others stop
at their next batch instead of reading to the end). At the deadline rank 0 prints the
report with every rank's progress (one JSON document with ``--json``) and exits 3; the
other ranks wait for it to have printed, say one line each, and exit 3 too.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from datetime import timedelta

from talk_helpers.audit.failure import DEADLINE_HINT, EXIT_ERROR, Failure
from talk_helpers.audit.shell import UsageError, emit, prog, report_options

__all__ = ["VERDICTS_ENV", "exit_together", "main_torchrun", "read_verdicts",
           "write_verdict"]

# A rank done and waiting for the others outlives the deadline by this much, so that the
# stuck rank's story is told before torchrun stops everyone at the first exit.
WAITING_GRACE_S = 5.0
KEY = "audit/"
EXIT_WAIT_S = 60.0   # how long a rank that knows the verdict waits for the others to know it
VERDICTS_ENV = "TALK_AUDIT_VERDICTS"   # a folder where each rank writes its exit status


def main_torchrun(args, factory) -> int:
    import torch.distributed as dist

    from talk_helpers.audit.checks import CHECKS, Options
    from talk_helpers.audit.collect import Plan, Progress, Stopped, collect
    from talk_helpers.audit.core import build_report, failed_report, validate_options
    from talk_helpers.audit.failure import from_exception
    from talk_helpers.audit.sample_ids import sample_ids

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.world_size is not None and args.world_size != world_size:
        raise UsageError(f"argument --world-size: {args.world_size} disagrees with "
                         f"torchrun's WORLD_SIZE={world_size}; drop it under torchrun")
    if args.start_method is not None and rank == 0:
        print(f"{prog()}: note: --start-method is ignored under torchrun, which starts "
              "the ranks", file=sys.stderr)
    kwargs = report_options(args)
    try:
        reader = sample_ids(kwargs.pop("ids"), kwargs.pop("by_content"))
        options = Options(expected=kwargs["expected"], batch_size=args.batch_size,
                          shuffle=args.shuffle, dropped_by_design=args.dropped_by_design,
                          repeated_by_design=args.repeated_by_design, steps=args.steps,
                          ids=reader.label, counted=reader.counted,
                          with_replacement=args.with_replacement, mixing=args.mixing)
        validate_options(options)
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    plan = Plan(epochs=args.epochs, reader=reader, steps=args.steps,
                reuse_loader=args.reuse_loader, epoch_call=args.epoch_call, checks=CHECKS)

    shared = _Shared(rank)
    progress = Progress(shared.publish, poll=shared.another_failed)
    progress.phase = "joining the process group"
    deadline = _Deadline(rank, world_size, args, options, progress, shared)
    deadline.start()
    try:
        if args.backend == "nccl":  # the collectives then go through this GPU
            import torch

            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        # The deadline is the audit's; a collective that gave up first would make a rank
        # waiting for the stuck one fail before the stuck one could say where it is.
        dist.init_process_group(args.backend,
                                timeout=timedelta(seconds=args.timeout + WAITING_GRACE_S))
        shared.store = dist.distributed_c10d._get_default_store()
    except Exception as exc:
        print(f"rank {rank}: cannot join torchrun's world ({type(exc).__name__}: "
              f"{str(exc).splitlines()[0] if str(exc) else ''})", file=sys.stderr)
        deadline.done = True
        write_verdict(EXIT_ERROR)
        return EXIT_ERROR
    try:
        try:
            payload = ("ok", collect(rank, world_size, factory, plan, progress=progress))
        except Stopped:
            payload = ("stopped", progress.text())
        except Exception as exc:
            failure = from_exception(exc, rank, world_size, progress.epoch)
            shared.fail()
            payload = ("error", failure)
        progress.phase = "gathering every rank's results"
        shared.publish(progress.text())
        deadline.waiting = True
        gathered = [None] * world_size if rank == 0 else None
        try:
            dist.gather_object(payload, gathered, dst=0)
        except Exception as exc:
            print(f"rank {rank}: could not gather the ranks' results ({type(exc).__name__}); "
                  "another rank failed or hung", file=sys.stderr)
            write_verdict(EXIT_ERROR)
            time.sleep(1.0)
            return EXIT_ERROR
        if rank == 0:
            failed = [p[1] for p in gathered if p[0] == "error"]
            if failed:
                report = failed_report(world_size, args.epochs, failed[0], options=options)
            else:
                report = build_report([p[1] for p in gathered], options=options)
            status = emit(report, args)
        verdict = [status if rank == 0 else None]
        dist.broadcast_object_list(verdict, src=0)
        deadline.done = True
        exit_together(int(verdict[0]), shared.store, rank, world_size)
    finally:
        deadline.done = True
        try:
            dist.destroy_process_group()
        except Exception:
            pass


class _Shared:
    """This rank's view of the store: publish progress, raise and read the failed flag."""

    def __init__(self, rank: int):
        self.rank, self.store = rank, None
        self.last = "starting"

    def publish(self, text: str) -> None:
        self.last = text
        if self.store is not None:
            self.store.set(f"{KEY}progress/{self.rank}", text)

    def fail(self) -> None:
        if self.store is not None:
            self.store.set(f"{KEY}failed", str(self.rank))

    def another_failed(self) -> bool:
        return self.store is not None and self.store.check([f"{KEY}failed"])

    def progress_of(self, world_size: int) -> dict[int, str]:
        out = {}
        for r in range(world_size):
            if r == self.rank:
                out[r] = self.last
                continue
            key = f"{KEY}progress/{r}"
            try:
                found = self.store is not None and self.store.check([key])
                out[r] = self.store.get(key).decode() if found else "no progress reported"
            except Exception:
                out[r] = "unknown (the store did not answer)"
        return out


class _Deadline:
    """At the deadline: rank 0 prints the report with every rank's progress, the others
    wait for it, say one line, stop their workers and exit 3."""

    def __init__(self, rank, world_size, args, options, progress, shared: _Shared):
        self.rank, self.world_size, self.args = rank, world_size, args
        self.options, self.progress, self.shared = options, progress, shared
        self.done = self.waiting = False

    def start(self) -> None:
        threading.Thread(target=self._watch, name="audit-deadline", daemon=True).start()

    def _watch(self) -> None:
        started = time.monotonic()
        while True:
            time.sleep(0.2)
            if self.done:
                return
            if time.monotonic() - started >= self.args.timeout:
                break
        seconds = self.args.timeout
        self.shared.last = self.progress.text()
        try:
            if self.rank == 0:
                self._report(seconds)
            else:
                self._wait_for_rank_0()
                print(f"rank {self.rank}: the audit did not finish within {seconds:g} s "
                      f"({self.progress.text()})", file=sys.stderr, flush=True)
        finally:
            _stop_workers_and_exit(EXIT_ERROR)

    def _report(self, seconds: float) -> None:
        from talk_helpers.audit.core import failed_report

        progress = self.shared.progress_of(self.world_size)
        stuck = [r for r, text in progress.items() if "gathering" not in text] or [0]
        failure = Failure(kind="hung", rank=stuck[0], progress=progress, hint=DEADLINE_HINT,
                          message=f"the audit did not finish within {seconds:g} s",
                          error=f"the audit did not finish within {seconds:g} s")
        report = failed_report(self.world_size, self.args.epochs, failure,
                               options=self.options)
        emit(report, self.args)
        if self.shared.store is not None:
            try:
                self.shared.store.set(f"{KEY}printed", "1")
            except Exception:
                pass

    def _wait_for_rank_0(self) -> None:
        end = time.monotonic() + WAITING_GRACE_S
        while time.monotonic() < end:
            try:
                if self.shared.store is not None and self.shared.store.check([f"{KEY}printed"]):
                    return
            except Exception:
                return
            time.sleep(0.1)


def exit_together(status: int, store, rank: int, world_size: int) -> None:
    """Exit with ``status`` once every rank knows it (never returns). From here on a
    SIGTERM (torchrun stopping the ranks after the first exit) exits with ``status`` too."""
    write_verdict(status)
    signal.signal(signal.SIGTERM, lambda *_: _exit_now(status))
    try:
        store.set(f"{KEY}exiting/{rank}", str(status))
        store.wait([f"{KEY}exiting/{r}" for r in range(world_size)],
                   timedelta(seconds=EXIT_WAIT_S))
    except Exception:  # a rank that died after the verdict: exit with it all the same
        pass
    _exit_now(status)


def write_verdict(status: int) -> None:
    """Tell the command's launcher (:mod:`talk_helpers.audit.launch`) this rank's status."""
    folder = os.environ.get(VERDICTS_ENV)
    if not folder:
        return
    rank = os.environ.get("RANK", "0")
    path = os.path.join(folder, f"rank-{rank}")
    try:
        with open(f"{path}.{os.getpid()}.tmp", "w") as out:
            out.write(str(status))
        os.replace(f"{path}.{os.getpid()}.tmp", path)
    except OSError:
        pass


def read_verdicts(folder: str) -> dict[int, int]:
    """The statuses ranks wrote into ``folder``, by global rank."""
    found = {}
    for name in os.listdir(folder):
        if name.startswith("rank-") and name[5:].isdigit():
            try:
                with open(os.path.join(folder, name)) as f:
                    found[int(name[5:])] = int(f.read().strip())
            except (OSError, ValueError):
                pass
    return found


def _exit_now(status: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(status)


def _stop_workers_and_exit(status: int) -> None:
    write_verdict(status)
    try:
        import psutil

        from talk_helpers.runtime.processes import kill_tree

        kill_tree([psutil.Process()], include_roots=False)
    finally:
        os._exit(status)
