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


# What the talk holds itself to on every state, beyond the probe: speaker notes with a time
# mark on every slide, syntax colouring on every code cell, no cell magic on screen, no
# navigation arrows over the slide, no output shown twice.
TALK_STATE_JS = """() => {
  const leaf = [...document.querySelectorAll('.reveal .slides section.present')]
    .filter((s) => !s.querySelector('section'))[0];
  if (!leaf) return ['no slide is shown'];
  const shown = (el) => {
    const r = el.getBoundingClientRect();
    for (let a = el; a && a !== leaf; a = a.parentElement) {
      const s = getComputedStyle(a);
      if (s.display === 'none' || s.visibility === 'hidden' || parseFloat(s.opacity) === 0)
        return false;
    }
    return r.width > 0 && r.height > 0;
  };
  const snippet = (el) => el.textContent.trim().replace(/\\s+/g, ' ').slice(0, 50);
  const problems = [];
  const notes = leaf.querySelector('aside.notes');
  if (!notes || !/\\b\\d+:\\d\\d\\b/.test(notes.textContent))
    problems.push('no speaker notes with a time mark');
  for (const input of leaf.querySelectorAll('.jp-CodeCell .jp-InputArea')) {
    if (!shown(input)) continue;
    const code = input.querySelector('.cm-content, pre');
    if (!code || !code.textContent.trim()) continue;
    const plain = getComputedStyle(code).color;
    const coloured = [...code.querySelectorAll('span')]
      .some((span) => span.textContent.trim() && getComputedStyle(span).color !== plain);
    // Code with a keyword, a number or a string has something to colour; a bare call
    // such as `f(x)` may rightly have nothing.
    const keywords = /\\b(def|class|import|from|return|for|if|yield|try|with|True|None)\\b/;
    const colourable = keywords.test(code.textContent) || /\\d|["'=#]/.test(code.textContent);
    if (colourable && !coloured) problems.push(`code without syntax colouring: ${snippet(code)}`);
    if (/^\\s*%%/.test(code.textContent)) problems.push(`a cell magic on screen: ${snippet(code)}`);
  }
  const controls = document.querySelector('.reveal .controls');
  if (controls && getComputedStyle(controls).display !== 'none') {
    const c = controls.getBoundingClientRect();
    const covered = [...leaf.querySelectorAll('.jp-Cell *')].filter(shown).some((el) => {
      const r = el.getBoundingClientRect();
      return r.left < c.right && r.right > c.left && r.top < c.bottom && r.bottom > c.top;
    });
    if (c.width > 0 && covered) problems.push('the navigation arrows cover the slide');
  }
  const outputs = [...leaf.querySelectorAll('.jp-OutputArea-output')].filter(shown)
    .map((o) => o.textContent.trim().replace(/\\s+/g, ' ')).filter(Boolean);
  const twice = outputs.filter((text, k) => outputs.indexOf(text) !== k);
  for (const text of new Set(twice)) problems.push(`an output shown twice: ${text.slice(0, 50)}`);
  return problems;
}"""


def talk_state_problems(page) -> list[str]:
    """The talk's own rules for the state on screen (TALK_STATE_JS)."""
    return page.evaluate(TALK_STATE_JS)


def walk(page, floors: dict, advance, shots: Path | None = None,
         extra=None) -> tuple[int, list[str]]:
    """Judge every state from the one on screen to the last; ADVANCE(page) moves one
    state on. Returns the number of states and the problems, each named by its state.
    With SHOTS, saves state-NN.png there; EXTRA(page) adds problems of its own."""
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
        found = state_problems(page, floors) + (extra(page) if extra is not None else [])
        problems += [f"state {states}: {p}" for p in found]
        advance(page)
    return states, problems + ["never reached the last state"]


def reveal_next(page) -> None:
    """Space, in an offline deck: the next fragment or slide."""
    page.evaluate("() => Reveal.next()")
