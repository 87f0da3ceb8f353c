"""Each notebook, run top to bottom in a real JupyterLab, as a learner would."""

import json
import re
from pathlib import Path

import pytest

from .conftest import ROOT, TOKEN

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
RUN_TIMEOUT_MS = 420_000


def _open(page, lab_url: str, name: str) -> None:
    """Open a notebook in a clean, single-use workspace."""
    stem = Path(name).stem
    page.goto(f"{lab_url}/lab/workspaces/{stem}/tree/notebooks/{name}?reset&token={TOKEN}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    page.wait_for_function(
        "() => document.querySelector('.jp-Notebook-ExecutionIndicator')"
        "?.getAttribute('data-status') === 'idle'", timeout=120_000)


def _menu(page, menu: str, command: str) -> None:
    page.locator(".jp-Notebook .jp-Cell").first.click()  # menus act on the active notebook
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{menu}$")).click()
    page.locator(f"li[data-command='{command}']").click()


def _run_all(page) -> None:
    """Clear the stored outputs, then run every cell in the fresh kernel."""
    _menu(page, "Edit", "editmenu:clear-all")
    page.wait_for_function(
        "() => [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputArea-prompt')]"
        ".every(p => !/\\d/.test(p.textContent))", timeout=30_000)
    _menu(page, "Run", "runmenu:run-all")
    # Every code cell shows an execution count and the kernel is idle again.
    page.wait_for_function(
        """() => {
            const prompts = [...document.querySelectorAll(
                '.jp-Notebook .jp-CodeCell .jp-InputArea-prompt')].map(p => p.textContent);
            const idle = document.querySelector('.jp-Notebook-ExecutionIndicator')
                ?.getAttribute('data-status') === 'idle';
            return idle && prompts.length > 0 && prompts.every(t => /\\[\\d+\\]/.test(t));
        }""", timeout=RUN_TIMEOUT_MS, polling=1000)


def _save_and_read(page, lab_root_copy: Path) -> dict:
    page.keyboard.press("Control+s")
    page.wait_for_timeout(1500)
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
    """Outputs a reader sees as a picture: a PNG that is not the fallback of a live widget."""
    return sum(1 for cell in nb["cells"] if cell["cell_type"] == "code"
               for out in cell.get("outputs", [])
               if "image/png" in out.get("data", {})
               and "application/vnd.jupyter.widget-view+json" not in out["data"])


def _drawn_images(page) -> int:
    """Pictures JupyterLab drew in output areas (loaded, not broken), leaving out those a
    live widget draws inside itself (a static reader sees the widget's text instead)."""
    return page.evaluate(
        "() => [...document.querySelectorAll('.jp-Notebook .jp-OutputArea-output img')]"
        ".filter(img => img.complete && img.naturalWidth > 0"
        " && !img.closest('.jupyter-widgets, [class*=\"widget-\"]')).length")


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
def test_notebook_runs_top_to_bottom_without_errors(page, lab_url, lab_root, screenshots, path):
    stored_images = _stored_images(json.loads(path.read_text()))
    _open(page, lab_url, path.name)
    try:
        _run_all(page)
    except Exception:
        page.screenshot(path=screenshots / f"{path.stem}-FAILED.png")
        raise
    nb = _save_and_read(page, lab_root / "notebooks" / path.name)
    counts = [c["execution_count"] for c in nb["cells"] if c["cell_type"] == "code"]
    assert counts == list(range(1, len(counts) + 1)), "not one fresh top-to-bottom run"
    assert _errors_outside_raises_exception_cells(nb) == []
    assert _drawn_images(page) == stored_images, "a figure the notebook stores is not drawn"
    if page.locator(".widget-slider").count():
        _change_first_slider(page)
    page.screenshot(path=screenshots / f"{path.stem}.png", full_page=False)


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
