"""The talk, walked state by state at 1280x720 as a speaker presents it: the offline deck of
`make slides` and the same notebook in RISE as `make talk` opens it. Every state must fit
the screen, keep its text above the floors of the back of the room (code 24 px, prose
28 px, output 20 px, figure text 18 px), and the whole talk must load nothing from off the
machine and log no error. Screenshots of every state land in tests/browser/screenshots/talk/.
"""

import shutil

import pytest

from tests.browser.conftest import CHROMIUM, SCREENSHOTS
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
