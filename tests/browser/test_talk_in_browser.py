"""The talk, as a speaker gives it, at 1280x720: the offline deck of `make slides` and the
same notebook in RISE as `make talk` opens it.

* Walked state by state (Space): every state fits the screen, keeps its text above the
  floors of the back of the room (no text under 24 px: code, output and figure text
  24 px, prose 28 px), has speaker notes with a time mark, colours its code, shows no
  cell magic and no output twice; the whole talk loads nothing from off the machine, logs
  no error and shows at least four figures drawn from runs. RISE's copy holds no stored
  outputs.
* Run live, one key per step: RISE on a fresh kernel, Shift+Enter alone from the first
  slide (whose cell starts the talk's set-up) to the last runs every code cell once, in
  order; each result appears on screen after the press that ran it, never before, within
  the same floors; a sign shows while a cell runs.

Screenshots of every state land in tests/browser/screenshots/talk/.
"""

import json
import os
import shutil
import subprocess
import sys
import urllib.request

import nbformat
import pytest

from talk_helpers.runtime.start_cost import time_limit_s
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
    fitted by scripts/fit_talk.py (no stored outputs), trusted, RISE started with the
    talk's steps as its only lab extension and kernels with the talk's start-up file, as
    the Makefile's RISE_FLAGS and IPYTHONDIR do. Yields (the talk's RISE address, the
    server's address)."""
    if not CHROMIUM.exists():
        pytest.skip("!!! /usr/bin/chromium is missing: talk tests SKIPPED !!!")
    root = tmp_path_factory.mktemp("rise")
    shutil.copytree(ROOT / "notebooks", root / "notebooks")
    if (ROOT / "imgs").exists():
        shutil.copytree(ROOT / "imgs", root / "imgs")
    env = dict(os.environ, JUPYTER_DATA_DIR=str(root / "data"),
               JUPYTERLAB_SETTINGS_DIR=str(root / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(root / "workspaces"),
               JUPYTER_CONFIG_DIR=str(root / "config"), JUPYTER_RUNTIME_DIR=str(root / "runtime"),
               IPYTHONDIR=str(root / "ipython"))
    shutil.copytree(build_slides.TEMPLATES / "ipython", root / "ipython")
    talk = root / "notebooks" / "talk.ipynb"
    subprocess.run([sys.executable, str(ROOT / "scripts/fit_talk.py"), str(talk)], check=True,
                   env=env, stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-m", "jupyter", "trust", str(talk)], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _write_settings(root / "settings")
    extensions = root / "extensions"
    shutil.copytree(build_slides.TEMPLATES / "rise-extension", extensions)
    server, url = start_lab(root, env, [f"--RiseApp.labextensions_path={extensions}",
                                        f"--LabApp.extra_labextensions_path={extensions}"])
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


def test_the_talk_in_rise_keeps_the_same_floors_fits_and_shows_no_answer_before_its_run(
        rise_walk):
    slides, figures, problems, _ = rise_walk
    assert MIN_SLIDES <= slides <= MAX_SLIDES, f"{slides} slides"
    assert figures == 0, f"{figures} figures shown before any cell ran"
    assert not problems, "\n".join(problems)


def test_the_talk_in_rise_logs_no_error_and_stays_on_the_machine(rise_walk):
    *_, logged = rise_walk
    assert not logged, "\n".join(logged)


# --- run live, one key per step: Shift+Enter alone, from a fresh kernel -----------------

# Per cell of the notebook as RISE shows it: code or not, its prompt, and whether an output
# of it is on screen: inside the window, on the slide shown, and neither it nor anything
# around it hidden (a fragment not shown yet is transparent and hidden).
CELLS_JS = """() => {
  const onScreen = (el) => {
    const r = el.getBoundingClientRect();
    if (r.width <= 0 || r.height <= 0 || r.bottom <= 0 || r.top >= window.innerHeight
        || r.right <= 0 || r.left >= window.innerWidth) return false;
    const section = el.closest('section');
    if (!section || !section.classList.contains('present')) return false;
    for (let a = el; a; a = a.parentElement) {
      const style = getComputedStyle(a);
      if (style.display === 'none' || style.visibility === 'hidden'
          || parseFloat(style.opacity) === 0) return false;
    }
    return true;
  };
  return [...document.querySelectorAll('.jp-Notebook .jp-Cell')].map((cell) => {
    const outputs = [...cell.querySelectorAll('.jp-OutputArea-output')];
    return {
      code: cell.classList.contains('jp-CodeCell'),
      prompt: ((cell.querySelector('.jp-InputPrompt') || {}).textContent || '').trim(),
      output: outputs.some((o) => o.textContent.trim() || o.querySelector('img, svg')),
      shown: outputs.some(onScreen),
      error: !!cell.querySelector('.jp-OutputArea-output[data-mime-type*="error"]'),
    };
  });
}"""
# Which cell the last press ran, as the talk's steps say: "<presses>:<cell index>".
STEP_JS = "(n) => (document.body.dataset.talkStep || '').startsWith(`${n}:`)"
# The kernel's own status, as the talk's steps mirror it on the page (and its busy sign).
KERNEL_IDLE_JS = "() => document.body.dataset.talkKernel === 'idle'"
BUSY_SIGN_JS = """() => document.body.dataset.talkKernel === 'busy'
  && getComputedStyle(document.body, '::after').content.includes('running')"""
RAN_JS = """(k) => /\\[\\d+\\]/.test(document.querySelectorAll('.jp-Notebook .jp-Cell')[k]
  .querySelector('.jp-InputPrompt')?.textContent ?? '')"""


# A cell's wait: the longest demo (a hang stopped by its timeout, the warm world's start)
# with room for the processes it starts on a busy machine, measured here.
CELL_TIMEOUT_MS = int(1000 * time_limit_s(120, interpreters=8))


def shut_down_kernels(base_url: str) -> None:
    """Stop every kernel of the server: the next page starts the talk on a fresh one."""
    with urllib.request.urlopen(f"{base_url}/api/sessions?token={TOKEN}") as answer:
        sessions = json.load(answer)
    for session in sessions:
        request = urllib.request.Request(
            f"{base_url}/api/sessions/{session['id']}?token={TOKEN}", method="DELETE")
        urllib.request.urlopen(request).close()


def stored_outputs() -> list[bool]:
    """Per cell of the talk: whether its stored run shows something."""
    return [cell.cell_type == "code" and bool(cell.outputs)
            for cell in nbformat.read(TALK, as_version=4).cells]


@pytest.mark.timeout(1800)
def test_shift_enter_alone_walks_the_talk_and_shows_each_result_after_its_press(
        rise_talk, browser):
    shut_down_kernels(rise_talk[1])
    context, page, watch = open_rise(browser, rise_talk[0])
    page.wait_for_function(KERNEL_IDLE_JS, timeout=180_000, polling=250)
    expected, folder = stored_outputs(), shots("rise-live")
    last = max(k for k, cell in enumerate(nbformat.read(TALK, as_version=4).cells)
               if build_slides.slide_type(cell) not in ("notes", "skip"))
    ran, early, missing, floors, busy_seen, presses, active = [], [], [], [], False, 0, -1
    while active != last and presses < 3 * len(expected):
        before = page.evaluate(CELLS_JS)
        early += [k for k, cell in enumerate(before)
                  if cell["shown"] and k not in ran]  # an answer before its press
        page.keyboard.press("Shift+Enter")
        presses += 1
        page.wait_for_function(STEP_JS, arg=presses, timeout=CELL_TIMEOUT_MS, polling=50)
        active = int(page.evaluate("() => document.body.dataset.talkStep").split(":")[1])
        if before[active]["code"]:
            page.wait_for_function(f"(k) => ({BUSY_SIGN_JS})() || ({RAN_JS})(k)", arg=active,
                                   timeout=CELL_TIMEOUT_MS, polling=50)
            busy_seen = busy_seen or page.evaluate(BUSY_SIGN_JS)
            page.wait_for_function(RAN_JS, arg=active, timeout=CELL_TIMEOUT_MS, polling=100)
            ran.append(active)
        page.wait_for_function(KERNEL_IDLE_JS, timeout=CELL_TIMEOUT_MS, polling=100)
        after = page.evaluate(CELLS_JS)
        floors += [f"after cell {active}: {problem}"  # the live results, as the room sees them
                   for problem in build_slides.probe_state(page, FLOORS)["problems"]]
        if expected[active] and not after[active]["shown"]:
            missing.append(active)
            page.screenshot(path=str(folder / f"missing-{active}.png"))
    cells = page.evaluate(CELLS_JS)
    figures = page.evaluate(FIGURES_JS)
    page.screenshot(path=str(folder / "last.png"))
    context.close()

    code = [k for k, cell in enumerate(cells) if cell["code"]]
    assert ran == code, f"cells run, in order: {ran}; code cells: {code}"
    assert [cells[k]["prompt"] for k in code] == [f"[{n}]:" for n in range(1, len(code) + 1)], \
        "not every code cell ran exactly once, in order"
    assert not early, f"results on screen before their press: cells {sorted(set(early))}"
    assert not missing, f"results not on screen after their press: cells {missing}"
    assert [k for k in code if cells[k]["output"]] == [k for k in code if expected[k]]
    assert not [k for k in code if cells[k]["error"]], "a cell raised an error"
    assert not floors, "\n".join(floors)
    assert figures >= MIN_FIGURES, f"{figures} figures drawn from runs"
    assert busy_seen, "no sign while a cell ran"
    assert not watch.problems, "\n".join(watch.problems)
