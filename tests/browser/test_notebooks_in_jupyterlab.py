"""Each notebook in a real JupyterLab, as a learner opens it: the stored outputs render
(every figure it stores is drawn), its kernel starts and runs the set-up cell, and each
live widget works when the cells it needs run in the lab.

Running every notebook top to bottom is nbval's job (`make notebooks`, under fork,
forkserver and spawn, comparing every stored output with a fresh run); running them
again here would only repeat it under fork. What only a browser shows is checked here:
how JupyterLab draws the outputs, and widgets that answer their controls.
"""

import json
import re
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from .conftest import ROOT, TOKEN
from .kernel import run_all, wait_kernel_ready
from .live_cells import cells_to_run, code_cells, widget_cells

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CELL_TIMEOUT_MS = 180_000


def _open(page, lab_url: str, name: str, n_code_cells: int = 1) -> None:
    """Open a notebook in a clean, single-use workspace; wait until all its code cells are
    drawn and its kernel is idle."""
    stem = Path(name).stem
    page.goto(f"{lab_url}/lab/workspaces/{stem}/tree/notebooks/{name}?reset&token={TOKEN}")
    page.wait_for_function(
        f"() => document.querySelectorAll('.jp-Notebook .jp-CodeCell').length >= {n_code_cells}",
        timeout=120_000, polling=250)
    _wait_idle(page)


def _shut_down_kernel(lab_url: str, name: str) -> None:
    """End the kernel of ``notebooks/name`` on the server, if one runs (the next opening of
    the notebook then starts a fresh one)."""
    api = f"{lab_url}/api/sessions"
    with urllib.request.urlopen(f"{api}?token={TOKEN}", timeout=30) as answer:
        sessions = json.load(answer)
    for session in sessions:
        if session.get("path") == f"notebooks/{name}":
            request = urllib.request.Request(f"{api}/{session['id']}?token={TOKEN}",
                                             method="DELETE")
            urllib.request.urlopen(request, timeout=60).close()


def _wait_idle(page, timeout_ms: int = 120_000) -> None:
    wait_kernel_ready(page, timeout_ms)


def _menu(page, menu: str, command: str) -> None:
    page.locator(".jp-Notebook .jp-Cell").first.click()  # menus act on the active notebook
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{menu}$")).click()
    page.locator(f"li[data-command='{command}']").click()


def _code_cell(page, index: int):
    return page.locator(".jp-Notebook .jp-CodeCell").nth(index)


def _run_cell(page, index: int) -> None:
    """Run one code cell where it stands (Ctrl+Enter), its prompt cleared before, and wait
    until the kernel is done with it: an execution count, the kernel idle again. A press
    that comes before the kernel is connected is lost: it is repeated."""
    cell = _code_cell(page, index)
    prompt = cell.locator(".jp-InputArea-prompt").element_handle()
    for attempt in range(4):
        cell.locator(".jp-InputArea-editor").click()
        page.keyboard.press("Control+Enter")
        try:
            page.wait_for_function("el => /\\[(\\*|\\d+)\\]/.test(el.textContent)",
                                   arg=prompt, timeout=20_000, polling=100)
            break
        except PlaywrightTimeout:
            if attempt == 3:
                raise
    page.wait_for_function("el => /\\[\\d+\\]/.test(el.textContent)", arg=prompt,
                           timeout=CELL_TIMEOUT_MS, polling=250)
    _wait_idle(page, CELL_TIMEOUT_MS)


def _clear_outputs(page) -> None:
    _menu(page, "Edit", "editmenu:clear-all")
    page.wait_for_function(
        "() => [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputArea-prompt')]"
        ".every(p => !/\\d/.test(p.textContent))", timeout=30_000)


def _run_all(page) -> None:
    """Clear the stored outputs, then run every cell in the fresh kernel."""
    _clear_outputs(page)
    run_all(page, CELL_TIMEOUT_MS)


def _save(page) -> None:
    """Save the notebook (into the server's copy of the project)."""
    page.keyboard.press("Control+s")
    page.wait_for_timeout(1500)


def _save_and_read(page, lab_root_copy: Path) -> dict:
    _save(page)
    return json.loads(lab_root_copy.read_text())


def _errors_outside_raises_exception_cells(nb: dict) -> list[str]:
    found = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        if "raises-exception" in cell.get("metadata", {}).get("tags", []):
            continue
        for out in cell.get("outputs", []):
            if out["output_type"] == "error":
                found.append(f"{out['ename']}: {out['evalue']} in {''.join(cell['source'])[:80]}")
    return found


def _stored_images(nb: dict) -> int:
    """Outputs a reader sees as a picture: every stored PNG (that of a widget is the still
    a reader sees where no kernel runs it)."""
    return sum(1 for cell in nb["cells"] if cell["cell_type"] == "code"
               for out in cell.get("outputs", []) if "image/png" in out.get("data", {}))


DRAWN = ("() => [...document.querySelectorAll('.jp-Notebook .jp-OutputArea-output img')]"
         ".filter(img => img.complete && img.naturalWidth > 0).length")


def _drawn_images(page, expected: int) -> int:
    """Pictures JupyterLab drew in output areas (loaded, not broken), once ``expected`` of
    them are or after 30 s (they load a moment after the notebook opens)."""
    try:
        page.wait_for_function(f"() => ({DRAWN})() >= {expected}", timeout=30_000,
                               polling=250)
    except PlaywrightTimeout:
        pass
    return page.evaluate(DRAWN)


def _change_first_slider(page) -> None:
    """Type a new value into the first slider's readout and check the output changes."""
    slider = page.locator(".widget-slider").first
    container = slider.locator(
        "xpath=ancestor::div[contains(@class,'jp-OutputArea-output')][1]")
    before = container.inner_html()
    handle = slider.locator(".noUi-handle").first
    low, high, now = (float(handle.get_attribute(a)) for a in
                      ("aria-valuemin", "aria-valuemax", "aria-valuenow"))
    target = low if now != low else high
    readout = slider.locator(".widget-readout").first
    readout.click()
    page.keyboard.press("Control+a")
    page.keyboard.type(f"{target:g}")
    page.keyboard.press("Enter")
    page.wait_for_function(
        "([el, before]) => el.innerHTML !== before",
        arg=[container.element_handle(), before], timeout=60_000, polling=500)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_outputs_render_and_live_widgets_answer_in_jupyterlab(page, lab_url, lab_root,
                                                                        screenshots, path):
    cells = code_cells(path)
    stored_images = _stored_images({"cells": cells})
    _open(page, lab_url, path.name, len(cells))
    assert _drawn_images(page, stored_images) == stored_images, \
        "a figure the notebook stores is not drawn"
    live = cells_to_run(cells, widget_cells(cells))
    _clear_outputs(page)
    try:
        for index in live:
            _run_cell(page, index)
    except Exception:
        page.screenshot(path=screenshots / f"{path.stem}-FAILED.png")
        raise
    _save(page)
    saved = code_cells(lab_root / "notebooks" / path.name)
    ran = [saved[i] for i in live]
    counts = [cell["execution_count"] for cell in ran]
    assert None not in counts and counts == sorted(set(counts)), "a cell did not run once"
    assert [f"{o['ename']}: {o['evalue']}" for cell in ran for o in cell["outputs"]
            if o["output_type"] == "error"] == []
    if page.locator(".widget-slider").count():
        _change_first_slider(page)
    page.screenshot(path=screenshots / f"{path.stem}.png", full_page=False)
    _shut_down_kernel(lab_url, path.name)


def test_the_index_runs_top_to_bottom_in_jupyterlab(page, lab_url, lab_root):
    """Run All, as a Binder visitor's first click does: every cell runs, none fails. (A copy
    of the index, so that its kernel is a fresh one.)"""
    copy = lab_root / "notebooks" / "00_index_run_all.ipynb"
    copy.write_text(NOTEBOOKS[0].read_text())
    _open(page, lab_url, copy.name, len(code_cells(copy)))
    _run_all(page)
    nb = _save_and_read(page, copy)
    counts = [c["execution_count"] for c in nb["cells"] if c["cell_type"] == "code"]
    assert counts == list(range(1, len(counts) + 1)), "not one fresh top-to-bottom run"
    assert _errors_outside_raises_exception_cells(nb) == []
    _shut_down_kernel(lab_url, copy.name)


def test_rise_slideshow_of_the_index_renders_its_first_slide(page, lab_url, screenshots):
    page.goto(f"{lab_url}/rise/notebooks/00_index.ipynb?token={TOKEN}")
    first = page.locator(".reveal .slides section.present").first
    first.wait_for(state="visible", timeout=120_000)
    assert "What Could Go Wrong" in first.inner_text()
    page.screenshot(path=screenshots / "00_index_slideshow.png")


def test_jupyterlab_never_asks_about_news_over_a_notebook(page, lab_url):
    _open(page, lab_url, NOTEBOOKS[0].name)
    page.wait_for_timeout(4000)  # the question would arrive a moment after the lab loads
    assert page.get_by_text("official Jupyter news").count() == 0
