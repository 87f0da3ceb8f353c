"""The talk, as a speaker gives it, at 1280x720: the offline deck of `make slides` and the
same notebook in RISE as `make talk` opens it.

* Walked state by state (Space): every state fits the screen, keeps its text above the
  floors of the back of the room (code 24 px, prose 28 px, output 20 px, figure text
  18 px), has speaker notes with a time mark, colours its code, shows no cell magic and no
  output twice; the whole talk loads nothing from off the machine, logs no error and shows
  at least four figures drawn from runs.
* Run live: RISE on a fresh kernel, Shift+Enter on every cell in order from the first
  slide (whose cell starts the talk's set-up), gives the stored outputs.

Screenshots of every state land in tests/browser/screenshots/talk/.
"""

import configparser
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

import nbformat
import pytest

from tests.browser.conftest import (
    CHROMIUM,
    SCREENSHOTS,
    TOKEN,
    _write_settings,
    start_lab,
    stop_lab,
)
from tests.browser.slide_walk import (
    ROOT,
    Watch,
    build_slides,
    reveal_next,
    talk_state_problems,
    walk,
)

FLOORS = build_slides.FLOORS["talk"]
MIN_SLIDES, MAX_SLIDES = 25, 45
MIN_FIGURES = 4
TALK = ROOT / "notebooks" / "talk.ipynb"
# The talk as written: every slide is one the speaker made, with its own notes; the
# fitter, which would split a slide too tall, leaves it alone.
AUTHORED_SLIDES = sum(build_slides.slide_type(cell) in ("slide", "subslide")
                      for cell in nbformat.read(TALK, as_version=4).cells)
# A figure drawn from a run: an SVG image with text in it (the QR code has none).
FIGURES_JS = """() => {
  const svgText = (src) => {
    const body = src.slice(src.indexOf(',') + 1);
    return src.includes(';base64,') ? atob(body) : decodeURIComponent(body);
  };
  return [...document.querySelectorAll('.jp-OutputArea img, .jp-OutputArea svg')]
    .filter((el) => el.tagName.toLowerCase() === 'svg' ? !!el.querySelector('text')
      : (el.getAttribute('src') || '').startsWith('data:image/svg+xml')
        && /<text/.test(svgText(el.getAttribute('src')))).length;
}"""
SLIDES_JS = """() => [...document.querySelectorAll('.reveal .slides section')]
  .filter((s) => !s.querySelector('section')).length"""


def shots(name: str):
    folder = SCREENSHOTS / "talk" / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


@pytest.fixture(scope="module")
def talk_deck(tmp_path_factory, browser):
    if not CHROMIUM.exists():
        pytest.skip("!!! /usr/bin/chromium is missing: talk tests SKIPPED !!!")
    out = tmp_path_factory.mktemp("slides")
    vendor = ROOT / "build/slides/vendor"
    if vendor.is_dir():  # reuse the vendored assets instead of asking npm again
        (out / "vendor").symlink_to(vendor)
    (deck,) = build_slides.build_all(out, notebooks=[TALK], browser=browser)
    return deck


def test_the_offline_talk_fits_the_back_of_the_room_in_25_to_45_slides(talk_deck, browser):
    page = browser.new_page(viewport={"width": build_slides.WIDTH,
                                      "height": build_slides.HEIGHT})
    watch = Watch(page)
    page.goto(talk_deck.resolve().as_uri())
    page.wait_for_function("() => window.Reveal && Reveal.isReady && Reveal.isReady()")
    page.evaluate("() => document.fonts.ready")
    slides, figures = page.evaluate(SLIDES_JS), page.evaluate(FIGURES_JS)
    _, problems = walk(page, FLOORS, reveal_next, shots("deck"), extra=talk_state_problems)
    page.close()
    problems += watch.problems
    assert MIN_SLIDES <= slides <= MAX_SLIDES, f"{slides} slides"
    assert slides == AUTHORED_SLIDES, "the fitter had to split a slide of the talk"
    assert figures >= MIN_FIGURES, f"{figures} figures drawn from runs"
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="module")
def rise_talk(tmp_path_factory, browser):
    """A JupyterLab server on a copy of the project whose talk `make talk` would show:
    fitted by scripts/fit_talk.py, trusted (so that its stored outputs render), and RISE
    started with no lab extension, as the Makefile's RISE_FLAGS do. Yields (the talk's
    RISE address, the server's address)."""
    if not CHROMIUM.exists():
        pytest.skip("!!! /usr/bin/chromium is missing: talk tests SKIPPED !!!")
    root = tmp_path_factory.mktemp("rise")
    shutil.copytree(ROOT / "notebooks", root / "notebooks")
    if (ROOT / "imgs").exists():
        shutil.copytree(ROOT / "imgs", root / "imgs")
    env = dict(os.environ, JUPYTER_DATA_DIR=str(root / "data"),
               JUPYTERLAB_SETTINGS_DIR=str(root / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(root / "workspaces"),
               JUPYTER_CONFIG_DIR=str(root / "config"), JUPYTER_RUNTIME_DIR=str(root / "runtime"))
    talk = root / "notebooks" / "talk.ipynb"
    subprocess.run([sys.executable, str(ROOT / "scripts/fit_talk.py"), str(talk)], check=True,
                   env=env, stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-m", "jupyter", "trust", str(talk)], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _write_settings(root / "settings")
    no_extensions = root / "no-extensions"
    no_extensions.mkdir()
    server, url = start_lab(root, env, [f"--RiseApp.labextensions_path={no_extensions}"])
    yield f"{url}/rise/notebooks/talk.ipynb?token={TOKEN}", url
    stop_lab(server)


def open_rise(browser, address: str):
    """A page showing the talk in RISE, laid out; and its watch (errors, requests)."""
    context = browser.new_context(viewport={"width": build_slides.WIDTH,
                                            "height": build_slides.HEIGHT})
    page = context.new_page()
    page.set_default_timeout(60_000)
    watch = Watch(page)
    page.goto(address)
    page.wait_for_selector(".reveal .slides section.present .jp-Cell", timeout=120_000)
    page.wait_for_timeout(2500)  # RISE lays the slides out, then syncs once more
    page.evaluate("() => document.fonts.ready")
    page.locator(".jp-Notebook").first.focus()
    return context, page, watch


def space(page) -> None:
    """Space, in RISE: the next fragment or slide."""
    page.keyboard.press("Space")
    page.wait_for_timeout(60)


@pytest.fixture(scope="module")
def rise_walk(rise_talk, browser):
    """Every state of the talk in RISE: (slides, figures, problems of the states, console
    errors and requests off the machine)."""
    context, page, watch = open_rise(browser, rise_talk[0])
    slides, figures = page.evaluate(SLIDES_JS), page.evaluate(FIGURES_JS)
    _, problems = walk(page, FLOORS, space, shots("rise"), extra=talk_state_problems)
    context.close()
    return slides, figures, problems, watch.problems


def test_the_talk_in_rise_keeps_the_same_floors_and_fits(rise_walk):
    slides, figures, problems, _ = rise_walk
    assert MIN_SLIDES <= slides <= MAX_SLIDES, f"{slides} slides"
    assert figures >= MIN_FIGURES, f"{figures} figures drawn from runs"
    assert not problems, "\n".join(problems)


def test_the_talk_in_rise_logs_no_error_and_stays_on_the_machine(rise_walk):
    *_, logged = rise_walk
    assert not logged, "\n".join(logged)


# --- run live: Shift+Enter on every cell of a fresh kernel ------------------------------

# Per cell of the notebook as RISE shows it: code or not, its prompt, what its outputs say
# and the images they show.
CELLS_JS = """() => {
  const words = (el) => {  // every text node, apart: a table's cells never run together
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    const parts = [];
    while (walker.nextNode()) parts.push(walker.currentNode.textContent);
    return parts.join(' ').replace(/\\s+/g, ' ').trim();
  };
  return [...document.querySelectorAll('.jp-Notebook .jp-Cell')].map((cell) => ({
    code: cell.classList.contains('jp-CodeCell'),
    prompt: ((cell.querySelector('.jp-InputPrompt') || {}).textContent || '').trim(),
    text: [...cell.querySelectorAll('.jp-OutputArea-output')].map(words).join(' | '),
    images: [...cell.querySelectorAll('.jp-OutputArea-output img')].map((i) => i.src),
  }));
}"""
ACTIVE_JS = """() => [...document.querySelectorAll('.jp-Notebook .jp-Cell')]
  .indexOf(document.querySelector('.jp-Notebook .jp-Cell.jp-mod-active'))"""
BUSY_JS = """() => [...document.querySelectorAll('.jp-Notebook .jp-InputPrompt')]
  .some((p) => p.textContent.includes('*'))"""
# Records every cell whose prompt showed [*] (it ran), from now on.
RAN_JS = """() => {
  window.talkRan = new Set();
  const cells = [...document.querySelectorAll('.jp-Notebook .jp-Cell')];
  new MutationObserver(() => cells.forEach((cell, k) => {
    const prompt = cell.querySelector('.jp-InputPrompt');
    if (prompt && prompt.textContent.includes('*')) window.talkRan.add(k);
  })).observe(document.querySelector('.jp-Notebook'),
              {subtree: true, childList: true, characterData: true});
}"""
PAUSE_MS = 500  # between two presses: a speaker's pace, not a race with RISE's slide change
CELL_TIMEOUT_S = 120


def sanitize(text: str) -> str:
    """The notebook's own sanitizing (timings, pids, ports), as nbval applies it."""
    config = configparser.ConfigParser()
    config.read(ROOT / "notebooks" / "sanitize.cfg")
    for section in config.sections():
        text = re.sub(config[section]["regex"], config[section]["replace"], text)
    return text


def shut_down_kernels(base_url: str) -> None:
    """Stop every kernel of the server: the next page starts the talk on a fresh one."""
    with urllib.request.urlopen(f"{base_url}/api/sessions?token={TOKEN}") as answer:
        sessions = json.load(answer)
    for session in sessions:
        request = urllib.request.Request(
            f"{base_url}/api/sessions/{session['id']}?token={TOKEN}", method="DELETE")
        urllib.request.urlopen(request).close()


@pytest.mark.timeout(900)
def test_shift_enter_on_every_cell_from_a_fresh_kernel_gives_the_stored_outputs(
        rise_talk, browser):
    shut_down_kernels(rise_talk[1])
    context, page, watch = open_rise(browser, rise_talk[0])
    stored = page.evaluate(CELLS_JS)
    page.evaluate(RAN_JS)
    last, presses = len(stored) - 1, 0
    while page.evaluate(ACTIVE_JS) < last and presses < 3 * len(stored):
        page.keyboard.press("Shift+Enter")
        presses += 1
        page.wait_for_timeout(PAUSE_MS)
        deadline = time.monotonic() + CELL_TIMEOUT_S
        while page.evaluate(BUSY_JS):
            assert time.monotonic() < deadline, f"a cell ran over {CELL_TIMEOUT_S} s"
            page.wait_for_timeout(100)
    live = page.evaluate(CELLS_JS)
    ran = page.evaluate("() => [...window.talkRan].sort((a, b) => a - b)")
    page.screenshot(path=str(shots("rise-live") / "last.png"))
    context.close()

    assert len(live) == len(stored), "cells were added or removed while running"
    code = [k for k, cell in enumerate(stored) if cell["code"]]
    assert ran == code, f"cells that ran: {ran}; code cells: {code}"
    assert [live[k]["prompt"] for k in code] == [f"[{n}]:" for n in range(1, len(code) + 1)], \
        "not every code cell ran exactly once, in order"
    differ = [f"cell {k}: stored {sanitize(stored[k]['text'])[:200]!r}\n"
              f"      live   {sanitize(live[k]['text'])[:200]!r}"
              for k in code if sanitize(stored[k]["text"]) != sanitize(live[k]["text"])]
    differ += [f"cell {k}: its figure differs from the stored one"
               for k in code if stored[k]["images"] != live[k]["images"]]
    assert not differ, "\n".join(differ)
    assert not watch.problems, "\n".join(watch.problems)
