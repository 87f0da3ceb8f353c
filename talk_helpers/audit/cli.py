"""``python -m talk_helpers.audit module:factory`` (or ``talk-helpers-audit``): audit your
own loader before a long run.

``factory(rank, world_size, epoch)`` returns what your training loop iterates, the same
contract as :func:`talk_helpers.audit.audit`. ``module:factory`` is imported from the
current directory or ``PYTHONPATH``, as ``torchrun -m`` users expect.

* On one machine the command starts its own world of ``--world-size`` ranks
  (:func:`talk_helpers.runtime.world.run_world`, gloo on loopback).
* With ``--nproc-per-node N`` it launches the ranks through torch's own launcher (what
  ``torchrun`` runs), on one machine or several, and keeps its exit status and its
  one-line summary instead of torchrun's failure listing.
* Under ``torchrun`` (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` set) it joins the world
  torchrun made (:mod:`talk_helpers.audit.torchrun`).

Exit status: 0 every check passed (⚠ allowed), 1 a check failed, 2 usage (a bad argument
or target, or batches whose sample ids the audit cannot tell), 3 the loader raised, died
or hung. ``--json`` prints one JSON document (schema ``talk_helpers.audit/2``) in every
case, the usage errors included.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

from talk_helpers.audit.failure import EXIT_ERROR, EXIT_USAGE
from talk_helpers.audit.shell import (
    LAUNCH_FLAGS,
    UsageError,
    emit,
    prog,
    report_options,
)

START_METHODS = ("fork", "forkserver", "spawn")
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
SCHEMA = "talk_helpers.audit/2"

DESCRIPTION = """\
Audit your own loader before a long run: run it in every rank of a real world and check
that each sample is read once per epoch, ranks take equal batches, workers all read, and
the order changes. TARGET is module:factory; factory(rank, world_size, epoch) returns what
your training loop iterates (a DataLoader, an iterable, a list of batches).

which sample is which (the audit never guesses):
  by default    a 1-D integer batch is the ids; a dict batch is read at its "id" key
  --ids PATH    the ids are at PATH: a dict key, a tuple position or a dotted path
                (idx, 0, meta.id, __key__), integers or strings, one per sample
  --by-content  each sample is known by a hash of its content along the batch
                dimension (tensors, arrays, numbers, strings, bytes, nested);
                --expected N then means N distinct samples per epoch
  Any other batch exits 2 and shows its structure (keys, types, shapes).

  dict batches, ids in a column:
    {"idx": tensor([4, 9]), "input_ids": tensor[2, 128], "meta": {"url": [...]}}
    %(prog)s my_project.data:make_loader --ids idx
  batches without ids, (images, labels):
    (tensor[32, 3, 224, 224] uint8, tensor[32] int64)
    %(prog)s my_project.data:make_loader --by-content --expected 50000

which samples to expect (default: whatever epoch 0 read):
  --expected N      ids 0..N-1
    %(prog)s my_project.data:make_loader --expected 1000
  --id-range A:B    ids A..B-1
    %(prog)s my_project.data:make_loader --id-range 10000:11000
  --ids-file PATH   the ids listed, one per line, integers or strings
    %(prog)s my_project.data:make_loader --ids __key__ --ids-file keys.txt
  Missing, unexpected and duplicated ids are named, with the usual cause when the
  pattern shows one (ids offset by a constant, sources numbered from 0 alike, …).

what the loader promises:
  --with-replacement  drawn with replacement: judged for coverage and balance
    %(prog)s my_project.data:make_weighted_loader --with-replacement --expected 1000
  --mixing chunk:N    a shuffle of chunks of N consecutive ids, judged at that level
    %(prog)s my_project.data:make_litdata_loader --mixing chunk:8 --shuffle --reuse-loader
  --dropped-by-design auto   litdata's own drop under DDP, worked out from the library
    %(prog)s my_project.data:make_litdata_loader --dropped-by-design auto --reuse-loader
  String ids are judged for mixing in their sorted order (or the order of --ids-file).
"""

EPILOG = """\
epochs: by default factory(rank, world_size, epoch) is called for every epoch. With
--reuse-loader it is called once and the same loader is iterated every epoch, calling
before each only what --epoch-call names (e.g. sampler.set_epoch), as your loop does.
Endless loaders need --steps N (batches per rank and epoch).

reports: every line starts with its finding (✔ every sample once, ✘ 25 duplicated ·
25 missing, ✘ order repeats across epochs, ✘ poorly mixed), the statistics behind it on
the lines below; a "cause" line names the usual cause of a finding and how the audit
knows.

exit status:
  0  every check passed (⚠ warnings allowed)
  1  a check failed
  2  usage: a bad argument or target, --expected too large to hold, a factory that
     returns no loader, or batches whose sample ids cannot be told
  3  the loader raised, died or hung (the report names the rank and file:line)
  With --nproc-per-node the status is the verdict on every run: no rank exits before
  every rank knows it, and a rank that really dies is 3 and named.

--json prints one document, schema talk_helpers.audit/2: status (pass, warn, fail,
usage, error), exit_status, headline, problems [{mark, text}], error (null or {kind:
usage|ids|raised|died|hung, message, rank, where, progress, hint}), causes [{mark,
finding, cause, evidence, fix}], world_size, n_epochs, steps, ids, expected,
with_replacement, mixing_level, epochs [{exactly_once {duplicated_count, missing_count,
duplicated, missing, ...}, batches_per_rank, samples_per_rank, samples_per_worker, ...}],
order {finding, repeats, changes_per_rank}, shuffle, checks, target. See docs/audit.md for
every field.

several processes: --nproc-per-node N launches N ranks per machine the way torchrun does
(add --nnodes, --node-rank, --master-addr, --master-port on several machines) and keeps
this command's exit status. Under torchrun itself (torchrun --nproc-per-node N -m
talk_helpers.audit TARGET ...) rank 0 prints the report and every rank exits with the
same status, but torchrun exits 1 for any failure and adds its own failure listing.
"""


def _id_range(text: str) -> tuple[int, int]:
    low, sep, high = text.partition(":")
    if not sep or not low.strip().isdigit() or not high.strip().isdigit() \
            or int(low) >= int(high):
        raise argparse.ArgumentTypeError(f"must be A:B with 0 ≤ A < B (ids A..B-1), got "
                                         f"{text!r}")
    return int(low), int(high)


def _count_or_auto(text: str):
    if text == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a count N ≥ 0 or auto, got {text!r}") \
            from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a count N ≥ 0 or auto, got {text!r}")
    return value


def _mixing_level(text: str) -> str:
    if text == "sample" or (text.startswith("chunk:") and text[6:].isdigit()
                            and int(text[6:]) >= 1):
        return text
    raise argparse.ArgumentTypeError(f"must be sample or chunk:N (N ≥ 1 ids per chunk), got "
                                     f"{text!r}")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage block
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=prog(), description=DESCRIPTION, epilog=EPILOG,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", help="module:factory; factory(rank, world_size, epoch) "
                                       "returns what the training loop iterates")
    ids = parser.add_argument_group("which sample is which")
    pick = ids.add_mutually_exclusive_group()
    pick.add_argument("--ids", metavar="PATH", default=None,
                      help="where each batch holds its sample ids: idx, 0, meta.id, __key__")
    pick.add_argument("--by-content", action="store_true",
                      help="know each sample by a hash of its content")
    what = parser.add_argument_group("what to expect")
    declared = what.add_mutually_exclusive_group()
    declared.add_argument("--expected", type=int, default=None, metavar="N",
                          help="ids 0..N-1 (with --by-content or string ids: N distinct "
                               "samples) once per epoch (default: the ids of epoch 0)")
    declared.add_argument("--id-range", type=_id_range, default=None, metavar="A:B",
                          help="ids A..B-1 once per epoch, e.g. 10000:10240")
    declared.add_argument("--ids-file", default=None, metavar="PATH",
                          help="the ids once per epoch, one per line: integers, or strings "
                               "such as __key__s (their order there is taken as storage "
                               "order)")
    what.add_argument("--batch-size", type=int, default=None,
                      help="also check that every batch holds this many samples")
    what.add_argument("--dropped-by-design", type=_count_or_auto, default=None,
                      metavar="N|auto",
                      help="samples per epoch your loader drops on purpose (drop_last); "
                           "auto: what litdata's own rule drops under DDP")
    what.add_argument("--repeated-by-design", type=_count_or_auto, default=None,
                      metavar="N|auto",
                      help="extra reads per epoch your loader makes on purpose (padding); "
                           "auto: what mosaicml-streaming pads")
    what.add_argument("--with-replacement", action="store_true",
                      help="the loader draws with replacement (WeightedRandomSampler, "
                           "resampled shards): judge coverage and balance, not exactly once")
    what.add_argument("--mixing", type=_mixing_level, default="sample", metavar="LEVEL",
                      help="the level the shuffle promises: sample (default), or chunk:N for "
                           "a loader that shuffles chunks of N consecutive ids (litdata, "
                           "mosaicml-streaming)")
    shuffle = what.add_mutually_exclusive_group()
    shuffle.add_argument("--shuffle", dest="shuffle", action="store_const", const=True,
                         default=None, help="the loader is meant to shuffle: judge the order")
    shuffle.add_argument("--no-shuffle", dest="shuffle", action="store_const", const=False,
                         help="the loader is not meant to shuffle: do not judge the order")
    run = parser.add_argument_group("how to run it")
    run.add_argument("--epochs", type=int, default=2, help="epochs to audit (default 2)")
    run.add_argument("--steps", type=int, default=None, metavar="N",
                     help="at most N batches per rank and epoch (long or endless loaders)")
    run.add_argument("--reuse-loader", action="store_true",
                     help="build each rank's loader once and iterate it every epoch")
    run.add_argument("--epoch-call", metavar="ATTR", default=None,
                     help="with --reuse-loader, call loader.ATTR(epoch) before each epoch, "
                          "e.g. sampler.set_epoch")
    run.add_argument("--world-size", type=int, default=None,
                     help="ranks to start on this machine (default 2)")
    run.add_argument("--start-method", choices=START_METHODS, default=None,
                     help="how the ranks are started (not under torchrun)")
    run.add_argument("--timeout", type=float, default=120.0,
                     help="deadline in seconds for the whole audit (default 120)")
    run.add_argument("--backend", default="gloo",
                     help="process group backend under torchrun (default gloo)")
    run.add_argument("--json", action="store_true", help="print one JSON document")
    launch = parser.add_argument_group("launching ranks like torchrun")
    launch.add_argument("--nproc-per-node", type=int, default=None, metavar="N",
                        help="launch N ranks on this machine through torch's launcher")
    launch.add_argument("--nnodes", type=int, default=None)
    launch.add_argument("--node-rank", type=int, default=None)
    launch.add_argument("--master-addr", default=None)
    launch.add_argument("--master-port", type=int, default=None)
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    for name in ("world_size", "epochs", "batch_size", "steps", "nproc_per_node", "nnodes"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"argument --{name.replace('_', '-')}: must be ≥ 1, got {value}")
    for name in ("expected", "node_rank"):
        value = getattr(args, name)
        if value is not None and value < 0:
            raise UsageError(f"argument --{name.replace('_', '-')}: must be ≥ 0, got {value}")
    if not args.timeout > 0:
        raise UsageError(f"argument --timeout: must be > 0 seconds, got {args.timeout:g}")
    if args.epoch_call is not None and not args.reuse_loader:
        raise UsageError("argument --epoch-call: needs --reuse-loader (a loader built every "
                         "epoch gets its epoch from factory(rank, world_size, epoch))")
    launching = [f"--{n.replace('_', '-')}" for n in LAUNCH_FLAGS if getattr(args, n) is not None]
    if launching and args.nproc_per_node is None:
        raise UsageError(f"argument {launching[0]}: needs --nproc-per-node")
    if args.nproc_per_node is not None and args.world_size is not None:
        raise UsageError("argument --world-size: not with --nproc-per-node (the world is "
                         "nproc-per-node × nnodes ranks)")
    if args.expected is not None and not args.by_content:
        from talk_helpers.audit.core import expected_fits  # imports torch: after --help

        try:
            expected_fits(args.expected)
        except ValueError as exc:
            raise UsageError(f"argument --expected: {exc}") from None
    if args.ids_file is not None:
        from talk_helpers.audit.shell import read_ids_file

        read_ids_file(args.ids_file)   # a usage error now, not in every rank
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


def is_rank_zero() -> bool:
    return os.environ.get("RANK", "0") == "0"


def main(argv=None) -> int:
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="replace")
    argv = sys.argv[1:] if argv is None else list(argv)
    wants_json = "--json" in argv
    try:
        args = parse_args(argv)
        if args.nproc_per_node is not None:
            from talk_helpers.audit.launch import launch

            return launch(args, argv)
        factory = load_target(args.target)
        if under_torchrun():
            from talk_helpers.audit.torchrun import main_torchrun

            return main_torchrun(args, factory)
        return _main_local(args, factory)
    except UsageError as exc:
        return usage_error(str(exc), wants_json, target=_target_of(argv))


def run() -> None:
    """The ``talk-helpers-audit`` console script: :func:`main`, then exit with its status."""
    import gc

    status = main()
    gc.freeze()  # Python's last collection at exit would walk all of torch's objects
    sys.exit(status)


def usage_error(message: str, wants_json: bool, target: str | None = None) -> int:
    """Exit status 2: one line on stderr and, with --json, one document on stdout. Under
    torchrun rank 0 says it, and the other ranks wait for torchrun to stop them after
    rank 0's exit, so that rank 0 is never stopped before it has said it."""
    if under_torchrun():
        from talk_helpers.audit.torchrun import write_verdict

        write_verdict(EXIT_USAGE)
        if not is_rank_zero():
            _wait_for_rank_0_to_exit(EXIT_USAGE)
            return EXIT_USAGE
    if is_rank_zero() or not under_torchrun():
        first, *rest = message.splitlines() or [""]
        print(f"{prog()}: error: {first}", file=sys.stderr)
        for line in rest:
            print(line, file=sys.stderr)
        if wants_json:
            doc = {"schema": SCHEMA, "target": target, "status": "usage",
                   "exit_status": EXIT_USAGE, "ok": False,
                   "headline": f"✘ usage: {first}",
                   "error": {"kind": "usage", "message": message, "rank": None,
                             "where": None, "progress": None, "hint": None}}
            print(json.dumps(doc, ensure_ascii=False), flush=True)
    return EXIT_USAGE


USAGE_WAIT_S = 60.0   # how long a rank other than 0 waits for torchrun to stop it


def _wait_for_rank_0_to_exit(status: int) -> None:
    """Sleep until torchrun stops this rank (SIGTERM, after rank 0 exited), then exit with
    ``status``; give up after :data:`USAGE_WAIT_S`."""
    import signal
    import time

    def stopped(*_):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)

    signal.signal(signal.SIGTERM, stopped)
    time.sleep(USAGE_WAIT_S)


def _target_of(argv: list[str]) -> str | None:
    found = [a for a in argv if ":" in a and not a.startswith("-")]
    return found[0] if found else None


def _main_local(args, factory: ImportedFactory) -> int:
    from talk_helpers.audit.core import audit

    try:
        # One call: ranks kept warm for a next call would only cost their shutdown at exit.
        report = audit(factory, world_size=args.world_size or 2, epochs=args.epochs,
                       timeout_s=args.timeout, start_method=args.start_method, warm_world=False,
                       **report_options(args))
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    return emit(report, args)


__all__ = ["EXIT_ERROR", "ImportedFactory", "UsageError", "build_parser", "emit",
           "load_target", "main", "parse_args", "prog", "report_options", "run", "under_torchrun",
           "usage_error"]
