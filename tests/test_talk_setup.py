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
    "class Files(IterableDataset):\n    '''Whole files.'''\n    sizes = SIZES",
    "x: int = 3\n\n\ndef g():\n    return x",
    "import math\n\nSCALE = int(math.pi)\n\n\ndef g():\n    return SCALE",  # used: defined
])
def test_a_cell_of_imports_classes_functions_and_what_they_use_runs_as_an_importable_cell(
        source):
    assert talk.split_cell(source) == (source, "\n" * len(source.splitlines()))
    lines = source.splitlines(keepends=True)
    assert talk._as_importable(lines) == ["%%importable\n", *lines]


@pytest.mark.parametrize(("source", "definitions", "rest"), [
    ("def f():\n    pass\n\nf()", "def f():\n    pass\n\n\n", "\n\n\nf()"),
    ("print(1)\n@dataclass\nclass A:\n    x: int\nA(1)",
     "\n@dataclass\nclass A:\n    x: int\n\n", "print(1)\n\n\n\nA(1)"),
    ("loader = make()\n\n\ndef f():\n    pass", "\n\n\ndef f():\n    pass",
     "loader = make()\n\n\n\n\n"),                 # a value no definition uses
    ("import os; print(os.sep)\n\n\ndef f():\n    return os", "\n\n\ndef f():\n    return os",
     "import os; print(os.sep)\n\n\n\n\n"),        # a line shared with a statement that runs
    ("for i in range(2):\n    print(i)\nclass A:\n    pass", "\n\nclass A:\n    pass",
     "for i in range(2):\n    print(i)\n\n\n"),
])
def test_a_class_cell_with_statements_that_run_is_split_on_the_cells_own_lines(
        source, definitions, rest):
    assert talk.split_cell(source) == (definitions, rest)


def test_the_definitions_run_as_an_importable_cell_where_the_first_starts():
    lines = ["print(1)\n", "class A:\n", "    pass\n", "A()\n"]
    assert talk._as_importable(lines) == [
        "print(1)\n", "get_ipython().run_cell_magic('importable', '', '\\nclass A:\\n    "
        "pass\\n\\n')\n", "\n", "A()\n"]


@pytest.mark.parametrize("source", [
    "import torch",                                   # nothing defined
    "SIZES = [5, 3]",                                 # a constant alone
    "if True:\n    def f():\n        pass",          # defined inside a block
    "%%time\ndef f():\n    pass",                     # not Python
    "",
])
def test_a_cell_that_defines_no_class_or_function_at_its_top_level_stays_as_it_is(source):
    lines = source.splitlines(keepends=True)
    assert talk._as_importable(lines) == lines


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
    magic line) is importable by a worker that is a new interpreter; a function using an
    import of an ordinary cell stays an ordinary cell's."""
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
        shell.run_cell("import torch")  # a name no worker can import: the cell runs as it is
        kept = shell.run_cell("def total(b):\\n    return torch.cat(b).sum().item()\\n\\n"
                              "total([torch.ones(2)])")
        print(shell.user_ns["Ids"].__module__.startswith("cell_"), result.result,
              kept.result, shell.user_ns["total"].__module__)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "True [0, 1, 2, 3, 4, 5] 2.0 __main__", \
        out.stderr[-2000:]


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


def test_a_worker_started_anew_is_refused_a_class_of_an_ordinary_cell(monkeypatch):
    import io
    import pickle

    ordinary = type("MapIds", (), {"__module__": "__main__"})
    monkeypatch.setattr(sys.modules["__main__"], "MapIds", ordinary, raising=False)
    with pytest.raises(pickle.PicklingError, match="^MapIds is defined in an ordinary cell"):
        talk._dump([ordinary()], io.BytesIO())
    sent = io.BytesIO()
    talk._dump({"__main__": talk.TalkReady}, sent)  # the word alone is no class
    assert pickle.loads(sent.getvalue()) == {"__main__": talk.TalkReady}
