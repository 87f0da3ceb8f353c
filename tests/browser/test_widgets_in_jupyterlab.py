"""The three explorers in a real JupyterLab: controls big enough to drive, a picture that
is not stretched, and a verdict on screen with it."""

import json

import pytest

from .conftest import TOKEN
from .kernel import run_all

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

CELLS = [
    "from talk_helpers.notebook import setup_notebook\nsetup_notebook()",
    "from talk_helpers.lessons.trace import run_loader\n"
    "from talk_helpers.lessons.datasets.basics import WorkerStreams\n"
    "from talk_helpers.widgets.dataloader_steps import step_through\n"
    "step_through(run_loader(WorkerStreams([range(6)] * 2), batch_size=3, num_workers=2),\n"
    "             start=3)",
    "from talk_helpers.widgets.hang_predictor import HangPredictor\n"
    "HangPredictor(num_shards=7)",
    "from talk_helpers.widgets.buffer_shuffle import BufferExplorer\nBufferExplorer()",
]


@pytest.fixture(scope="module")
def widgets_page(browser, lab_url, lab_root):
    notebook = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {},
                           "outputs": [], "source": source} for source in CELLS],
                "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                            "language": "python"}},
                "nbformat": 4, "nbformat_minor": 5}
    (lab_root / "notebooks" / "widgets_check.ipynb").write_text(json.dumps(notebook))
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{lab_url}/lab/workspaces/widgets/tree/notebooks/widgets_check.ipynb"
              f"?reset&token={TOKEN}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
    page.wait_for_function(
        f"() => document.querySelectorAll('.jp-Notebook .jp-CodeCell').length >= {len(CELLS)}",
        timeout=120_000)
    run_all(page, 240_000)
    page.wait_for_selector("img.widget-image", timeout=240_000)
    page.wait_for_function("() => document.querySelectorAll('.widget-slider').length >= 10",
                           timeout=240_000)
    yield page
    context.close()


def _output(page, index):
    return page.locator(".jp-Notebook .jp-CodeCell").nth(index).locator(".jp-OutputArea-output")


def test_every_slider_track_is_at_least_250_px_wide(widgets_page):
    widths = widgets_page.evaluate(
        "() => [...document.querySelectorAll('.widget-slider .noUi-target')]"
        ".map(t => t.getBoundingClientRect().width)")
    assert len(widths) >= 10
    assert min(widths) >= 250, widths


def test_step_buttons_move_the_step_through_one_step(widgets_page, screenshots):
    out = _output(widgets_page, 1)
    assert "Step 3 of" in out.inner_text()
    out.get_by_role("button", name="▶").click()
    widgets_page.wait_for_function(
        "el => el.innerText.includes('Step 4 of')", arg=out.element_handle(), timeout=10_000)
    out.get_by_role("button", name="◀").click()
    out.get_by_role("button", name="◀").click()
    widgets_page.wait_for_function(
        "el => el.innerText.includes('Step 2 of')", arg=out.element_handle(), timeout=10_000)
    assert "_InfiniteConstantSampler" in out.inner_text()
    out.scroll_into_view_if_needed()
    out.screenshot(path=screenshots / "widget_step_through.png")


def test_the_hang_table_is_bordered_and_names_one_rank(widgets_page, screenshots):
    out = _output(widgets_page, 2)
    border = out.locator("table td").first.evaluate("td => getComputedStyle(td).borderTopStyle")
    assert border == "solid"
    assert "rank 0 waits" in out.inner_text()
    out.scroll_into_view_if_needed()
    out.screenshot(path=screenshots / "widget_hang_predictor.png")


def test_the_buffer_picture_is_not_stretched_and_sits_with_its_verdict(widgets_page,
                                                                        screenshots):
    out = _output(widgets_page, 3)
    image = out.locator(".widget-image").first
    natural, shown = image.evaluate("img => [img.naturalWidth, img.getBoundingClientRect().width]")
    assert 0 < shown <= natural
    out.scroll_into_view_if_needed()
    verdict = out.locator(".widget-html", has_text="shuffle").first.bounding_box()
    picture = image.bounding_box()
    viewport = widgets_page.viewport_size
    for box in (verdict, picture):
        assert box["y"] >= -1 and box["y"] + box["height"] <= viewport["height"] + 1, box
    out.screenshot(path=screenshots / "widget_buffer_explorer.png")
