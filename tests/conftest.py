"""Marks that sort the suite into `make check` (quick), `make unit` and `make soak`.

A test that starts a process group carries ``distributed``, one that starts new
interpreters (a subprocess, torchrun, a notebook's kernel) ``subprocesses``, one that
repeats a run many times ``soak``. Marks given here by module or test name keep the test
files as they are; a new slow test is marked where it is written, or added here.
"""

MODULE_MARKS = {
    "distributed": (),
    "subprocesses": (),
}

TEST_MARKS = {
    "soak": (
        # 2 x AUDIT_EXIT_REPEATS runs of the command and of torchrun, half beside busy loops
        "test_the_exit_status_is_the_verdict_run_after_run",
        # 30 four-rank calls in a warm world
        "test_a_rank_whose_fn_returns_at_once_never_cuts_off_a_peer_still_joining",
    ),
    "distributed": (),
    "subprocesses": (),
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rpartition(".")[2] if item.module else ""
        for mark, modules in MODULE_MARKS.items():
            if module in modules:
                item.add_marker(mark)
        for mark, names in TEST_MARKS.items():
            if item.originalname in names:
                item.add_marker(mark)
