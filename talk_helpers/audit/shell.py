"""What the command line shares with its launcher and its ranks: its name, usage errors,
the flags as :func:`talk_helpers.audit.audit` arguments, and printing a report."""

from __future__ import annotations

import json
import os
import sys

__all__ = ["LAUNCH_FLAGS", "PROG", "SCRIPT", "UsageError", "emit", "expected_of", "prog",
           "read_ids_file", "report_options"]

PROG = "python -m talk_helpers.audit"
SCRIPT = "talk-helpers-audit"   # the console script pip installs (pyproject.toml)
LAUNCH_FLAGS = ("nproc_per_node", "nnodes", "node_rank", "master_addr", "master_port")


class UsageError(Exception):
    """A bad target or argument: exit status 2 with a one-line message."""


def prog() -> str:
    """How the user called the command: the console script or ``python -m``."""
    return SCRIPT if os.path.basename(sys.argv[0] or "") == SCRIPT else PROG


def report_options(args) -> dict:
    """The audit's keyword arguments from the flags."""
    return dict(expected=expected_of(args), batch_size=args.batch_size, shuffle=args.shuffle,
                dropped_by_design=args.dropped_by_design,
                repeated_by_design=args.repeated_by_design, ids=args.ids,
                by_content=args.by_content, steps=args.steps, reuse_loader=args.reuse_loader,
                epoch_call=args.epoch_call, with_replacement=args.with_replacement,
                mixing=args.mixing)


def expected_of(args):
    """What ``--expected N``, ``--id-range A:B`` or ``--ids-file PATH`` declare."""
    if getattr(args, "id_range", None) is not None:
        low, high = args.id_range
        return range(low, high)
    if getattr(args, "ids_file", None) is not None:
        return read_ids_file(args.ids_file)
    return args.expected


def read_ids_file(path: str) -> list:
    """The ids in ``path``, one per line (blank lines skipped): all integers, or strings."""
    try:
        with open(path, encoding="utf-8") as f:
            values = [line.strip() for line in f if line.strip()]
    except OSError as exc:
        raise UsageError(f"argument --ids-file: cannot read {path!r} ({exc.strerror})") \
            from None
    if not values:
        raise UsageError(f"argument --ids-file: {path!r} holds no ids (one per line)")
    if all(v.lstrip("-").isdigit() for v in values):
        ids = [int(v) for v in values]
        if min(ids) < 0:
            raise UsageError(f"argument --ids-file: ids count from 0, got {min(ids)}")
        return ids
    return values


def emit(report, args, stream=None) -> int:
    """Print the report (text or JSON) and return its exit status."""
    stream = stream or sys.stdout
    status = report.exit_status
    if args.json:
        doc = {"target": args.target, **report.to_dict()}
        print(json.dumps(doc, ensure_ascii=False), file=stream)
    else:
        print(repr(report), file=stream)
    stream.flush()
    if report.failure is not None and not args.json:
        print(f"{prog()}: exit status {status}: {report.failure.summary()}", file=sys.stderr,
              flush=True)
    return status
