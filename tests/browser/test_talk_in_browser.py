"""The talk, walked state by state at 1280x720 as a speaker presents it: the offline deck of
`make slides` and the same notebook in RISE as `make talk` opens it. Every state must fit
the screen, keep its text above the floors of the back of the room (code 24 px, prose
28 px, output 20 px, figure text 18 px), and the whole talk must load nothing from off the
machine and log no error. Screenshots of every state land in tests/browser/screenshots/talk/.
"""

import os
import shutil
import subprocess
import sys

import pytest

from tests.browser.conftest import (
    CHROMIUM,
    SCREENSHOTS,
    TOKEN,
    _write_settings,
    start_lab,
    stop_lab,
)
from tests.browser.slide_walk import ROOT, Watch, build_slides, reveal_next, walk

FLOORS = build_slides.FLOORS["talk"]
MIN_STATES, MAX_STATES = 25, 45
TALK = ROOT / "notebooks" / "talk.ipynb"


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


def test_the_offline_talk_fits_the_back_of_the_room_in_25_to_45_states(talk_deck, browser):
    page = browser.new_page(viewport={"width": build_slides.WIDTH,
                                      "height": build_slides.HEIGHT})
    watch = Watch(page)
    page.goto(talk_deck.resolve().as_uri())
    page.wait_for_function("() => window.Reveal && Reveal.isReady && Reveal.isReady()")
    page.evaluate("() => document.fonts.ready")
    states, problems = walk(page, FLOORS, reveal_next, shots("deck"))
    page.close()
    problems += watch.problems
    assert MIN_STATES <= states <= MAX_STATES, f"{states} states"
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="module")
def rise_talk(tmp_path_factory, browser):
    """A JupyterLab server on a copy of the project whose talk `make talk` would show:
    fitted by scripts/fit_talk.py, trusted (so that its stored outputs render), and RISE
    started with no lab extension, as the Makefile's RISE_FLAGS do."""
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
    yield f"{url}/rise/notebooks/talk.ipynb?token={TOKEN}"
    stop_lab(server)


def space(page) -> None:
    """Space, in RISE: the next fragment or slide."""
    page.keyboard.press("Space")
    page.wait_for_timeout(60)


@pytest.fixture(scope="module")
def rise_walk(rise_talk, browser):
    """Every state of the talk in RISE: (number of states, problems of the states, console
    errors and requests off the machine)."""
    context = browser.new_context(viewport={"width": build_slides.WIDTH,
                                            "height": build_slides.HEIGHT})
    page = context.new_page()
    watch = Watch(page)
    page.goto(rise_talk)
    page.wait_for_selector(".reveal .slides section.present .jp-Cell", timeout=120_000)
    page.wait_for_timeout(2500)  # RISE lays the slides out, then syncs once more
    page.evaluate("() => document.fonts.ready")
    page.locator(".jp-Notebook").first.focus()
    states, problems = walk(page, FLOORS, space, shots("rise"))
    context.close()
    return states, problems, watch.problems


def test_the_talk_in_rise_keeps_the_same_floors_and_fits(rise_walk):
    states, problems, _ = rise_walk
    assert MIN_STATES <= states <= MAX_STATES, f"{states} states"
    assert not problems, "\n".join(problems)


def test_the_talk_in_rise_logs_no_error_and_stays_on_the_machine(rise_walk):
    _, _, logged = rise_walk
    assert not logged, "\n".join(logged)
