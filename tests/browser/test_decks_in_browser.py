"""Every state of every self-study deck (notebooks 00-11), stepped through at 1280x720 the
way a speaker presses Space: each must fit the screen by every visible element, keep code
at 18 px or more (split, never shrunk), show no widget repr or broken image, log no error
and load nothing from off the machine. The talk has its own test (test_talk_in_browser.py).
"""

import pytest

from tests.browser.slide_walk import ROOT, Watch, build_slides, reveal_next, walk

FLOORS = build_slides.FLOORS["deck"]


@pytest.fixture(scope="session")
def decks(tmp_path_factory, browser):
    if not build_slides.CHROMIUM.exists():
        pytest.skip("!!! /usr/bin/chromium is missing: deck tests SKIPPED !!!")
    out = tmp_path_factory.mktemp("slides")
    vendor = ROOT / "build/slides/vendor"
    if vendor.is_dir():  # reuse the vendored assets instead of asking npm again
        (out / "vendor").symlink_to(vendor)
    numbered = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    return build_slides.build_all(out, notebooks=numbered, browser=browser)


def test_every_state_of_every_deck_fits_the_screen_with_code_of_18_px(decks, browser):
    problems = []
    for deck in decks:
        page = browser.new_page(viewport={"width": build_slides.WIDTH,
                                          "height": build_slides.HEIGHT})
        watch = Watch(page)
        page.goto(deck.resolve().as_uri())
        page.wait_for_function("() => window.Reveal && Reveal.isReady && Reveal.isReady()")
        _, found = walk(page, FLOORS, reveal_next)
        problems += [f"{deck.name} {p}" for p in found + watch.problems]
        page.close()
    assert not problems, "\n".join(problems)


def test_no_deck_asks_to_move_sliders_over_a_still(decks):
    """A widget's still has no sliders: the text above it says they live in the notebook."""
    said = [deck.name for deck in decks if "Move the slider" in deck.read_text()]
    assert said == []
