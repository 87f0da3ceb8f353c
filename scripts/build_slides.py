"""Build reveal.js decks of the notebooks and of the talk that fit a 1280x720 screen and
work offline.

Usage: python scripts/build_slides.py [OUTDIR]   (default build/slides)

Writes OUTDIR/talk.slides.html (notebooks/talk.ipynb, sized for the back of a room: code,
output and figure text 24 px, prose 28 px, a report's verdict line only) and
OUTDIR/NN_name.slides.html for each notebook (self-study decks: code and output 18 px).
The decks load reveal.js, require.js, jQuery and MathJax from OUTDIR/vendor/, filled once
from the npm registry (`npm pack`, pinned versions) and reused afterwards, and an emoji
font from OUTDIR/fonts/.

Each notebook is prepared in memory (the files are never touched): a failing cell shows
only its last error line, a widget shows its stored PNG (never its repr) and the text
above it says the sliders live in the notebook, the title slide keeps its heading and
first paragraph (the rest becomes speaker notes). The deck is then measured in headless
Chromium, every visible element of every slide (scripts/slides_template/probe.js), and a
slide that runs off the screen is split, never scaled down: before the cell that crosses
the bottom edge (never right after a heading, nor after a markdown cell that opens with
one), then a lone cell's outputs go to a slide of their own, and a lone markdown cell,
code cell, table or printed output is cut in two. Every continuation keeps its section's
heading, and the time mark of its notes where they have one. The talk's deck has no
navigation arrows (the speaker steps with keys; arrows would cover the slide's corner),
and shows each code cell first and its outputs as the next fragment, as the room sees
them live.
Fitting needs Chromium (/usr/bin/chromium, `make chromium`): without it the build stops.
"""

import copy
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import nbformat
from nbconvert import SlidesExporter

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = Path(__file__).resolve().parent / "slides_template"
CHROMIUM = Path("/usr/bin/chromium")
WIDTH, HEIGHT = 1280, 720
FIT_PASSES = 12
TALK = "talk"  # notebooks/talk.ipynb: the conference talk
# Smallest text as rendered, in CSS pixels at 1280x720 (absent: not held to a floor).
FLOORS = {
    "talk": {"code": 24, "prose": 28, "output": 24, "figure": 24},
    "deck": {"code": 18},
}
PROBE_JS = (TEMPLATES / "probe.js").read_text()
VENDOR = {  # npm package@version -> folder under vendor/
    "reveal.js@4.0.2": "reveal.js",
    "requirejs@2.3.7": "requirejs",
    "jquery@2.2.4": "jquery",
    "mathjax@2.7.9": "mathjax",
}
ASSET_URLS = {
    "reveal_url_prefix": "vendor/reveal.js",
    "reveal_theme": "white",  # its fonts ship with reveal.js; "simple" imports web fonts
    "require_js_url": "vendor/requirejs/require.js",
    "jquery_url": "vendor/jquery/dist/jquery.min.js",
    "mathjax_url": "vendor/mathjax/MathJax.js?config=TeX-AMS_CHTML-full,Safe",
    "reveal_width": str(WIDTH),
    "reveal_height": str(HEIGHT),
}
EXTERNAL = re.compile(r"""<(?:script|link|img)[^>]+(?:src|href)=["'](?:https?:)?//""")
ORIGIN = "slides_origin"  # index of the notebook cell a prepared cell came from
CONTINUED = "slides-continued"  # a heading or notes the fitter repeats on a continuation
REPEAT_HEADINGS = "slides_repeat_headings"  # notebook metadata: continuations keep headings
TIME_MARK = re.compile(r"\*\*(\d+:\d\d)\*\*")  # in speaker notes, minutes:seconds: **27:30**
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# An instruction to use a widget, said over its still picture: "Move the sliders", "Drag
# the slider or press play".
WIDGET_INSTRUCTION = re.compile(r"(?<![\w,] )\b(Move|Drag|Slide|Use|Press|Click)( the| a)? "
                                r"(sliders?|play|buttons?|controls?)\b")


def fetch_vendor(vendor_dir: Path) -> None:
    """Unpack each pinned npm package into vendor_dir unless it is there already."""
    for spec, folder in VENDOR.items():
        target = vendor_dir / folder
        if target.exists():
            continue
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(["npm", "pack", spec, "--pack-destination", tmp, "--silent"],
                           check=True, stdout=subprocess.DEVNULL)
            (tarball,) = Path(tmp).glob("*.tgz")
            with tarfile.open(tarball) as tar:
                tar.extractall(tmp, filter="data")
            shutil.move(Path(tmp) / "package", target)


# --- preparing a notebook in memory -------------------------------------------------------

def slide_type(cell) -> str:
    return cell.get("metadata", {}).get("slideshow", {}).get("slide_type", "-")


def set_slide_type(cell, kind: str) -> None:
    cell.setdefault("metadata", {}).setdefault("slideshow", {})["slide_type"] = kind


def short_error(output: dict) -> dict:
    """The error output with its traceback cut to the one line a slide can show."""
    short = copy.deepcopy(output)
    evalue = output.get("evalue", "")
    if len(evalue) > 240:
        evalue = evalue[:237] + "..."
    short["traceback"] = [f"\x1b[0;31m{output.get('ename', 'Error')}\x1b[0m: {evalue}"]
    return short


def slide_outputs(outputs: list) -> list:
    """Outputs as a slide shows them: short errors, widgets as their PNG or not at all."""
    kept = []
    for output in outputs:
        if output.get("output_type") == "error":
            kept.append(short_error(output))
            continue
        data = output.get("data", {})
        if WIDGET_VIEW in data:
            if "image/png" not in data:
                continue  # a widget without a still would only show its repr
            output = copy.deepcopy(output)
            output["data"] = {"image/png": data["image/png"]}
        kept.append(output)
    return kept


def local_image_paths(source: str) -> str:
    """Point markdown and HTML images at imgs/ next to the deck, not ../imgs/ of notebooks/."""
    return re.sub(r"(\]\(|src=[\"'])\.\./imgs/", r"\1imgs/", source)


def split_title(cell) -> list:
    """The title cell as a short slide (heading + first paragraph) and the rest as notes."""
    blocks = cell["source"].strip().split("\n\n")
    head = [blocks.pop(0)]
    if blocks and blocks[0].lstrip().startswith("#"):
        head.append(blocks.pop(0))
    if blocks and not blocks[0].lstrip().startswith(("-", "*", "[", "|")):
        head.append(blocks.pop(0))
    title = copy.deepcopy(cell)
    title["source"] = "\n\n".join(head)
    if not blocks:
        return [title]
    notes = nbformat.v4.new_markdown_cell("\n\n".join(blocks))
    set_slide_type(notes, "notes")
    return [title, notes]


def has_still(cell) -> bool:
    """True for a code cell that showed a widget whose stored still a slide shows."""
    return cell.cell_type == "code" and any(
        WIDGET_VIEW in o.get("data", {}) and "image/png" in o.get("data", {})
        for o in cell.get("outputs", []))


def in_the_notebook(source: str) -> str:
    """'Move the sliders: ...' over a still picture becomes 'In the notebook, move the
    sliders: ...' (a still has no sliders)."""
    return WIDGET_INSTRUCTION.sub(lambda m: "In the notebook, " + m.group(0).lower(), source)


def prepare(nb):
    """A copy of NB arranged for the projector (see the module docstring)."""
    nb = copy.deepcopy(nb)
    cells = []
    for index, cell in enumerate(nb.cells):
        cell = copy.deepcopy(cell)
        cell.metadata[ORIGIN] = index
        if cell.cell_type == "markdown":
            cell["source"] = local_image_paths(cell["source"])
        if has_still(cell):  # the text just above a still: the sliders are in the notebook
            shown = [c for c in cells if slide_type(c) not in ("skip", "notes")]
            for before in shown[-2:]:
                if before.cell_type == "markdown":
                    before["source"] = in_the_notebook(before["source"])
        if cell.cell_type == "code":
            cell["outputs"] = slide_outputs(cell.get("outputs", []))
        if index == 0 and cell.cell_type == "markdown":
            cells.extend(split_title(cell))
            continue
        cells.append(cell)
    nb.cells = cells
    for number, cell in enumerate(nb.cells):
        cell["id"] = f"c{number}"
    return nb


# --- fitting ----------------------------------------------------------------------------

def is_heading_only(cell) -> bool:
    """A markdown cell that holds nothing but headings."""
    if cell is None or cell.cell_type != "markdown":
        return False
    lines = [line for line in cell.source.splitlines() if line.strip()]
    return bool(lines) and all(line.lstrip().startswith("#") for line in lines)


def split_points(cells: list[tuple[str, int, int]], height: int = HEIGHT,
                 headings: frozenset = frozenset()) -> list[str]:
    """Cells (id, top, bottom, in slide pixels) of one slide: where to start new subslides.

    A cell that ends below the screen (or starts below it) begins a new subslide, unless it
    is the slide's first cell (nothing to split off before it). Every subslide starts its
    first cell where this slide starts its own (below the slide's padding). A heading (an
    id in HEADINGS) is never left alone at the bottom of a slide: the cut moves above it,
    unless it heads the slide, and then there is no cut there."""
    points, first, offset, previous, padding = [], None, None, None, 0
    for cell_id, top, bottom in cells:
        if bottom <= top:
            continue  # an empty or hidden cell takes no room
        if first is None:
            first, offset, previous, padding = cell_id, top, (cell_id, top), top
            continue
        if bottom - offset + padding > height:
            cut_id, cut_top = cell_id, top
            if previous[0] in headings:
                cut_id, cut_top = previous
            if cut_id != first and (not points or cut_id != points[-1]):
                points.append(cut_id)
                first, offset = cut_id, cut_top
        previous = (cell_id, top)
    return points


def cell_by_id(nb, cell_id: str):
    return next((c for c in nb.cells if c.get("id") == cell_id), None)


def insert_after(nb, cell, new) -> None:
    nb.cells.insert(nb.cells.index(cell) + 1, new)


def detach_outputs(nb, cell_id: str) -> bool:
    """Show a code cell's outputs on a subslide of their own, after its source."""
    cell = cell_by_id(nb, cell_id)
    if cell is None or cell.cell_type != "code" or not cell.outputs or not cell.source.strip() \
            or "slides-output-only" in cell.metadata.get("tags", []):
        return False
    shown = copy.deepcopy(cell)
    shown["id"] = f"{cell_id}o"
    shown.metadata["tags"] = shown.metadata.get("tags", []) + ["slides-output-only"]
    cell["outputs"] = []
    insert_after(nb, cell, shown)
    start_subslide(nb, shown)
    return True


def _cut_near_middle(lines: list[str], cuts: list[int]) -> int | None:
    return min(cuts, key=lambda number: abs(number - len(lines) / 2)) if cuts else None


def halve_markdown(source: str) -> tuple[str, str] | None:
    """SOURCE cut at the blank line or list item nearest its middle (outside fences, never
    right after a heading), or None."""
    lines, fenced, cuts = source.split("\n"), False, []
    for number, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif (not fenced and 0 < number < len(lines) - 1
              and (not line.strip() or line.startswith(("- ", "* ")))):
            above = [x for x in lines[:number] if x.strip()]
            if above and not all(x.lstrip().startswith("#") for x in above):
                cuts.append(number)  # a blank line or a list item, with more than headings above
    cut = _cut_near_middle(lines, cuts)
    if cut is None:
        return None
    return "\n".join(lines[:cut]).strip(), "\n".join(lines[cut:]).strip()


def halve_code(source: str) -> tuple[str, str] | None:
    """Code cut at the blank line nearest its middle (else at the middle line), or None for
    fewer than 4 lines."""
    lines = source.rstrip("\n").split("\n")
    if len(lines) < 4:
        return None
    blanks = [n for n in range(1, len(lines) - 1) if not lines[n].strip()]
    cut = _cut_near_middle(lines, blanks) or len(lines) // 2
    return "\n".join(lines[:cut]).rstrip(), "\n".join(lines[cut:]).strip("\n")


def halve_table(html: str) -> tuple[str, str] | None:
    """An HTML table as two tables of half its rows each (the header row in both), or None."""
    rows = [m.start() for m in re.finditer(r"<tr[\s>]", html)]
    end = html.rfind("</table>")
    if len(rows) < 4 or end < rows[-1] or html.count("<table") != 1:
        return None
    head, body = html[:rows[1]], html[rows[1]:end]
    cut = rows[(len(rows) + 1) // 2] - rows[1]
    tail = html[end:]
    return head + body[:cut] + tail, head + body[cut:] + tail


def halve_text(text: str) -> tuple[str, str] | None:
    """Printed text cut at its middle line, or None for fewer than 2 lines."""
    lines = text.rstrip("\n").split("\n")
    if len(lines) < 2:
        return None
    cut = len(lines) // 2
    return "\n".join(lines[:cut]) + "\n", "\n".join(lines[cut:]) + "\n"


def _continued(cell, suffix: str, nb):
    rest = copy.deepcopy(cell)
    rest["id"] = f"{cell['id']}{suffix}{len(nb.cells)}"
    set_slide_type(rest, "subslide")
    return rest


def _insert_continued(nb, cell, rest) -> None:
    insert_after(nb, cell, rest)
    start_subslide(nb, rest)


def split_markdown(nb, cell_id: str) -> bool:
    """Put the second half of a markdown cell on a subslide of its own; False if it cannot."""
    cell = cell_by_id(nb, cell_id)
    if cell is None or cell.cell_type != "markdown":
        return False
    halves = halve_markdown(cell.source)
    if halves is None:
        return False
    rest = _continued(cell, "m", nb)
    cell["source"], rest["source"] = halves
    _insert_continued(nb, cell, rest)
    return True


def split_code(nb, cell_id: str) -> bool:
    """Put the second half of an output-less code cell's source on a subslide of its own."""
    cell = cell_by_id(nb, cell_id)
    if cell is None or cell.cell_type != "code" or cell.outputs:
        return False
    halves = halve_code(cell.source)
    if halves is None:
        return False
    rest = _continued(cell, "s", nb)
    cell["source"], rest["source"] = halves
    _insert_continued(nb, cell, rest)
    return True


def split_output(nb, cell_id: str) -> bool:
    """Show the second half of an output-only cell (an HTML table, or printed text) on a
    subslide of its own."""
    cell = cell_by_id(nb, cell_id)
    if cell is None or cell.cell_type != "code" or not cell.outputs \
            or "slides-output-only" not in cell.metadata.get("tags", []):
        return False
    if len(cell.outputs) > 1:  # one output per slide first
        rest = _continued(cell, "p", nb)
        half = (len(cell.outputs) + 1) // 2
        cell["outputs"], rest["outputs"] = cell.outputs[:half], cell.outputs[half:]
        _insert_continued(nb, cell, rest)
        return True
    output = cell.outputs[0]
    data = output.get("data", {})
    if "text/html" in data:
        halves = halve_table("".join(data["text/html"]))
        key = ("data", "text/html")
    elif output.get("output_type") == "stream":
        halves, key = halve_text("".join(output.get("text", ""))), ("text",)
    elif "text/plain" in data:
        halves = halve_text("".join(data["text/plain"]))
        key = ("data", "text/plain")
    else:
        return False
    if halves is None:
        return False
    rest = _continued(cell, "t", nb)
    for target, half in zip((cell, rest), halves, strict=True):
        out = target.outputs[0]
        if key[0] == "data":
            out["data"] = {key[1]: half}
        else:
            out["text"] = half
    _insert_continued(nb, cell, rest)
    return True


def make_subslides(nb, cell_ids: set[str]) -> None:
    for cell in [c for c in nb.cells if c.get("id") in cell_ids]:
        if slide_type(cell) in ("-", "fragment"):
            start_subslide(nb, cell)


def opens_with_heading(cell) -> bool:
    """A markdown cell whose first line is a heading."""
    return (cell is not None and cell.cell_type == "markdown"
            and cell.source.lstrip().startswith("#"))


def is_heading_like(cell) -> bool:
    """A markdown cell that is a heading with at most a sentence or two under it: a slide
    never ends on one, nor holds one alone."""
    if not opens_with_heading(cell):
        return False
    text = [line for line in cell.source.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]
    return len(text) <= 2


def drop_continued_heading(nb, cell_id: str | None) -> bool:
    """Remove the heading copy that opens a continuation (a part too tall to fit under
    it); the next cell starts the subslide instead. False if CELL_ID is no such copy."""
    cell = cell_by_id(nb, cell_id) if cell_id else None
    if cell is None or CONTINUED not in cell.metadata.get("tags", []) \
            or slide_type(cell) != "subslide":
        return False
    at = nb.cells.index(cell)
    del nb.cells[at]
    following = next((c for c in nb.cells[at:] if slide_type(c) != "notes"), None)
    if following is not None and slide_type(following) in ("-", "fragment"):
        set_slide_type(following, "subslide")
    return True


def slide_heading(nb, cell) -> str | None:
    """The heading line of the section CELL belongs to (the nearest one above it)."""
    for before in reversed(nb.cells[:nb.cells.index(cell)]):
        if opens_with_heading(before):
            return before.source.lstrip().splitlines()[0]
    return None


def time_mark(nb, cell) -> str | None:
    """The time mark (``**27:30**``) of the speaker notes of the section CELL belongs to:
    the first notes cell after its heading."""
    index = nb.cells.index(cell)
    start = next((k for k in range(index, -1, -1) if opens_with_heading(nb.cells[k])), 0)
    for later in nb.cells[start:]:
        if later.cell_type == "markdown" and slide_type(later) == "notes":
            match = TIME_MARK.search(later.source)
            return match.group(1) if match else None
    return None


def _has_notes(cells) -> bool:
    return any(c.cell_type == "markdown" and slide_type(c) == "notes" for c in cells)


def _part(nb, index: int) -> tuple[int, int]:
    """The cells [first, end) of the (sub)slide that holds cell INDEX."""
    first = next((k for k in range(index, -1, -1)
                  if slide_type(nb.cells[k]) in ("slide", "subslide")), 0)
    end = next((k for k in range(index + 1, len(nb.cells))
                if slide_type(nb.cells[k]) in ("slide", "subslide")), len(nb.cells))
    return first, end


def start_subslide(nb, cell) -> None:
    """Make CELL begin a new subslide. In the talk (``nb.metadata[REPEAT_HEADINGS]``) a
    continuation keeps its section's heading (a copy, tagged CONTINUED, opens the
    subslide), and where the section's notes have a time mark, each part left without
    notes gets notes with that mark: the audience never sees a slide without a title, nor
    the speaker one without a time. A self-study deck spends no room on a copy."""
    set_slide_type(cell, "subslide")
    if not nb.metadata.get(REPEAT_HEADINGS):
        return
    mark = time_mark(nb, cell)
    heading = None if opens_with_heading(cell) else slide_heading(nb, cell)
    if heading is not None:
        head = nbformat.v4.new_markdown_cell(heading)
        head["id"] = f"{cell['id']}h"
        head.metadata["tags"] = [CONTINUED]
        set_slide_type(head, "subslide")
        set_slide_type(cell, "-")
        nb.cells.insert(nb.cells.index(cell), head)
        cell = head
    if mark is None:
        return
    at = nb.cells.index(cell)
    parts = {"n": _part(nb, at), "p": _part(nb, at - 1)}  # this part, the one before it
    for suffix, (first, end) in parts.items():  # the later part first: indices hold
        if not _has_notes(nb.cells[first:end]):
            notes = nbformat.v4.new_markdown_cell(f"**{mark}** (this section, continued)")
            notes["id"] = f"{cell['id']}{suffix}"
            notes.metadata["tags"] = [CONTINUED]
            set_slide_type(notes, "notes")
            nb.cells.insert(end, notes)


def open_deck(browser, path: Path):
    page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
    page.goto(path.resolve().as_uri())
    page.wait_for_function("() => window.Reveal && Reveal.isReady && Reveal.isReady()")
    page.evaluate("() => document.fonts.ready")
    return page


def probe_state(page, floors: dict) -> dict:
    """What the current state shows (see probe.js): cells, extent, problems."""
    return page.evaluate(f"({PROBE_JS})", {"floors": floors, "width": WIDTH, "height": HEIGHT})


def measure(browser, path: Path, floors: dict | None = None) -> list[dict]:
    """Every slide of the deck at PATH with all its fragments shown (see probe.js)."""
    page = open_deck(browser, path)
    try:
        return page.evaluate(f"""(args) => {{
            const probe = ({PROBE_JS});
            return Reveal.getSlides().map((slide) => {{
                const where = Reveal.getIndices(slide);
                Reveal.slide(where.h, where.v);
                while (Reveal.availableFragments().next) Reveal.nextFragment();
                return probe(args);
            }});
        }}""", {"floors": floors or {}, "width": WIDTH, "height": HEIGHT})
    finally:
        page.close()


def fits(slide: dict) -> bool:
    return slide["bottom"] <= HEIGHT + 1 and slide["right"] <= WIDTH + 1


def fit_deck(browser, nb, path: Path, render) -> int:
    """Split NB until its deck at PATH fits the screen; returns how many slides still do not.

    In order: a new slide before the cell that crosses the bottom edge (never right after a
    heading); a lone cell too tall gets its outputs on a slide of their own; a lone part
    still too tall is cut in two (markdown, code, a table, printed text); a part that still
    does not fit under the heading repeated over it loses that copy. Never scaled."""
    for _ in range(FIT_PASSES):
        changed = False
        headings = frozenset(c["id"] for c in nb.cells if is_heading_like(c))
        for slide in measure(browser, path):
            if fits(slide):
                continue
            cells = [tuple(c) for c in slide["cells"]]
            points = split_points(cells, headings=headings)
            if points:
                make_subslides(nb, set(points))
                changed = True
                continue
            crossing = [cid for cid, top, bottom in cells
                        if bottom > HEIGHT and not is_heading_only(cell_by_id(nb, cid))]
            for cell_id in crossing[:1]:
                changed |= (detach_outputs(nb, cell_id) or split_markdown(nb, cell_id)
                            or split_code(nb, cell_id) or split_output(nb, cell_id)
                            or drop_continued_heading(nb, cells[0][0] if cells else None))
        if not changed:
            break
        render(nb)
    return sum(not fits(slide) for slide in measure(browser, path))


# --- building ---------------------------------------------------------------------------

def is_talk(notebook: Path) -> bool:
    return Path(notebook).stem == TALK


def floors_for(notebook: Path) -> dict:
    return FLOORS["talk" if is_talk(notebook) else "deck"]


def render_deck(nb, path: Path, talk: bool = False) -> None:
    exporter = SlidesExporter(template_name="offline", extra_template_basedirs=[str(TEMPLATES)],
                              reveal_transition="none", **ASSET_URLS)
    sheets = ["fit.css", "talk.css"] if talk else ["fit.css"]
    body, _ = exporter.from_notebook_node(nb, resources={"deck_css": sheets,
                                                         "outputs_as_fragments": talk})
    body = body.replace(f"height: {HEIGHT},", f"height: {HEIGHT}, margin: 0, center: false,", 1)
    body = body.replace("function(Reveal, RevealNotes){",  # tests and the fit drive Reveal
                        "function(Reveal, RevealNotes){ window.Reveal = Reveal;", 1)
    if talk:  # the speaker steps with keys or a clicker: no arrows over the slide's corner
        body = body.replace("controls: true,", "controls: false,", 1)
    external = external_assets(body)
    if external:
        raise RuntimeError(f"{path.name}: the deck still loads {external[:3]}")
    path.write_text(body)


def build_deck(notebook: Path, outdir: Path, browser=None) -> Path:
    """Write NOTEBOOK's slides as OUTDIR/<stem>.slides.html, fitted if a browser is given."""
    return build_fitted(notebook, outdir, browser)[0]


def build_fitted(notebook: Path, outdir: Path, browser=None):
    """The deck's path and the prepared (and, with a browser, fitted) notebook."""
    copy_assets(outdir)
    nb = prepare(nbformat.read(notebook, as_version=4))
    path = outdir / f"{Path(notebook).stem}.slides.html"
    talk = is_talk(notebook)
    nb.metadata[REPEAT_HEADINGS] = talk
    render_deck(nb, path, talk)
    if browser is not None:
        left = fit_deck(browser, nb, path, lambda fitted: render_deck(fitted, path, talk))
        if left:
            print(f"{path.name}: {left} slide(s) still larger than {WIDTH}x{HEIGHT}",
                  file=sys.stderr)
    return path, nb


def copy_assets(outdir: Path) -> None:
    """The style sheets, the emoji font and imgs/ next to the decks, so all loads offline."""
    outdir.mkdir(parents=True, exist_ok=True)
    for sheet in ("fit.css", "talk.css"):
        shutil.copy(TEMPLATES / sheet, outdir / sheet)
    shutil.copytree(TEMPLATES / "fonts", outdir / "fonts", dirs_exist_ok=True)
    if (ROOT / "imgs").is_dir():
        shutil.copytree(ROOT / "imgs", outdir / "imgs", dirs_exist_ok=True)


def external_assets(html: str) -> list[str]:
    """Script, stylesheet and image tags that would load from another host."""
    return EXTERNAL.findall(html)


def deck_notebooks() -> list[Path]:
    """The talk first, then every numbered notebook."""
    talk = ROOT / "notebooks" / f"{TALK}.ipynb"
    numbered = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    return ([talk] if talk.exists() else []) + numbered


def build_all(outdir: Path, fit: bool = True, notebooks: list[Path] | None = None,
              browser=None) -> list[Path]:
    """Build the decks of NOTEBOOKS (default: the talk and every notebook) into OUTDIR,
    fitted in BROWSER (a playwright Chromium; default: one started here). Without
    Chromium a fitted build stops with a message naming `make chromium` (SystemExit)."""
    if fit and browser is None and not CHROMIUM.exists():
        raise SystemExit(missing_chromium())
    outdir.mkdir(parents=True, exist_ok=True)
    fetch_vendor(outdir / "vendor")
    notebooks = deck_notebooks() if notebooks is None else notebooks
    if browser is not None:
        return [build_deck(nb, outdir, browser) for nb in notebooks]
    if not fit:
        return [build_deck(nb, outdir) for nb in notebooks]
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            return [build_deck(nb, outdir, browser) for nb in notebooks]
        finally:
            browser.close()


def missing_chromium() -> str:
    """Why a deck cannot be fitted here, and the command that fixes it."""
    return (f"build_slides.py: {CHROMIUM} is missing, and a deck is fitted to the screen by "
            "measuring it in Chromium (unfitted slides run off the projector). Install it "
            "with `make chromium` (Debian's chromium package), then run `make slides` again.")


def main(outdir: str = "build/slides") -> None:
    for path in build_all(Path(outdir)):
        print(path)


if __name__ == "__main__":
    main(*sys.argv[1:])
