"""A learner types an %%importable dataset in JupyterLab, loads it with spawned workers,
edits it and sees the next loader use the edit.

The loader asks for spawn whatever the lab's start method: its workers then import the
dataset's class from the cell's module, the case a class in ``__main__`` cannot serve.
"""

import json

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from .conftest import TOKEN
from .kernel import wait_kernel_ready

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

SETUP = "from talk_helpers.notebook import setup_notebook\nsetup_notebook()"
DATASET = """%%importable
from torch.utils.data import IterableDataset, get_worker_info


class Ids(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        for i in range(info.id, 6, info.num_workers):
            yield {sample}"""
LOADER = """from torch.utils.data import DataLoader

loader = DataLoader(Ids(), batch_size=None, num_workers=2, multiprocessing_context="spawn")
print("ids:", [int(i) for i in loader])"""


def _scratch_notebook(path) -> None:
    cells = [SETUP, "", ""]
    path.write_text(json.dumps({
        "cells": [{"cell_type": "code", "execution_count": None, "metadata": {},
                   "outputs": [], "source": source} for source in cells],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                    "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5}))


def _cell(page, index):
    return page.locator(".jp-Notebook .jp-CodeCell").nth(index)


def _type_into(page, index, source) -> None:
    """Replace a cell's text, as typing it would (without the editor's auto-indent)."""
    _cell(page, index).locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(source)


def _run(page, index, timeout_ms=180_000) -> None:
    """Run one cell with Shift+Enter and wait until it has run (a new execution count)."""
    prompt = _cell(page, index).locator(".jp-InputArea-prompt")
    before = prompt.inner_text()
    _cell(page, index).locator(".cm-content").click()
    page.keyboard.press("Shift+Enter")
    page.wait_for_function(
        "([el, before]) => /\\[\\d+\\]/.test(el.textContent) && el.textContent !== before",
        arg=[prompt.element_handle(), before], timeout=timeout_ms, polling=250)


def _run_setup(page) -> None:
    """Run the set-up cell, again if the first try came before the kernel was connected
    (running it twice is harmless)."""
    for attempt in range(4):
        try:
            return _run(page, 0, timeout_ms=20_000)
        except PlaywrightTimeout:
            if attempt == 3:
                raise


def _wait_for_output(page, index, text) -> None:
    page.wait_for_function(
        "([cell, text]) => cell.querySelector('.jp-OutputArea')?.innerText.includes(text)",
        arg=[_cell(page, index).element_handle(), text], timeout=60_000, polling=250)


def _wait_idle(page) -> None:
    wait_kernel_ready(page, 180_000)


def test_an_edited_importable_cell_reaches_the_next_loaders_workers(page, lab_url, lab_root,
                                                                     screenshots):
    _scratch_notebook(lab_root / "notebooks" / "cells_check.ipynb")
    page.goto(f"{lab_url}/lab/workspaces/cells/tree/notebooks/cells_check.ipynb"
              f"?reset&token={TOKEN}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    _wait_idle(page)
    try:
        _run_setup(page)
        _type_into(page, 1, DATASET.format(sample="i"))
        _type_into(page, 2, LOADER)
        _run(page, 1)
        _run(page, 2)
        _wait_for_output(page, 2, "ids: [0, 1, 2, 3, 4, 5]")
        _wait_idle(page)

        _type_into(page, 1, DATASET.format(sample="10 * i"))
        _run(page, 1)
        _run(page, 2)
        _wait_for_output(page, 2, "ids: [0, 10, 20, 30, 40, 50]")
        _wait_idle(page)
    except Exception:
        page.screenshot(path=screenshots / "cells_edited_dataset-FAILED.png")
        raise
    assert _cell(page, 1).locator(".jp-OutputArea-output").count() == 0  # silent
    assert "[0, 1, 2," not in _cell(page, 2).locator(".jp-OutputArea").inner_text()
    assert _cell(page, 1).locator(".cm-content").inner_text().startswith("%%importable")
    page.screenshot(path=screenshots / "cells_edited_dataset.png")
