"""Every state of every deck, stepped through at 1280x720 the way a speaker presses Space."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("build_slides", ROOT / "scripts/build_slides.py")
build_slides = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_slides)

STATE_PROBLEMS_JS = """() => {
  const slide = Reveal.getCurrentSlide();
  const problems = [];
  if (slide.scrollHeight > 720) problems.push(`taller than the screen: ${slide.scrollHeight}px`);
  for (const block of slide.querySelectorAll('pre, code')) {
    if (block.scrollWidth > block.clientWidth + 1 && block.clientWidth > 0)
      problems.push(`cut on the right: ${block.textContent.slice(0, 60)}`);
  }
  for (const img of slide.querySelectorAll('img')) {
    if (img.complete && img.naturalWidth === 0) problems.push(`broken image: ${img.src}`);
  }
  const text = slide.innerText;
  for (const repr of ['(children=(', 'Widget(', 'HBox(', 'VBox(']) {
    if (text.includes(repr)) problems.push(`widget repr: ${repr}`);
  }
  return problems;
}"""


@pytest.fixture(scope="session")
def decks(tmp_path_factory):
    if not build_slides.CHROMIUM.exists():
        pytest.skip("!!! /usr/bin/chromium is missing: deck tests SKIPPED !!!")
    out = tmp_path_factory.mktemp("slides")
    vendor = ROOT / "build/slides/vendor"
    if vendor.is_dir():  # reuse the vendored assets instead of asking npm again
        (out / "vendor").symlink_to(vendor)
    return build_slides.build_all(out)


def deck_problems(page) -> list[str]:
    """Step through every state (fragments included) and list what does not fit."""
    problems, state = [], 0
    while True:
        indices = page.evaluate("() => JSON.stringify(Reveal.getIndices())")
        page.wait_for_timeout(30)
        problems += [f"state {state} {indices}: {p}" for p in page.evaluate(STATE_PROBLEMS_JS)]
        if page.evaluate("() => Reveal.isLastSlide() && !Reveal.availableFragments().next"):
            return problems
        page.evaluate("() => Reveal.next()")
        state += 1
        if state > 2000:
            return problems + ["never reached the last slide"]


def test_every_state_of_every_deck_fits_the_screen_and_shows_no_repr(decks, browser):
    problems = []
    for deck in decks:
        page = build_slides.open_deck(browser, deck)
        problems += [f"{deck.name} {p}" for p in deck_problems(page)]
        page.close()
    assert not problems, "\n".join(problems)
