"""%%importable cells: lesson code defined in a notebook that workers and ranks can import.

The first tests pin the analysis and the modules it writes, in this process. The others
run cells in a real Jupyter kernel, one per start method, as a learner would: define a
dataset in a cell, load it with two DataLoader workers, edit it, load again, and run a
rank function defined in a cell in a real world whose ranks start workers of their own.
"""

import os
import pickle
import re
import subprocess
import sys
import textwrap
import traceback

import nbformat
import pytest
from nbclient import NotebookClient

from talk_helpers.notebook import cells
from talk_helpers.runtime.start_method import START_METHODS

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture
def fresh_registry(monkeypatch):
    """No names from earlier tests' cells."""
    monkeypatch.setattr(cells, "_latest", {})
    monkeypatch.setattr(cells, "_imports", {})
    monkeypatch.setattr(cells, "_bodies", {})


# ------------------------------------------------------------------------ the analysis


def test_names_used_anywhere_in_the_cell_count_as_used():
    body = textwrap.dedent("""\
        class Shards(Base):
            size = SIZE

            def __iter__(self):
                return iter([scale(i) for i in range(LIMIT) if keep(i)])

        def outer():
            def inner():
                return NESTED
            return inner, lambda: LAMBDA
        """)
    assert cells.used_globals(body) == {"Base", "SIZE", "scale", "LIMIT", "keep", "NESTED",
                                        "LAMBDA"}


def test_builtins_dunders_and_names_the_cell_binds_are_not_used_globals():
    body = textwrap.dedent("""\
        import math
        from itertools import count as counter

        def first(xs):
            return len(xs) + helper() + math.pi + next(counter()) + len(__name__)

        def helper():
            global CACHE
            CACHE = 1
            return CACHE
        """)
    assert cells.used_globals(body) == set()


def test_a_name_from_an_earlier_importable_cell_is_imported_on_the_first_line(fresh_registry):
    namespace = {}
    earlier = cells.define("SIZE = 4\nSCALE = 10\n", namespace)
    cell = cells.plan("def size():\n    return SIZE * SCALE\n", namespace)
    assert cell.imports == {"SIZE": earlier.__name__, "SCALE": earlier.__name__}
    assert cell.text.splitlines()[0] == f"from {earlier.__name__} import SCALE, SIZE"


def test_names_from_several_earlier_cells_are_imported_on_one_line(fresh_registry):
    namespace = {}
    first = cells.define("A = 1\n", namespace)
    second = cells.define("B = 2\n", namespace)
    cell = cells.plan("total = A + B\n", namespace)
    header = cell.text.splitlines()[0]
    assert sorted(header.split("; ")) == sorted([f"from {first.__name__} import A",
                                                 f"from {second.__name__} import B"])


def test_a_cell_that_uses_no_earlier_cell_starts_with_a_comment(fresh_registry):
    cell = cells.plan("x = 1\n", {})
    assert cell.imports == {}
    assert cell.text.splitlines()[0].startswith("#")
    assert cell.text.splitlines()[1:] == ["x = 1"]


def test_a_name_from_an_ordinary_cell_is_refused_with_what_to_do(fresh_registry):
    with pytest.raises(cells.CellError) as refused:
        cells.plan("def size():\n    return SIZE\n", {"SIZE": 3})
    assert str(refused.value) == (
        "`SIZE` is defined in an ordinary cell, so a DataLoader worker cannot import it: "
        "define it in this cell or in an earlier %%importable cell")


def test_a_module_imported_in_an_ordinary_cell_is_refused(fresh_registry):
    with pytest.raises(cells.CellError, match="`os` is imported in an ordinary cell.*"
                                              "import it in this cell"):
        cells.plan("here = os.getcwd()\n", {"os": os})


def test_a_name_redefined_in_an_ordinary_cell_is_refused(fresh_registry):
    namespace = {}
    cells.define("SIZE = 4\n", namespace)
    namespace["SIZE"] = 5  # an ordinary cell: SIZE = 5
    with pytest.raises(cells.CellError, match="`SIZE` was last defined in an ordinary cell"):
        cells.plan("double = SIZE * 2\n", namespace)


def test_every_refused_name_is_named(fresh_registry):
    with pytest.raises(cells.CellError) as refused:
        cells.plan("total = A + B\n", {"A": 1, "B": 2})
    assert [line.split("`")[1] for line in str(refused.value).splitlines()] == ["A", "B"]


def test_names_only_builtins_or_nobody_define_are_left_to_python(fresh_registry):
    assert cells.plan("print(len(UNDEFINED_YET))\n", {"print": print}).imports == {}


def test_the_same_text_is_the_same_module_and_an_edit_a_new_one(fresh_registry):
    first = cells.plan("x = 1\n", {})
    assert re.fullmatch(r"cell_[0-9a-f]{8}", first.name)
    assert cells.plan("x = 1\n", {}).name == first.name
    assert cells.plan("x = 2\n", {}).name != first.name


def test_a_cell_becomes_a_new_module_when_a_cell_it_uses_is_edited(fresh_registry):
    namespace = {}
    cells.define("SIZE = 4\n", namespace)
    before = cells.plan("double = SIZE * 2\n", namespace)
    cells.define("SIZE = 5\n", namespace)
    assert cells.plan("double = SIZE * 2\n", namespace).name != before.name


# ----------------------------------------------------------------- the module it makes


def test_an_error_points_at_the_cells_own_line_numbers(fresh_registry):
    namespace = {}
    cells.define("LIMIT = 3\n", namespace)
    body = "def check(n):\n    if n > LIMIT:\n        raise ValueError(n)\n\ncheck(5)\n"
    with pytest.raises(ValueError) as raised:
        cells.define(body, namespace)  # cell line 1 is the magic, so body line k is k + 1
    frames = traceback.extract_tb(raised.value.__traceback__)
    in_cell = [(f.lineno, f.line) for f in frames if os.path.basename(f.filename)
               .startswith(cells.PREFIX)]
    assert in_cell == [(6, "check(5)"), (4, "raise ValueError(n)")]
    assert os.path.basename(frames[-1].filename).startswith(cells.PREFIX)


def test_a_syntax_error_names_the_cells_line():
    with pytest.raises(SyntaxError) as raised:
        cells.used_globals("x = 1\ndef f(:\n    pass\n")
    assert raised.value.lineno == 3


def test_the_cells_names_are_bound_as_if_it_ran_in_the_notebook(fresh_registry):
    namespace = {}
    module = cells.define("import math\n\ndef area(r):\n    return math.pi * r * r\n",
                          namespace)
    assert namespace["area"] is module.area and namespace["math"] is module.math
    assert not any(name.startswith("__") for name in namespace)
    assert pickle.loads(pickle.dumps(module.area)) is module.area


def test_names_imported_from_earlier_cells_stay_theirs(fresh_registry):
    namespace = {}
    earlier = cells.define("SIZE = 4\n", namespace)
    cells.define("double = SIZE * 2\n", namespace)
    assert namespace == {"SIZE": 4, "double": 8}
    assert cells._latest["SIZE"] == earlier.__name__


def test_a_cell_run_again_unchanged_is_executed_again(fresh_registry):
    namespace = {}
    first = cells.define("TOKEN = object()\n", namespace)
    token = namespace["TOKEN"]
    again = cells.define("TOKEN = object()\n", namespace)
    assert again.__name__ == first.__name__
    assert namespace["TOKEN"] is not token


def test_a_cell_that_fails_when_run_again_leaves_its_last_good_run(fresh_registry,
                                                                  monkeypatch):
    namespace = {}
    body = "import os\n\nclass Ids:\n    pass\n\nassert 'BREAK' not in os.environ\n"
    module = cells.define(body, namespace)
    monkeypatch.setenv("BREAK", "1")
    with pytest.raises(AssertionError):
        cells.define(body, namespace)
    assert sys.modules[module.__name__] is module
    assert pickle.loads(pickle.dumps(namespace["Ids"]())).__class__ is module.Ids


def test_cells_using_a_cell_run_again_unchanged_pickle_its_new_objects(fresh_registry):
    namespace = {}
    dataset = "class Ids:\n    def __init__(self, n):\n        self.n = n\n"
    cells.define(dataset, namespace)
    cells.define("def make(n):\n    return Ids(n)\n", namespace)
    cells.define(dataset, namespace)  # run again: a new class Ids in the same module
    made = namespace["make"](3)
    assert type(made) is namespace["Ids"]
    assert pickle.loads(pickle.dumps(made)).n == 3


# ------------------------------------------------- an edit reaches the cells that use it


def test_an_edited_cell_updates_the_cells_that_use_its_names(fresh_registry):
    namespace = {}
    cells.define("def tag():\n    return 'old'\n", namespace)
    user = cells.define("class Tagged:\n    def __init__(self):\n        self.tag = tag()\n",
                        namespace)
    assert namespace["Tagged"]().tag == "old" and cells.last_updates() == []
    cells.define("def tag():\n    return 'new'\n", namespace)  # the cell, edited
    assert namespace["Tagged"]().tag == "new"
    assert namespace["Tagged"].__module__ != user.__name__  # a new module: spawn sees it
    assert [str(u) for u in cells.last_updates()] == ["↻ updated Tagged, which uses tag"]
    made = namespace["Tagged"]()
    assert pickle.loads(pickle.dumps(made)).tag == "new"


def test_updates_run_down_a_chain_in_order(fresh_registry):
    namespace = {}
    cells.define("SIZE = 4\n", namespace)
    cells.define("def double():\n    return 2 * SIZE\n", namespace)
    cells.define("def quadruple():\n    return 2 * double()\n", namespace)
    cells.define("SIZE = 5\n", namespace)
    assert namespace["quadruple"]() == 20
    assert [u.defines for u in cells.last_updates()] == [("double",), ("quadruple",)]


def test_a_name_defined_again_by_a_later_cell_keeps_that_definition(fresh_registry):
    namespace = {}
    cells.define("def tag():\n    return 'old'\n", namespace)
    cells.define("def label():\n    return 'first ' + tag()\n", namespace)
    cells.define("def label():\n    return 'second'\n", namespace)  # another cell
    cells.define("def tag():\n    return 'new'\n", namespace)
    assert namespace["label"]() == "second" and cells.last_updates() == []


def test_a_cell_that_fails_to_update_says_so_and_keeps_its_last_version(fresh_registry):
    namespace = {}
    cells.define("LIMIT = 3\n", namespace)
    cells.define("assert LIMIT < 10\n\ndef limit():\n    return LIMIT\n", namespace)
    cells.define("LIMIT = 30\n", namespace)
    [update] = cells.last_updates()
    assert str(update) == ("⚠ could not update limit, which uses LIMIT: AssertionError. "
                           "Run its cell again")
    assert namespace["limit"]() == 3


def test_names_that_stay_the_same_object_update_nothing(fresh_registry):
    namespace = {}
    cells.define("import math\n", namespace)
    cells.define("def root(x):\n    return math.sqrt(x)\n", namespace)
    cells.define("import math\nTAU = 2 * math.pi\n", namespace)
    assert cells.last_updates() == []


def test_cells_that_use_each_other_update_once_each(fresh_registry):
    namespace = {}
    cells.define("def a():\n    return 1\n", namespace)
    cells.define("def b():\n    return a() + 1\n", namespace)
    cells.define("def a():\n    return b() if False else 10\n", namespace)  # uses b now
    assert namespace["b"]() == 11
    assert len(cells.last_updates()) == 1


def test_future_imports_stay_first_and_lines_stay_the_cells(fresh_registry):
    namespace = {}
    cells.define("SIZE = 4\n", namespace)
    body = '"""Sizes."""\nfrom __future__ import annotations  # first\n\n' \
           "def size() -> Unknown:\n    return SIZE\n"
    module = cells.define(body, namespace)
    assert module.size() == 4
    lines = cells.plan(body, namespace).text.splitlines()
    assert lines[2].startswith("from __future__ import annotations; from cell_")
    assert lines[2].endswith("  # first") and lines[4] == "def size() -> Unknown:"


def test_enable_is_explicit_harmless_twice_and_cleans_up_at_exit(tmp_path):
    script = textwrap.dedent("""\
        import sys
        before = list(sys.path)
        from talk_helpers.notebook import cells
        assert cells.directory() is None and sys.path == before, "import had side effects"
        folder = cells.enable()
        assert cells.enable() == folder and sys.path.count(str(folder)) == 1
        assert sys.path[0] == str(folder) and folder.is_dir()
        module = cells.define("X = 1\\n")
        assert (folder / f"{module.__name__}.py").is_file()
        print(folder)
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert not os.path.exists(done.stdout.strip())


# ------------------------------------------------------- in a kernel, per start method


class Kernel:
    """A Jupyter kernel that runs one cell at a time, as a learner runs them."""

    def __init__(self, client: NotebookClient, method: str):
        self.client = client
        self.method = method

    def run(self, source: str) -> nbformat.NotebookNode:
        cell = nbformat.v4.new_code_cell(textwrap.dedent(source))
        self.client.nb.cells.append(cell)
        self.client.execute_cell(cell, len(self.client.nb.cells) - 1)
        return cell

    def define(self, source: str) -> None:
        """Run an %%importable cell, which must succeed silently."""
        cell = self.run(source)
        assert cell.outputs == [], _shown(cell)

    def value(self, source: str):
        """Run a cell ending on an expression and return the value it shows."""
        cell = self.run(source)
        results = [o for o in cell.outputs if o.output_type == "execute_result"]
        assert results, _shown(cell)
        return eval(results[-1]["data"]["text/plain"])  # reprs of ints, tuples, lists


def _shown(cell) -> str:
    parts = []
    for out in cell.outputs:
        if out.output_type == "error":
            parts.append(ANSI.sub("", "\n".join(out.traceback)))
        elif out.output_type == "stream":
            parts.append(out.text)
        else:
            parts.append(str(out.get("data")))
    return "\n".join(parts)


@pytest.fixture(scope="module", params=START_METHODS)
def kernel(request, tmp_path_factory):
    method = request.param
    notebook = nbformat.v4.new_notebook(metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}})
    folder = tmp_path_factory.mktemp(f"kernel-{method}")
    client = NotebookClient(notebook, timeout=180, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(folder)}})
    with client.setup_kernel(env=dict(os.environ, TALK_START_METHOD=method)):
        kernel = Kernel(client, method)
        assert kernel.value("""\
            from talk_helpers.notebook import setup_notebook
            setup_notebook()
            import torch.multiprocessing as mp
            mp.get_start_method()
            """) == method
        kernel.run("from torch.utils.data import DataLoader")
        yield kernel


SHARDS = """\
    %%importable
    from torch.utils.data import IterableDataset, get_worker_info


    class {name}(IterableDataset):
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            info = get_worker_info()
            worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
            for i in range(worker, self.n, workers):
                yield worker, {sample}
    """


def test_an_edited_cell_takes_effect_in_the_next_dataloader(kernel):
    kernel.define(SHARDS.format(name="Shards", sample="i"))
    loader = "list(DataLoader(Shards(6), batch_size=None, num_workers=2))"
    assert kernel.value(loader) == [[0, 0], [1, 1], [0, 2], [1, 3], [0, 4], [1, 5]]
    kernel.define(SHARDS.format(name="Shards", sample="100 + i"))
    assert kernel.value(loader) == [[0, 100], [1, 101], [0, 102], [1, 103], [0, 104], [1, 105]]


WORKER = """\
    %%importable
    from torch.utils.data import get_worker_info


    def this_worker():
        info = get_worker_info()
        return (0, 1) if info is None else (info.id, info.num_workers)
    """

USES_WORKER = """\
    %%importable
    from torch.utils.data import IterableDataset


    class UsesWorker(IterableDataset):
        def __iter__(self):
            worker, workers = this_worker()
            yield from range(worker, 4, workers)
    """


def test_an_edit_reaches_workers_of_a_dataset_from_a_cell_not_run_again(kernel):
    """The stale-name case: ``this_worker`` edited, ``UsesWorker``'s cell left alone."""
    kernel.define(WORKER)
    kernel.define(USES_WORKER)
    loader = "sorted(list(DataLoader(UsesWorker(), batch_size=None, num_workers=2)))"
    assert kernel.value(loader) == [0, 1, 2, 3]
    cell = kernel.run(WORKER.replace("(info.id, info.num_workers)", "(0, 1)"))
    assert _shown(cell) == "↻ updated UsesWorker, which uses this_worker\n"
    assert kernel.value(loader) == [0, 0, 1, 1, 2, 2, 3, 3]  # each worker reads all now


FACTORY = """\
    %%importable
    from torch.utils.data import DataLoader


    def make_loader(n):
        return DataLoader(Factory(n), batch_size=None, num_workers=2)
    """


def test_a_loader_factory_cell_uses_the_dataset_of_an_earlier_cell(kernel):
    kernel.define(SHARDS.format(name="Factory", sample="-i"))
    kernel.define(FACTORY)
    assert kernel.value("list(make_loader(4))") == [[0, 0], [1, -1], [0, -2], [1, -3]]
    # The dataset cell run again, unchanged: the factory makes the new class, which pickles
    # (for a spawned or forkserver worker) as the module's Factory.
    kernel.define(SHARDS.format(name="Factory", sample="-i"))
    assert kernel.value("import pickle\n"
                        "type(pickle.loads(pickle.dumps(make_loader(2).dataset))) is Factory")


def test_a_cell_using_a_name_from_an_ordinary_cell_is_refused_in_one_line(kernel):
    kernel.run("WIDTH = 3")
    cell = kernel.run("""\
        %%importable
        def width():
            return WIDTH
        """)
    assert [o.output_type for o in cell.outputs] == ["stream"], _shown(cell)
    assert cell.outputs[0].text == (
        "UsageError: `WIDTH` is defined in an ordinary cell, so a DataLoader worker cannot "
        "import it: define it in this cell or in an earlier %%importable cell\n")
    assert "width" not in kernel.value("dir()")


def test_an_error_in_a_cell_shows_the_cells_own_lines(kernel):
    cell = kernel.run("""\
        %%importable

        def check(n):
            raise ValueError(f"{n} is too many")

        check(7)
        """)
    [error] = [o for o in cell.outputs if o.output_type == "error"]
    assert (error.ename, error.evalue) == ("ValueError", "7 is too many")
    shown = ANSI.sub("", "\n".join(error.traceback))
    assert re.search(r"cell_[0-9a-f]{8}\.py:6\b", shown), shown
    assert re.search(r"cell_[0-9a-f]{8}\.py:4, in check", shown), shown
    assert "cells.py" not in shown and "importlib" not in shown, shown


def test_a_syntax_error_in_a_cell_is_one_short_message(kernel):
    cell = kernel.run("%%importable\nx = 1\ndef f(:\n    pass\n")
    assert [o.output_type for o in cell.outputs] == ["stream"], _shown(cell)
    assert cell.outputs[0].text.startswith(
        "UsageError: SyntaxError in line 3 of the cell: invalid syntax\n    def f(:\n")


RANK_FN = """\
    %%importable
    import torch.distributed as dist
    from torch.utils.data import DataLoader


    def ids_in_rank(rank, world_size, n):
        loader = DataLoader(Ranked(n), batch_size=None, num_workers=2)
        return dist.get_rank(), list(loader)
    """

WORLD = """\
    import functools
    from talk_helpers.runtime import run_world

    report = run_world(functools.partial(ids_in_rank, n=4), 2, timeout_s=120, reuse=True)
    (report.how, report.results) if report.ok else repr(report)
    """


@pytest.mark.distributed
def test_a_cell_defined_rank_function_runs_in_every_rank_with_cell_defined_workers(kernel):
    kernel.define(SHARDS.format(name="Ranked", sample="i"))
    kernel.define(RANK_FN)
    shown = kernel.value(WORLD)
    assert isinstance(shown, tuple), shown
    how, results = shown
    ids = [[0, 0], [1, 1], [0, 2], [1, 3]]
    assert results == [(0, ids), (1, ids)]
    # Edited: the dataset's cell runs again and updates the rank function that uses it;
    # the same warm ranks (forked from the kernel, or new interpreters) import both.
    cell = kernel.run(SHARDS.format(name="Ranked", sample="10 * i"))
    assert _shown(cell) == "↻ updated ids_in_rank, which uses Ranked\n"
    how, results = kernel.value(WORLD)
    assert results == [(r, [[w, 10 * i] for w, i in ids]) for r in [0, 1]]
    assert how == f"{kernel.method}, warm world"
