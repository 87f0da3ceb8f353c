"""The talk's set-up (talk_helpers.notebook.talk): which start method the talk takes on
each platform, and cells that only define things reaching spawned workers without a magic
line on the slide."""

import subprocess
import sys
import textwrap

import pytest

from talk_helpers.notebook import talk


@pytest.mark.parametrize("source", [
    "class A:\n    pass",
    "import random\n\n\ndef f(worker_id):\n    random.seed(0)",
    "from torch.utils.data import IterableDataset\n\nSIZES = [5, 3]\n\n\n"
    "class Files(IterableDataset):\n    '''Whole files.'''",
    "x: int = 3\n\n\ndef g():\n    return x",
])
def test_a_cell_of_imports_classes_functions_and_constants_is_a_definition_cell(source):
    assert talk.definitions_only(source)


@pytest.mark.parametrize("source", [
    "import torch",                                   # nothing defined
    "SIZES = [5, 3]",                                 # a constant alone
    "def f():\n    pass\n\nf()",                      # runs something
    "loader = make()\n\n\ndef f():\n    pass",        # a value computed at import
    "def f():\n    pass\n\nprint('hello')",
    "%%time\ndef f():\n    pass",                     # not Python
    "",
])
def test_a_cell_that_runs_code_or_defines_nothing_stays_an_ordinary_cell(source):
    assert not talk.definitions_only(source)


def test_a_definition_cell_is_run_as_an_importable_cell_and_others_as_they_are():
    definition = ["class A:\n", "    pass\n"]
    assert talk._as_importable(definition) == ["%%importable\n", *definition]
    ordinary = ["print(1)\n"]
    assert talk._as_importable(ordinary) == ordinary
    magic = ["%%importable\n", *definition]
    assert talk._as_importable(magic) == magic


@pytest.mark.parametrize(("platform", "taken"), [
    ("fork", "fork"), ("forkserver", "forkserver"), ("spawn", "forkserver")])
def test_the_talk_takes_forkserver_where_the_platform_gives_spawn(monkeypatch, platform, taken):
    monkeypatch.delenv(talk.NO_FORKSERVER_ENV, raising=False)
    assert talk.talk_start_method(platform) == taken


def test_a_platform_without_forkserver_keeps_spawn(monkeypatch):
    monkeypatch.setenv(talk.NO_FORKSERVER_ENV, "1")
    assert talk.talk_start_method("spawn") == "spawn"


def test_the_platform_method_is_read_from_talk_start_method(monkeypatch):
    monkeypatch.delenv(talk.NO_FORKSERVER_ENV, raising=False)
    monkeypatch.setenv("TALK_START_METHOD", "spawn")
    assert talk.talk_start_method() == "forkserver"


def test_the_ready_line_is_the_same_whatever_the_start_method():
    ready = [talk.TalkReady(m, p, 2, s) for m, p, s in
             (("fork", "fork", 1.0), ("forkserver", "spawn", 9.5))]
    assert repr(ready[0]) == repr(ready[1]) == (
        "✔ ready: DataLoader workers and a world of 2 ranks, started")


def test_a_dataset_defined_in_a_plain_cell_reaches_spawned_workers():
    """In IPython, with the talk's definition cells on: a cell holding only a class (no
    magic line) is importable by a worker that is a new interpreter."""
    code = textwrap.dedent("""
        from IPython.core.interactiveshell import InteractiveShell
        from talk_helpers.notebook import cells
        from talk_helpers.notebook.talk import _enable_definition_cells

        shell = InteractiveShell.instance()
        cells.enable()
        _enable_definition_cells()
        shell.run_cell(
            "from torch.utils.data import IterableDataset, get_worker_info\\n\\n\\n"
            "class Ids(IterableDataset):\\n"
            "    def __iter__(self):\\n"
            "        worker = get_worker_info()\\n"
            "        yield from range(worker.id, 6, worker.num_workers)\\n")
        result = shell.run_cell(
            "from torch.utils.data import DataLoader\\n"
            "sorted(int(i) for i in DataLoader(Ids(), num_workers=2,\\n"
            "                                 multiprocessing_context='spawn'))")
        print(shell.user_ns["Ids"].__module__.startswith("cell_"), result.result)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "True [0, 1, 2, 3, 4, 5]", out.stderr[-2000:]


def test_start_talk_sets_the_kernel_up_as_every_notebook_does_first(monkeypatch):
    import talk_helpers.notebook

    calls = []
    monkeypatch.setattr(talk_helpers.notebook, "setup_notebook", lambda seed: calls.append(seed))
    monkeypatch.setattr(talk, "_enable_definition_cells", lambda: calls.append("cells"))
    monkeypatch.setattr(talk, "_warm_up", lambda: calls.append("warm"))
    monkeypatch.setattr(talk, "talk_start_method", lambda platform: platform)
    ready = talk.start_talk()
    assert calls == [0, "cells", "warm"]
    assert ready.start_method == ready.platform_method
