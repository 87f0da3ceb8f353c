"""The three explorers: controls a learner can drive, and a still picture of each state."""

import base64

import ipywidgets as widgets
import pytest

from talk_helpers.lessons.datasets.basics import MapStyleIds, WorkerStreams
from talk_helpers.lessons.trace import run_loader
from talk_helpers.widgets.buffer_shuffle import BufferExplorer
from talk_helpers.widgets.dataloader_steps import NONE_NOTE, step_through
from talk_helpers.widgets.hang_predictor import HangPredictor
from talk_helpers.widgets.still import png_width, short_line

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")
VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def iterable_run():
    return run_loader(WorkerStreams([range(6)] * 2), batch_size=3, num_workers=2)


@pytest.fixture(scope="module")
def map_run():
    return run_loader(MapStyleIds(12), batch_size=2, num_workers=2)


def _explorers(iterable_run):
    return [HangPredictor(), BufferExplorer(), step_through(iterable_run)]


def _sliders(widget):
    found = []
    for child in getattr(widget, "children", ()):
        if isinstance(child, widgets.IntSlider):
            found.append(child)
        found += _sliders(child)
    return found


def test_every_explorer_output_carries_a_still_png_and_a_readable_line(iterable_run):
    for explorer in _explorers(iterable_run):
        bundle = explorer._repr_mimebundle_()
        png = base64.b64decode(bundle["image/png"])
        assert png_width(png) > 200
        assert VIEW in bundle
        assert "children=" not in bundle["text/plain"]


def test_every_slider_has_a_short_label_a_tooltip_and_a_wide_track(iterable_run):
    for explorer in _explorers(iterable_run):
        for slider in _sliders(explorer):
            assert len(slider.description) <= 12, slider.description
            assert slider.tooltip, slider.description
            width = int(slider.layout.width.removesuffix("px"))
            label = int(slider.style.description_width.removesuffix("px"))
            # the readout and margins take up to ~100 px of what the label leaves
            assert width - label - 100 >= 250, slider.description


def test_step_buttons_move_one_step_and_stop_at_either_end(iterable_run):
    stepper = step_through(iterable_run, start=0)
    stepper.back.click()
    assert stepper.slider.value == 0
    stepper.forward.click()
    stepper.forward.click()
    assert stepper.slider.value == 2
    assert repr(stepper).startswith("Step 2 of ")
    stepper.go(10_000)
    stepper.forward.click()
    assert stepper.slider.value == len(stepper.steps) - 1


def test_a_start_outside_the_steps_is_refused_with_the_allowed_range(map_run):
    with pytest.raises(ValueError, match="start must be between 0 and"):
        step_through(map_run, start=999)


def test_only_the_iterable_replay_explains_its_none_tasks(iterable_run, map_run):
    assert "[None, None, None]" in NONE_NOTE
    assert "_InfiniteConstantSampler" in step_through(iterable_run).view.value
    assert "_InfiniteConstantSampler" not in step_through(map_run).view.value


def test_the_hang_table_has_borders_and_names_a_single_waiting_rank():
    predictor = HangPredictor(dataset_size=1000, num_shards=7, nodes=2, workers=2)
    assert "border:1px solid" in predictor.table.value
    assert "rank 0 waits" in predictor.table.value
    assert "rank(s)" not in predictor.table.value


def test_the_hang_predictor_explains_an_impossible_layout_instead_of_a_table():
    predictor = HangPredictor(dataset_size=4, num_shards=8)
    assert predictor.sim is None
    assert "8 shards need at least 8 samples" in repr(predictor)
    assert png_width(predictor.still_png()) > 0


def test_the_buffer_picture_is_shown_at_its_natural_width():
    explorer = BufferExplorer()
    assert int(explorer.image.width) == png_width(explorer.image.value)
    explorer.buffer.value = 512
    assert int(explorer.image.width) == png_width(explorer.image.value)
    assert explorer.redraws == 2


def test_png_width_refuses_bytes_that_are_not_a_png():
    with pytest.raises(ValueError, match="png must be"):
        png_width(b"GIF89a...")


@pytest.mark.parametrize("make, argument", [
    (lambda: HangPredictor(nodes=100), "nodes must be from 1 to 8, got 100"),
    (lambda: HangPredictor(workers=1.5), "workers must be an int from 0 to 8"),
    (lambda: HangPredictor(policy="random"), "policy must be one of 'round_robin'"),
    (lambda: BufferExplorer(num_shards=0), "num_shards must be from 1 to 24, got 0"),
    (lambda: BufferExplorer(rebatch_buffer=30), "rebatch_buffer must be from 0 to 600 in steps"),
])
def test_a_starting_value_no_control_can_show_is_refused_by_name(make, argument):
    with pytest.raises(ValueError, match=argument):
        make()


def test_a_long_text_line_is_cut_at_a_word_before_ipywidgets_cuts_it_mid_word():
    words = "the main process sends task four to worker zero " * 4
    line = short_line(words)
    assert len(line) <= 110 and line.endswith("…")
    assert words.startswith(line[:-1]) and words[len(line) - 1] == " "
    assert short_line("Step 1 of 3: short") == "Step 1 of 3: short"


def test_the_step_through_text_line_is_never_cut_by_ipywidgets(iterable_run):
    explorer = step_through(iterable_run)
    for k in range(len(explorer.steps)):
        explorer.go(k)
        text = explorer._repr_mimebundle_()["text/plain"]
        assert text == repr(explorer) and len(text) <= 110
