"""Every state of every self-study deck (notebooks 00-11), stepped through at 1280x720 the
way a speaker presses Space: each must fit the screen by every visible element, keep code
at 18 px or more (split, never shrunk), show no widget repr or broken image, log no error
and load nothing from off the machine. The talk has its own test (test_talk_in_browser.py).
One test per deck, so that a failure names its deck and a slow machine's time is counted
deck by deck.
"""

import pytest

from tests.browser.slide_walk import ROOT, Watch, build_slides, reveal_next, walk

FLOORS = build_slides.FLOORS["deck"]
NUMBERED = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="module")
def slides_dir(tmp_path_factory):
    if not build_slides.CHROMIUM.exists():
        pytest.skip("!!! /usr/bin/chromium is missing: deck tests SKIPPED !!!")
    out = tmp_path_factory.mktemp("slides")
    vendor = ROOT / "build/slides/vendor"
    if vendor.is_dir():  # reuse the vendored assets instead of asking npm again
        (out / "vendor").symlink_to(vendor)
    return out


# Fitting measures a deck in Chromium up to a dozen times: minutes for a long deck on a
# busy 2-core machine.
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("notebook", NUMBERED, ids=lambda path: path.stem)
def test_every_state_of_the_deck_fits_the_screen_with_code_of_18_px(notebook, slides_dir,
                                                                      browser):
    (deck,) = build_slides.build_all(slides_dir, notebooks=[notebook], browser=browser)
    page = browser.new_page(viewport={"width": build_slides.WIDTH,
                                      "height": build_slides.HEIGHT})
    watch = Watch(page)
    page.goto(deck.resolve().as_uri())
    page.wait_for_function("() => window.Reveal && Reveal.isReady && Reveal.isReady()")
    _, found = walk(page, FLOORS, reveal_next)
    page.close()
    problems = found + watch.problems
    assert not problems, "\n".join(problems)


def test_no_deck_asks_to_move_sliders_over_a_still(tmp_path):
    """A widget's still has no sliders: the text above it says they live in the notebook."""
    vendor = ROOT / "build/slides/vendor"
    if vendor.is_dir():
        (tmp_path / "vendor").symlink_to(vendor)
    decks = build_slides.build_all(tmp_path, fit=False, notebooks=NUMBERED)
    said = [deck.name for deck in decks if "Move the slider" in deck.read_text()]
    assert said == []
