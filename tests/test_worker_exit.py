"""A finished spawned DataLoader worker skips Python's teardown; nothing else changes."""

import os
import subprocess
import sys

import torch
from torch.utils.data import DataLoader

from talk_helpers import worker_exit
from talk_helpers.toy.basics import IterableIds, MapStyleIds

_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


def _exit_in_child(worker_info_set: bool) -> subprocess.CompletedProcess:
    """A fresh interpreter that imports talk_helpers, prints without flushing and exits
    with code 3, as if it were (or were not) a DataLoader worker whose loop has run."""
    code = (
        "import torch.utils.data._utils.worker as w\n"
        "import talk_helpers\n"
        f"w._worker_info = object() if {worker_info_set} else None\n"
        "print('printed before exit', end='')\n"
        "raise SystemExit(3)\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_ENV, timeout=120)


def test_a_finished_worker_ends_with_0_and_keeps_what_it_printed():
    done = _exit_in_child(worker_info_set=True)
    assert (done.returncode, done.stdout) == (0, "printed before exit")


def test_any_other_process_keeps_its_own_exit_code():
    done = _exit_in_child(worker_info_set=False)
    assert (done.returncode, done.stdout) == (3, "printed before exit")


def test_the_hook_does_nothing_in_the_main_process():
    assert torch.utils.data.get_worker_info() is None
    assert worker_exit.end_finished_worker() is None


def test_spawned_workers_deliver_every_batch_and_exit_with_0():
    # An iterable dataset gives every worker all 8 ids; a map-style one splits them.
    for dataset, copies in ((IterableIds(8), 2), (MapStyleIds(8), 1)):
        iterator = iter(DataLoader(dataset, batch_size=2, num_workers=2,
                                   multiprocessing_context="spawn"))
        ids = sorted(torch.cat(list(iterator)).tolist())
        assert ids == sorted(list(range(8)) * copies)
        assert [w.exitcode for w in iterator._workers] == [0, 0]
