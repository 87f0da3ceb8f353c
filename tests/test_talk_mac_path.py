"""The talk on a Mac (spawn by default, forkserver available), in a kernel started as
`make talk` starts it (IPYTHONDIR with the talk's start-up file): its demos work before
``start_talk()`` ran, after a kernel restart, and after a class cell is edited live, whatever
statement the edit adds (the workers import the edited definition); a class the workers
cannot import is refused with what to do, never a worker's crash. A Mac is stood for by a
start-up file that makes spawn the kernel's default before the talk's own runs, and
``TALK_START_METHOD=spawn``."""

import os
import shutil

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.util import run_sync

from talk_helpers.runtime.start_cost import time_limit_s

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TALK = os.path.join(ROOT, "notebooks", "talk.ipynb")
STARTUP = os.path.join(ROOT, "scripts", "slides_template", "ipython")
# The talk's cells this test runs, by id: MapIds, its DataLoader, StreamIds, two workers.
CELLS = ("d2c7fcdf", "032f703d", "bd6df07c", "0db7cbf5")
START_TALK = "30b0db37"
# Run before the talk's start-up file (IPython runs them in name order): Python's default
# start method on macOS.
MAC = "import multiprocessing\n\nmultiprocessing.set_start_method('spawn', force=True)\n"
# What the workers of MapIds return, read back in the kernel.
READ_BACK = "sorted(int(i) for i in DataLoader(MapIds(4), num_workers=2))"


def talk_cells() -> dict[str, str]:
    return {cell.id: cell.source for cell in nbformat.read(TALK, as_version=4).cells}


MAPIDS = talk_cells()[CELLS[0]]


def edited(source: str, scale: int, added: str = "") -> str:
    """MapIds edited live: every sample id times ``scale``, and ADDED (a statement added
    to the cell) after the class."""
    edit = source.replace("        return i\n", "        return i * self.scale\n")
    edit = edit.replace("        self.size = size\n",
                        f"        self.size = size\n        self.scale = {scale}\n")
    assert edit != source, "the talk's MapIds cell changed: update this test's edit"
    return edit + added


# Statements a speaker may add to the class cell live, each with the ids the workers of
# the edited MapIds then give (a crash in a worker would be an error here instead).
EDITS = {
    "a print": (edited(MAPIDS, 2, "\nprint('MapIds, edited')\n"), "[0, 2, 4, 6]"),
    "an assignment the class uses": (
        "SCALE = int('3')\n\n" + edited(MAPIDS, 1).replace("= 1\n", "= SCALE\n"),
        "[0, 3, 6, 9]"),
    "an assignment": (edited(MAPIDS, 4, "\nname = MapIds.__name__.lower()\n"), "[0, 4, 8, 12]"),
    "a method": (edited(MAPIDS, 5).replace(
        "    def __len__", "    def twice(self, i):\n        return 2 * i\n\n    def __len__"),
        "[0, 5, 10, 15]"),
    "an import": ("import math\n\n" + edited(MAPIDS, 6), "[0, 6, 12, 18]"),
}
# A cell that starts workers itself gets their answer too.
STARTS_WORKERS = (edited(MAPIDS, 7, "\n" + READ_BACK + "\n"), "[0, 7, 14, 21]")
# A class inside a block stays in the kernel's __main__: the demo says what to do.
IN_A_BLOCK = "if True:\n" + "".join(f"    {line}" for line in edited(MAPIDS, 8).splitlines(True))
REFUSED = "PicklingError: MapIds is defined in an ordinary cell"


def result(client, nb, source: str) -> str:
    """Run SOURCE in the kernel; its result's text, or the error it raised."""
    cell = nbformat.v4.new_code_cell(source)
    nb.cells.append(cell)
    client.execute_cell(cell, len(nb.cells) - 1)
    for output in cell.outputs:
        if output.output_type == "error":
            return f"{output.ename}: {output.evalue}"
        if output.output_type == "execute_result":
            return output.data["text/plain"]
    return ""


@pytest.mark.timeout(1800)
def test_the_demos_work_on_a_mac_without_set_up_after_a_restart_and_after_live_edits(
        tmp_path):
    shutil.copytree(STARTUP, tmp_path / "ipython")
    (tmp_path / "ipython/profile_default/startup/00-a-mac.py").write_text(MAC)
    sources = talk_cells()
    nb = nbformat.v4.new_notebook()
    env = dict(os.environ, TALK_START_METHOD="spawn", IPYTHONDIR=str(tmp_path / "ipython"))
    env.pop("TALK_NO_FORKSERVER", None)
    client = NotebookClient(nb, timeout=int(time_limit_s(60, interpreters=8)), allow_errors=True,
                            kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    seen = {}
    with client.setup_kernel(env=env):  # the kernel's environment, as `make talk` gives it
        seen["before start_talk()"] = [result(client, nb, sources[k]) for k in CELLS]
        run_sync(client.km.restart_kernel)(env=env)
        run_sync(client.kc.wait_for_ready)(timeout=client.timeout)
        seen["after a restart"] = [result(client, nb, sources[k]) for k in CELLS]
        result(client, nb, sources[START_TALK])
        for edit, (source, _) in EDITS.items():
            result(client, nb, source)
            seen[edit] = result(client, nb, READ_BACK)
        seen["a cell that starts workers"] = result(client, nb, STARTS_WORKERS[0])
        seen["the demo after a live edit"] = result(client, nb, sources[CELLS[3]])
        result(client, nb, IN_A_BLOCK)
        seen["a class in a block"] = result(client, nb, READ_BACK)
    for when in ("before start_talk()", "after a restart"):
        assert seen[when][-1] == "(10, 20)", f"{when}: {seen[when]}"
    for edit, (_, ids) in EDITS.items():
        assert seen[edit] == ids, f"after a live edit adding {edit}: {seen[edit]}"
    assert seen["a cell that starts workers"] == STARTS_WORKERS[1], seen
    assert seen["the demo after a live edit"] == "(10, 20)", seen
    assert seen["a class in a block"].startswith(REFUSED), seen
