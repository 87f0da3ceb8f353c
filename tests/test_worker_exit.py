"""A finished spawned DataLoader worker skips Python's teardown; nothing else changes."""

import os
import subprocess
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from talk_helpers.lessons.datasets.basics import MapStyleIds, WorkerStreams
from talk_helpers.runtime import worker_exit
from talk_helpers.runtime.start_cost import time_limit_s

_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


def _exit_in_child(worker_info_set: bool) -> subprocess.CompletedProcess:
    """A fresh interpreter that registers the hook, prints without flushing and exits
    with code 3, as if it were (or were not) a DataLoader worker whose loop has run."""
    code = (
        "import torch.utils.data._utils.worker as w\n"
        "from talk_helpers.runtime import worker_exit\n"
        "worker_exit.register()\n"
        f"w._worker_info = object() if {worker_info_set} else None\n"
        "print('printed before exit', end='')\n"
        "raise SystemExit(3)\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_ENV, timeout=time_limit_s(60, interpreters=4))


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
    for dataset, copies in ((WorkerStreams([range(8)] * 2), 2), (MapStyleIds(8), 1)):
        iterator = iter(DataLoader(dataset, batch_size=2, num_workers=2,
                                   multiprocessing_context="spawn"))
        ids = sorted(torch.cat(list(iterator)).tolist())
        assert ids == sorted(list(range(8)) * copies)
        assert [w.exitcode for w in iterator._workers] == [0, 0]



def test_workers_spawned_by_a_main_without_a_file_start_from_spawned_child():
    # A notebook kernel's main module has neither a file nor a spec, as `python -c` has.
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from torch.utils.data import DataLoader\n"
        "from world_functions import worker_main_module\n"
        "from talk_helpers.runtime.rank_entry import name_spawned_child_main\n"
        "name_spawned_child_main()\n"
        "loader = DataLoader([0, 1], batch_size=2, num_workers=1, collate_fn=worker_main_module,\n"
        "                    multiprocessing_context='spawn')\n"
        "iterator = iter(loader)\n"
        "print(next(iterator))\n"
        "iterator._shutdown_workers()\n"
        "print(iterator._workers[0].exitcode)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_ENV, timeout=time_limit_s(60, interpreters=4))
    assert done.stdout.split() == ["talk_helpers.runtime.spawned_child", "0"], done.stderr
