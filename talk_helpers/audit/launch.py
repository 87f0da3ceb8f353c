"""``--nproc-per-node N``: the command launches its ranks itself, through the launcher
``torchrun`` runs (``torch.distributed.run``), so that its exit status and one-line summary
are what a CI sees, not torchrun's ``ChildFailedError`` listing.

The ranks run ``python -m talk_helpers.audit TARGET …`` with torchrun's environment
(:mod:`talk_helpers.audit.torchrun`); rank 0 prints the report; every rank exits with
the audit's status, which this process returns. Each rank also writes the status it
chose into a private folder (:func:`talk_helpers.audit.torchrun.write_verdict`): torchrun
stops every other rank with SIGTERM as soon as one exits non-zero, and a rank stopped
after another's verdict is not a rank that died. A rank that died (a signal, an exit the
audit did not choose, and no status written) counts as exit status 3 and is named.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import tempfile

from talk_helpers.audit.failure import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, EXIT_USAGE
from talk_helpers.audit.shell import LAUNCH_FLAGS, prog
from talk_helpers.audit.torchrun import VERDICTS_ENV, read_verdicts

__all__ = ["exit_status", "launch", "torchrun_argv"]

_MEANING = {EXIT_PASS: "every check passed", EXIT_FAIL: "a check failed",
            EXIT_USAGE: "usage error", EXIT_ERROR: "the loader raised, died or hung"}


def torchrun_argv(args, argv: list[str]) -> list[str]:
    """torchrun's arguments for this command: the launch flags, then ``-m
    talk_helpers.audit`` with every other flag as given."""
    launch = []
    for name in LAUNCH_FLAGS:
        value = getattr(args, name)
        if value is not None:
            launch += [f"--{name.replace('_', '-')}", str(value)]
    if (args.nnodes or 1) == 1 and all(getattr(args, name) is None for name in
                                       ("node_rank", "master_addr", "master_port")):
        # one machine and no address given: a free port, not torchrun's fixed 29500 that
        # a second audit (or anything else) may hold (torch/distributed/run.py, --standalone)
        launch.append("--standalone")
    rest, skip = [], False
    flags = {f"--{name.replace('_', '-')}" for name in LAUNCH_FLAGS}
    for item in argv:
        if skip:
            skip = False
            continue
        head = item.split("=", 1)[0]
        if head in flags:
            skip = "=" not in item
            continue
        rest.append(item)
    return [*launch, "-m", "talk_helpers.audit", *rest]


def launch(args, argv: list[str]) -> int:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    _quiet_launcher()
    # torchrun sets OMP_NUM_THREADS=1 for its ranks (and says so); so does this command
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torchrun_args = get_args_parser().parse_args(torchrun_argv(args, argv))
    folder = tempfile.mkdtemp(prefix="talk-audit-verdicts-")
    previous = os.environ.get(VERDICTS_ENV)
    os.environ[VERDICTS_ENV] = folder
    try:
        run(torchrun_args)
        codes = {}
    except ChildFailedError as exc:
        codes = {int(r): f.exitcode for r, f in exc.failures.items()}
    finally:
        if previous is None:
            os.environ.pop(VERDICTS_ENV, None)
        else:
            os.environ[VERDICTS_ENV] = previous
        said = read_verdicts(folder)
        shutil.rmtree(folder, ignore_errors=True)
    status, died = exit_status(codes, said)
    if died:
        listed = ", ".join(f"rank {r} ({_how(c)})" for r, c in sorted(died.items()))
        print(f"{prog()}: exit status {status} ({_MEANING[status]}): {listed}",
              file=sys.stderr, flush=True)
    return status


def exit_status(codes: dict[int, int], said: dict[int, int]) -> tuple[int, dict[int, int]]:
    """(the command's exit status, the ranks that died) from the exit ``codes`` torchrun
    reports for its failed ranks and the statuses the ranks ``said`` they chose.

    Rank 0 judges, so its word is the verdict; a rank that said nothing and was stopped
    with SIGTERM after another rank had said its status was stopped by torchrun, not dead.
    """
    chosen = (EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_ERROR)
    died = {r: c for r, c in codes.items()
            if r not in said and c not in chosen[1:]
            and not (c == -signal.SIGTERM and said)}
    if died:
        return EXIT_ERROR, died
    if 0 in said:
        return said[0], {}
    statuses = [*said.values(), *(c for c in codes.values() if c in chosen)]
    return (max(statuses) if statuses else EXIT_PASS), {}


def _how(code: int) -> str:
    if code < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with {code}"


def _quiet_launcher() -> None:
    """Silence the launcher's own logging: the ranks and this command say what matters."""
    for name in list(logging.root.manager.loggerDict):
        if name.startswith(("torch.distributed.elastic", "torch.distributed.run",
                            "torch.distributed.launcher")):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    for name in ("torch.distributed.elastic", "torch.distributed.run",
                 "torch.distributed.launcher"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
