"""``--nproc-per-node N``: the command launches its ranks itself, through the launcher
``torchrun`` runs (``torch.distributed.run``), so that its exit status and one-line summary
are what a CI sees, not torchrun's ``ChildFailedError`` listing.

The ranks run ``python -m talk_helpers.audit TARGET …`` with torchrun's environment
(:mod:`talk_helpers.audit.torchrun`); rank 0 prints the report; every rank exits with
the audit's status, which this process returns. A rank that died (a signal, an exit the
audit did not choose) counts as exit status 3.
"""

from __future__ import annotations

import logging
import os
import sys

from talk_helpers.audit.failure import EXIT_ERROR, EXIT_FAIL, EXIT_PASS, EXIT_USAGE
from talk_helpers.audit.shell import LAUNCH_FLAGS, prog

__all__ = ["launch", "torchrun_argv"]

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
    try:
        run(torchrun_args)
        status = EXIT_PASS
    except ChildFailedError as exc:
        codes = {int(r): f.exitcode for r, f in exc.failures.items()}
        chosen = [c for c in codes.values() if c in (EXIT_FAIL, EXIT_USAGE, EXIT_ERROR)]
        status = max(chosen) if chosen and len(chosen) == len(codes) else EXIT_ERROR
        died = {r: c for r, c in codes.items() if c not in (EXIT_FAIL, EXIT_USAGE, EXIT_ERROR)}
        if died:
            listed = ", ".join(f"rank {r} ({_how(c)})" for r, c in sorted(died.items()))
            print(f"{prog()}: exit status {status} ({_MEANING[status]}): {listed}",
                  file=sys.stderr, flush=True)
    return status


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
