"""Stepping through a slide show the way a speaker does (one Space press per state) and
judging every state with the same probe that fits the decks (scripts/slides_template/probe.js).

Used by test_decks_in_browser.py (every offline deck) and test_talk_in_browser.py (the talk,
offline and in RISE)."""

import importlib.util
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("build_slides", ROOT / "scripts/build_slides.py")
build_slides = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_slides)

WIDTH, HEIGHT = build_slides.WIDTH, build_slides.HEIGHT
LOCAL_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}
WIDGET_REPRS = ("(children=(", "Widget(", "HBox(", "VBox(")
MAX_STATES = 2000

STATE_JS = """() => {
  const leaf = [...document.querySelectorAll('.reveal .slides section.present')]
    .filter((s) => !s.querySelector('section'))[0];
  const shown = leaf ? leaf.querySelectorAll('.fragment.visible').length : -1;
  const text = leaf ? leaf.innerText : '';
  const broken = leaf ? [...leaf.querySelectorAll('img')]
    .filter((img) => img.complete && img.naturalWidth === 0).map((img) => img.src) : [];
  const where = leaf ? leaf.id || [...document.querySelectorAll('section')].indexOf(leaf) : '';
  return {key: `${where}:${shown}`, text, broken};
}"""


class Watch:
    """Console errors, uncaught exceptions and requests that leave the machine."""

    def __init__(self, page):
        self.problems: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        page.on("request", self._request)

    def _console(self, message) -> None:
        if message.type == "error":
            self.problems.append(f"console error: {message.text[:200]}")

    def _request(self, request) -> None:
        url = urlparse(request.url)
        if url.scheme in ("file", "data", "blob", "about") or url.hostname in LOCAL_HOSTS:
            return
        self.problems.append(f"request off the machine: {request.url[:120]}")


def state_problems(page, floors: dict) -> list[str]:
    """What is wrong with the state on screen: the probe's findings, a widget's repr, a
    broken image."""
    found = build_slides.probe_state(page, floors)["problems"]
    state = page.evaluate(STATE_JS)
    found += [f"widget repr: {r}" for r in WIDGET_REPRS if r in state["text"]]
    found += [f"broken image: {src}" for src in state["broken"]]
    return found


def walk(page, floors: dict, advance, shots: Path | None = None) -> tuple[int, list[str]]:
    """Judge every state from the one on screen to the last; ADVANCE(page) moves one
    state on. Returns the number of states and the problems, each named by its state.
    With SHOTS, saves state-NN.png there."""
    problems, states, seen = [], 0, set()
    while states < MAX_STATES:
        page.wait_for_timeout(20)
        state = page.evaluate(STATE_JS)
        if state["key"] in seen:
            return states, problems
        seen.add(state["key"])
        states += 1
        if shots is not None:
            page.screenshot(path=str(shots / f"state-{states:02d}.png"))
        problems += [f"state {states}: {p}" for p in state_problems(page, floors)]
        advance(page)
    return states, problems + ["never reached the last state"]


def reveal_next(page) -> None:
    """Space, in an offline deck: the next fragment or slide."""
    page.evaluate("() => Reveal.next()")
