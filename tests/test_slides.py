import base64
import importlib.util
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("build_slides", ROOT / "scripts/build_slides.py")
build_slides = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build_slides)

WIDGET = {"output_type": "display_data", "metadata": {},
          "data": {"text/plain": "HangPredictor(children=(HBox(...),))",
                   build_slides.WIDGET_VIEW: {"model_id": "abc", "version_major": 2}}}


def test_index_deck_loads_every_asset_from_the_local_vendor_folder(tmp_path):
    deck = build_slides.build_deck(ROOT / "notebooks/00_index.ipynb", tmp_path).read_text()
    assert build_slides.external_assets(deck) == []
    assert 'src="vendor/requirejs/require.js"' in deck
    assert "vendor/reveal.js/dist/reveal.js" in deck
    assert (tmp_path / "fit.css").exists()


def test_a_cdn_script_is_recognised_as_external():
    html = '<script src="https://unpkg.com/reveal.js/dist/reveal.js"></script>'
    assert build_slides.external_assets(html)


def test_a_traceback_shrinks_to_its_error_line():
    error = {"output_type": "error", "ename": "AttributeError", "evalue": "no num_workers",
             "traceback": [f"frame {i}" for i in range(40)]}
    (short,) = build_slides.slide_outputs([error])
    assert len(short["traceback"]) == 1
    assert "AttributeError" in short["traceback"][0] and "no num_workers" in short["traceback"][0]
    assert len(error["traceback"]) == 40  # the notebook's own output is left alone


def test_a_widget_without_a_still_is_dropped_rather_than_shown_as_its_repr():
    assert build_slides.slide_outputs([WIDGET]) == []


def test_a_widget_with_a_still_shows_only_the_png():
    with_png = {**WIDGET, "data": {**WIDGET["data"], "image/png": "iVBORw0KGgo="}}
    (shown,) = build_slides.slide_outputs([with_png])
    assert shown["data"] == {"image/png": "iVBORw0KGgo="}


def test_images_of_the_notebooks_folder_point_at_imgs_next_to_the_deck():
    source = '![batches](../imgs/partial_batches.png) <img src="../imgs/ddp_picture.png">'
    fixed = build_slides.local_image_paths(source)
    assert "../imgs" not in fixed
    assert "](imgs/partial_batches.png)" in fixed and 'src="imgs/ddp_picture.png"' in fixed


def test_images_named_by_the_decks_exist_after_a_build(tmp_path):
    build_slides.copy_assets(tmp_path)
    nb = build_slides.prepare(nbformat.read(ROOT / "notebooks/02_workers_and_sharding.ipynb", 4))
    names = {m for c in nb.cells if c.cell_type == "markdown"
             for m in re.findall(r"imgs/[\w.-]+\.png", c.source)}
    assert names
    assert all((tmp_path / name).exists() for name in names)


def test_a_cell_crossing_the_bottom_edge_starts_a_new_subslide():
    cells = [("a", 20, 400), ("b", 400, 700), ("c", 700, 900), ("d", 900, 1000)]
    assert build_slides.split_points(cells, height=720) == ["c"]


def test_a_cell_that_ends_below_the_screen_by_less_than_the_top_padding_is_still_cut():
    cells = [("a", 8, 347), ("b", 347, 627), ("c", 627, 725)]
    assert build_slides.split_points(cells, height=720) == ["c"]


def test_a_lone_tall_cell_is_not_split_off_from_itself():
    assert build_slides.split_points([("a", 20, 2000)], height=720) == []


def test_the_title_slide_keeps_heading_and_first_paragraph_and_the_rest_becomes_notes():
    cell = nbformat.v4.new_markdown_cell(
        "# 02 · Workers\n\nToo slow? Add workers.\n\n**What you will learn**\n- a\n- b")
    title, notes = build_slides.split_title(cell)
    assert title.source == "# 02 · Workers\n\nToo slow? Add workers."
    assert "What you will learn" in notes.source
    assert build_slides.slide_type(notes) == "notes"


def test_a_long_markdown_cell_is_halved_at_a_blank_line_outside_code_fences():
    source = "para one\n\n```\ncode\n\nmore code\n```\n\npara two\n\npara three"
    first, second = build_slides.halve_markdown(source)
    assert first.count("```") % 2 == 0 and second.count("```") % 2 == 0
    assert (first + "\n\n" + second).split() == source.split()


def test_a_markdown_cell_without_a_blank_line_is_not_halved():
    assert build_slides.halve_markdown("one line\nanother line") is None


def test_a_long_table_is_halved_with_its_header_row_on_both_halves():
    rows = "".join(f"<tr><td>{i}</td></tr>" for i in range(6))
    first, second = build_slides.halve_table(f"<table><tr><th>n</th></tr>{rows}</table>")
    assert first.count("<th>n</th>") == second.count("<th>n</th>") == 1
    assert first.count("<td>") + second.count("<td>") == 6
    assert first.endswith("</table>") and second.endswith("</table>")


def test_a_long_list_is_halved_between_its_items():
    first, second = build_slides.halve_markdown("- a\n- b\n- c\n- d")
    assert first == "- a\n- b" and second == "- c\n- d"


def test_a_heading_is_never_left_alone_at_the_bottom_of_a_slide():
    cells = [("text", 20, 300), ("head", 300, 360), ("code", 360, 900)]
    assert build_slides.split_points(cells, height=720, headings=frozenset({"head"})) == ["head"]


def test_a_heading_that_opens_a_slide_keeps_its_cell():
    cells = [("head", 20, 80), ("code", 80, 900)]
    assert build_slides.split_points(cells, height=720, headings=frozenset({"head"})) == []


def test_markdown_is_never_cut_right_after_its_heading():
    first, second = build_slides.halve_markdown("## Title\n\npara one\n\npara two\n\npara three")
    assert first.startswith("## Title") and "para" in first


def test_long_code_is_cut_at_a_blank_line():
    source = "import a\n\n\nclass A:\n    x = 1\n\n    def f(self):\n        return 2"
    first, second = build_slides.halve_code(source)
    assert (first + "\n" + second).split() == source.split()
    assert second.lstrip().startswith(("def", "class"))


def test_printed_output_is_cut_at_its_middle_line():
    first, second = build_slides.halve_text("a\nb\nc\nd\n")
    assert first == "a\nb\n" and second == "c\nd\n"


def test_an_instruction_over_a_widget_still_points_to_the_notebook():
    fixed = build_slides.in_the_notebook("Move the sliders: dataset size and shards.")
    assert fixed.startswith("In the notebook, move the sliders")


def test_the_text_above_a_widget_still_no_longer_asks_to_move_sliders():
    widget = nbformat.v4.new_code_cell("HangPredictor()")
    widget.outputs = [{**WIDGET, "data": {**WIDGET["data"], "image/png": "iVBORw0KGgo="}}]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# T"),
                                         nbformat.v4.new_markdown_cell("Move the sliders."),
                                         widget])
    cells = build_slides.prepare(nb).cells
    assert "In the notebook, move the sliders." in [c.source for c in cells]


def test_no_deck_names_a_source_document_by_its_file_code():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Title"),
                                         nbformat.v4.new_markdown_cell("A hang.")])
    assert [c.source for c in build_slides.prepare(nb).cells] == ["# Title", "A hang."]


def test_the_talk_is_a_deck_of_its_own_with_no_text_under_24_px_for_the_back_of_the_room():
    talk = build_slides.deck_notebooks()[0]
    assert talk.name == "talk.ipynb"
    assert build_slides.floors_for(talk) == {"code": 24, "prose": 28, "output": 24, "figure": 24}
    assert build_slides.floors_for(ROOT / "notebooks/02_workers_and_sharding.ipynb") == {
        "code": 18}


def test_every_line_of_the_talks_shown_code_fits_a_slide_without_wrapping():
    """At 24 px, 80 characters of DejaVu Sans Mono fill 1160 of the slide's 1248 px; RISE's
    editor does not wrap, so a longer line would run off the screen."""
    nb = nbformat.read(ROOT / "notebooks/talk.ipynb", 4)
    long = [line for c in nb.cells if c.cell_type == "code"
            and build_slides.slide_type(c) != "skip" for line in c.source.splitlines()
            if len(line) > 80]
    assert long == []


TALK = ROOT / "notebooks/talk.ipynb"


def _talk():
    return nbformat.read(TALK, 4)


def _sections(nb) -> list[list]:
    """The cells of each slide and subslide, in order."""
    sections = []
    for cell in nb.cells:
        if build_slides.slide_type(cell) in ("slide", "subslide") or not sections:
            sections.append([])
        sections[-1].append(cell)
    return sections


def _minutes(mark: str) -> float:
    """A time mark, minutes:seconds into the talk, in minutes."""
    minutes, seconds = mark.split(":")
    return int(minutes) + int(seconds) / 60


def test_every_slide_of_the_talk_has_speaker_notes_that_open_with_a_time_mark():
    for section in _sections(_talk()):
        notes = [c.source for c in section if build_slides.slide_type(c) == "notes"]
        assert notes, f"no notes on the slide {section[0].source.splitlines()[0]!r}"
        assert all(re.match(r"\*\*\d+:\d\d\*\*", n) for n in notes), notes


def test_the_talks_time_marks_rise_and_end_by_32_00_of_a_35_minute_slot():
    notes = [c.source for c in _talk().cells if build_slides.slide_type(c) == "notes"]
    marks = [_minutes(m) for n in notes for m in build_slides.TIME_MARK.findall(n)]
    assert marks == sorted(marks)
    assert 28 <= marks[-1] <= 32, f"the talk ends at minute {marks[-1]:.1f}"


def _weight(section) -> int:
    """What a slide asks of the speaker: the words of its prose and notes, and ten per line
    of code (read, run, explained)."""
    words = sum(len(re.sub(r"<img[^>]*>", "", c.source).split())
                for c in section if c.cell_type == "markdown")
    code = sum(1 for c in section if c.cell_type == "code"
               for line in c.source.splitlines() if line.strip())
    return words + 10 * code


def test_each_slide_gets_minutes_in_proportion_to_its_words_and_code_and_none_gets_zero():
    sections = _sections(_talk())
    starts = [_minutes(build_slides.TIME_MARK.search(
        next(c.source for c in s if build_slides.slide_type(c) == "notes")).group(1))
        for s in sections]
    end = max(_minutes(m) for c in _talk().cells if build_slides.slide_type(c) == "notes"
              for m in build_slides.TIME_MARK.findall(c.source))
    minutes = [b - a for a, b in zip(starts, [*starts[1:], end], strict=True)]
    weights = [_weight(s) for s in sections]
    shares = [end * w / sum(weights) for w in weights]
    assert min(minutes) > 0, [s[0].source.splitlines()[0] for s, m in
                              zip(sections, minutes, strict=True) if m <= 0]
    off = [(s[0].source.splitlines()[0], m, round(share, 1)) for s, m, share
           in zip(sections, minutes, shares, strict=True) if abs(m - share) > 0.75]
    assert not off, off


def test_no_slide_of_the_talk_shows_a_cell_magic():
    shown = [c.source for c in _talk().cells
             if c.cell_type == "code" and build_slides.slide_type(c) != "skip"]
    assert shown and not [s for s in shown if s.lstrip().startswith("%")]


def test_the_talk_shows_at_least_four_figures_drawn_from_runs():
    figures = [c for c in _talk().cells if c.cell_type == "code"
               and any("image/svg+xml" in o.get("data", {}) for o in c.outputs)]
    assert len(figures) >= 4


def test_the_talk_runs_its_set_up_on_its_first_slide_and_hides_no_cell():
    nb = _talk()
    assert not [c for c in nb.cells if build_slides.slide_type(c) == "skip"]
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert "start_talk()" in first_code.source
    assert first_code in _sections(nb)[0]


def test_the_talks_last_slide_closes_on_three_lines_with_the_collections_qr_code():
    from talk_helpers.diagrams.talk_figures import qr_code
    from talk_helpers.notebook.address import repository_url

    address = repository_url()
    last = [c for c in _talk().cells if build_slides.slide_type(c) == "slide"][-1]
    assert len([line for line in last.source.splitlines() if line.startswith("## ")]) == 3
    assert address.removeprefix("https://") in last.source
    (uri,) = re.findall(r'src="(data:image/svg\+xml;base64,[^"]+)"', last.source)
    assert base64.b64decode(uri.split(",", 1)[1]).decode() == qr_code(address, scale=8)


# --- the fitter: continuations, headings, Chromium --------------------------------------

def _cells(*specs):
    """Markdown ('m'), code ('c') or notes ('n') cells from (kind, source, slide type)."""
    cells = []
    for number, (kind, source, slide) in enumerate(specs):
        cell = (nbformat.v4.new_code_cell(source) if kind == "c"
                else nbformat.v4.new_markdown_cell(source))
        build_slides.set_slide_type(cell, "notes" if kind == "n" else slide)
        cell["id"] = f"c{number}"
        cells.append(cell)
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata[build_slides.REPEAT_HEADINGS] = True  # as in the talk
    return nb


def test_a_continuation_keeps_its_heading_and_each_part_its_time_mark():
    nb = _cells(("m", "## Files\n\nFour files.", "slide"), ("c", "files = 4", "-"),
                ("c", "audit(files)", "fragment"), ("n", "**0:26** Whole files.", "notes"))
    build_slides.make_subslides(nb, {"c2"})
    kinds = [(build_slides.slide_type(c), c.source) for c in nb.cells]
    assert kinds == [
        ("slide", "## Files\n\nFour files."), ("-", "files = 4"),
        ("notes", "**0:26** (this section, continued)"),
        ("subslide", "## Files"), ("-", "audit(files)"), ("notes", "**0:26** Whole files."),
    ]


def test_a_cell_that_opens_with_a_heading_starts_its_subslide_without_a_copy():
    nb = _cells(("m", "## One", "slide"), ("c", "x = 1", "-"), ("m", "## Two", "-"))
    build_slides.make_subslides(nb, {"c2"})
    assert [c.source for c in nb.cells] == ["## One", "x = 1", "## Two"]
    assert build_slides.slide_type(nb.cells[2]) == "subslide"


def test_a_heading_with_its_sentence_is_never_left_alone_above_a_cut():
    cells = [("text", 20, 300), ("intro", 300, 380), ("code", 380, 900)]
    assert build_slides.split_points(cells, height=720, headings=frozenset({"intro"})) == [
        "intro"]
    alone = [("intro", 20, 100), ("code", 100, 900)]
    assert build_slides.split_points(alone, height=720, headings=frozenset({"intro"})) == []


def test_the_live_talk_gets_the_headings_the_deck_repeats_on_a_continuation():
    original = _cells(("m", "## Files", "slide"), ("c", "files = 4", "-"),
                      ("c", "audit(files)", "-"), ("n", "**0:26** Whole files.", "notes"))
    fitted = build_slides.prepare(original)
    fitted.metadata[build_slides.REPEAT_HEADINGS] = True
    build_slides.make_subslides(fitted, {"c2"})
    fit_talk = _load_script("fit_talk")
    assert fit_talk.copy_breaks(fitted, original) == 1
    assert [(build_slides.slide_type(c), c.source) for c in original.cells] == [
        ("slide", "## Files"), ("-", "files = 4"),
        ("notes", "**0:26** (this section, continued)"), ("subslide", "## Files"),
        ("-", "audit(files)"), ("notes", "**0:26** Whole files.")]


def test_the_talk_deck_has_no_navigation_arrows_and_the_notebook_decks_keep_theirs(tmp_path):
    nb = _cells(("m", "# T", "slide"), ("c", "1", "-"))
    build_slides.render_deck(nb, tmp_path / "talk.slides.html", talk=True)
    build_slides.render_deck(nb, tmp_path / "deck.slides.html", talk=False)
    assert "controls: false," in (tmp_path / "talk.slides.html").read_text()
    assert "controls: true," in (tmp_path / "deck.slides.html").read_text()


def test_a_fitted_build_without_chromium_stops_and_names_make_chromium(tmp_path, monkeypatch):
    monkeypatch.setattr(build_slides, "CHROMIUM", tmp_path / "no-chromium")
    with pytest.raises(SystemExit, match="make chromium"):
        build_slides.build_all(tmp_path / "slides", notebooks=[TALK])
    assert not (tmp_path / "slides").exists()


def _load_script(name: str):
    loaded = importlib.util.spec_from_file_location(name, ROOT / f"scripts/{name}.py")
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module


def test_only_a_heading_with_a_sentence_or_two_is_kept_with_what_follows_it():
    short = nbformat.v4.new_markdown_cell("## Step 3\n\nA training loop like every tutorial's.")
    long = nbformat.v4.new_markdown_cell("## Going deeper\n\none\n\ntwo\n\nthree")
    assert build_slides.is_heading_like(short)
    assert not build_slides.is_heading_like(long)
    assert not build_slides.is_heading_like(nbformat.v4.new_markdown_cell("No heading."))


def test_a_part_too_tall_for_its_repeated_heading_loses_the_copy_not_its_content():
    nb = _cells(("m", "## Figure", "slide"), ("c", "x = 1", "-"), ("c", "draw()", "-"),
                ("n", "**0:05** A figure.", "notes"))
    build_slides.make_subslides(nb, {"c2"})
    copy = next(c for c in nb.cells if c.source == "## Figure"
                and build_slides.CONTINUED in c.metadata.get("tags", []))
    assert build_slides.drop_continued_heading(nb, copy["id"])
    assert [c.source for c in nb.cells if build_slides.slide_type(c) != "notes"] == [
        "## Figure", "x = 1", "draw()"]
    assert build_slides.slide_type(nb.cells[-2]) == "subslide"
    assert not build_slides.drop_continued_heading(nb, "c1")


def test_a_self_study_deck_spends_no_room_on_repeated_headings():
    nb = _cells(("m", "## Files", "slide"), ("c", "files = 4", "-"), ("c", "audit(files)", "-"))
    nb.metadata[build_slides.REPEAT_HEADINGS] = False
    build_slides.make_subslides(nb, {"c2"})
    assert [c.source for c in nb.cells] == ["## Files", "files = 4", "audit(files)"]
    assert build_slides.slide_type(nb.cells[2]) == "subslide"


def test_the_talk_deck_shows_a_code_cell_first_and_its_outputs_as_the_next_fragment(tmp_path):
    nb = _cells(("m", "## Two", "slide"), ("c", "1 + 1", "-"))
    nb.cells[1].outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "2"},
                                                  execution_count=1)]
    fragment = re.compile(r'<div class="fragment">\s*<div class="jp-Cell-outputWrapper"')
    talk, deck = tmp_path / "talk.slides.html", tmp_path / "deck.slides.html"
    build_slides.render_deck(nb, talk, talk=True)
    build_slides.render_deck(nb, deck)
    assert len(fragment.findall(talk.read_text())) == 1
    assert not fragment.findall(deck.read_text())
