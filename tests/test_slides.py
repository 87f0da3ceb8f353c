import importlib.util
import re
from pathlib import Path

import nbformat

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


def test_a_lone_tall_cell_is_not_split_off_from_itself():
    assert build_slides.split_points([("a", 20, 2000)], height=720) == []


def test_a_tall_cell_is_scaled_but_never_below_the_floor():
    assert build_slides.zoom_for(600) is None
    assert build_slides.zoom_for(760) == 85
    assert build_slides.zoom_for(5000) == build_slides.MIN_ZOOM


def test_the_title_slide_keeps_heading_and_first_paragraph_and_the_rest_becomes_notes():
    cell = nbformat.v4.new_markdown_cell(
        "# 02 · Workers\n\nToo slow? Add workers.\n\n**What you will learn**\n- a\n- b")
    title, notes = build_slides.split_title(cell)
    assert title.source == "# 02 · Workers\n\nToo slow? Add workers."
    assert "What you will learn" in notes.source
    assert build_slides.slide_type(notes) == "notes"


def test_the_first_seed_mention_is_preceded_by_a_slide_saying_what_seeds_are():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Title"),
        nbformat.v4.new_markdown_cell("Seed 000 says so."),
        nbformat.v4.new_markdown_cell("Seed 001 too.")])
    cells = build_slides.prepare(nb).cells
    seeds = [c for c in cells if c.source == build_slides.SEEDS_SLIDE]
    assert len(seeds) == 1
    assert cells[cells.index(seeds[0]) + 1].source == "Seed 000 says so."


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


def test_a_title_that_names_a_seed_still_opens_the_deck():
    title = nbformat.v4.new_markdown_cell("# Hangs\n\nSeed 000 hung.")
    nb = nbformat.v4.new_notebook(cells=[title])
    cells = build_slides.prepare(nb).cells
    assert cells[0].source.startswith("# Hangs")
    assert cells[1].source == build_slides.SEEDS_SLIDE
