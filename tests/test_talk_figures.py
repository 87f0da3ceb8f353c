"""The talk's figures (talk_helpers.diagrams.talk_figures): drawn from what a run
recorded, readable from the back of the room, and the same bytes for the same run."""

import re

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

from talk_helpers.diagrams import talk_figures  # noqa: E402

FLOOR_PX = 24  # the talk's floor for any text on a slide, in CSS pixels
SLIDE_PX = 1248  # the width a slide gives its content


def _svg_sizes(svg: str) -> tuple[float, list[float]]:
    """(width in CSS pixels at natural size, every font size in CSS pixels)."""
    width_pt = float(re.search(r'<svg[^>]*width="([\d.]+)pt"', svg).group(1))
    sizes = [float(s) for s in re.findall(r"font-size: ([\d.]+)px", svg)]
    viewbox = float(re.search(r'viewBox="0 0 ([\d.]+)', svg).group(1))
    scale = width_pt * 4 / 3 / viewbox  # a point is 4/3 of a CSS pixel
    return width_pt * 4 / 3, [size * scale for size in sizes]


PAIRS = [(0, 0), (1, 1), (1, 0), (3, 1)]  # id 1 twice, id 2 never
DICT_BATCHES = [{"id": torch.tensor([0, 1]), "worker": torch.tensor([0, 0])},
                {"id": torch.tensor([1, 3]), "worker": torch.tensor([1, 1])}]


@pytest.mark.parametrize("figure", [
    lambda: talk_figures.worker_reads(PAIRS, n_ids=4),
    lambda: talk_figures.classes_per_batch([[0, 1], [2, 3]], [0, 0, 1, 1], n_classes=2),
], ids=["worker_reads", "classes_per_batch"])
def test_every_text_of_a_talk_figure_is_at_least_24_px_on_the_slide(figure):
    width, sizes = _svg_sizes(figure()._repr_svg_())
    assert width <= SLIDE_PX
    assert sizes and min(sizes) >= FLOOR_PX, sorted(sizes)[:3]


def test_the_same_run_draws_the_same_svg_bytes():
    first = talk_figures.worker_reads(PAIRS, n_ids=4)._repr_svg_()
    assert first == talk_figures.worker_reads(PAIRS, n_ids=4)._repr_svg_()
    assert "<text" in first and "Date" not in first


def test_what_each_worker_reads_counts_duplicated_and_missing_ids_as_the_check_does():
    from talk_helpers.checks import check_exactly_once

    shown = talk_figures.worker_reads(DICT_BATCHES, n_ids=4)
    assert repr(shown) == "3 of 4 ids received · 1 duplicated · 1 missing (▲)"
    report = repr(check_exactly_once([b["id"] for b in DICT_BATCHES], expected=4))
    assert "1 duplicated" in report and "1 missing" in report
    assert repr(talk_figures.worker_reads(PAIRS, n_ids=4)) == repr(shown)


def test_classes_per_batch_counts_the_classes_each_batch_holds():
    shown = talk_figures.classes_per_batch([[0, 1], [2, 0], [3, 3]], [0, 0, 1, 1],
                                           n_classes=2)
    assert repr(shown) == "classes per batch, first 3 batches: 1, 2, 1 of 2"


def test_the_qr_code_is_a_standalone_svg_titled_with_its_address():
    svg = talk_figures.qr_code("https://example.org/x")
    assert svg.startswith('<svg xmlns="http://www.w3.org/2000/svg"')
    assert "<title>https://example.org/x</title>" in svg
    assert svg != talk_figures.qr_code("https://example.org/y")
