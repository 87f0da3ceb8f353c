"""Explore buffer shuffles: buffer size, workers and shards, and what each batch holds.

Every redraw computes the loader's order with :func:`talk_helpers.lessons.datasets.shuffling.
simulate_loader` (checked in notebook 03 against a real DataLoader run) for two epochs,
measures it with :func:`talk_helpers.checks.mixing.shuffle_report` and draws the class
histogram of the first batches.

    from talk_helpers.widgets.buffer_shuffle import BufferExplorer
    BufferExplorer()
"""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np

from talk_helpers.arguments import check_int
from talk_helpers.checks.mixing import shuffle_report
from talk_helpers.diagrams.shuffling import class_mix
from talk_helpers.lessons.datasets.shuffling import (
    CLASSES,
    SIZE,
    BufferShuffled,
    labels_of,
    rebatched_orders,
    simulate_loader,
)
from talk_helpers.palette import BAD_COLOUR, OK_COLOUR
from talk_helpers.widgets.still import WithStill, figure_png, png_width

__all__ = ["BufferExplorer"]


SLIDER = {"style": {"description_width": "70px"}, "continuous_update": False,
          "layout": widgets.Layout(width="420px")}   # label + readout + a ≥ 250 px track


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class BufferExplorer(WithStill, widgets.VBox):
    """Sliders for buffer size, workers and shards (and an optional main-process
    rebatch buffer); the figure and the verdict redraw whenever one of them changes."""

    def __init__(self, buffer_size=64, num_workers=2, num_shards=8, rebatch_buffer=0,
                 batch_size=20):
        check_int("buffer_size", buffer_size, 1, SIZE)
        check_int("num_workers", num_workers, 1, 4)
        check_int("num_shards", num_shards, 1, 24)
        check_int("rebatch_buffer", rebatch_buffer, 0, SIZE, step=20)
        check_int("batch_size", batch_size, 1, SIZE)
        self.batch_size = batch_size
        self.labels = labels_of()
        self.buffer = widgets.IntSlider(
            buffer_size, 1, SIZE, description="buffer", **SLIDER,
            tooltip="samples each worker's shuffle buffer holds")
        self.workers = widgets.IntSlider(
            num_workers, 1, 4, description="workers", **SLIDER,
            tooltip="DataLoader workers (each reads its own shards)")
        self.shards = widgets.IntSlider(
            num_shards, 1, 24, description="shards", **SLIDER,
            tooltip="shards the dataset is stored in (each sorted by class)")
        self.rebatch = widgets.IntSlider(
            rebatch_buffer, 0, SIZE, step=20, description="rebatch", **SLIDER,
            tooltip="a second shuffle buffer in the main process, across "
                                "workers' batches (0 = off)")
        # Shown at its natural size (never stretched) beside the verdict it illustrates.
        self.image = widgets.Image(format="png", layout=widgets.Layout(flex="0 0 auto"))
        self.verdict = widgets.HTML(layout=widgets.Layout(flex="1 1 260px", min_width="260px"))
        self.redraws = 0
        self.report = None
        for slider in (self.buffer, self.workers, self.shards, self.rebatch):
            slider.observe(self._on_change, names="value")
        controls = widgets.GridBox(
            [self.buffer, self.workers, self.shards, self.rebatch],
            layout=widgets.Layout(grid_template_columns="repeat(2, 420px)",
                                  grid_gap="2px 24px"))
        picture = widgets.HBox([self.image, self.verdict],
                               layout=widgets.Layout(align_items="center", grid_gap="16px"))
        super().__init__([controls, picture])
        self.redraw()

    def __repr__(self) -> str:
        return (f"BufferExplorer(buffer {self.buffer.value}, "
                f"{_plural(self.workers.value, 'worker')}, {_plural(self.shards.value, 'shard')}, "
                f"rebatch {self.rebatch.value or 'off'}) · mixing {self.report.mixing:.2f}")

    def _on_change(self, _change):
        self.redraw()

    def epochs(self):
        """Two epochs of batches, as the loader (plus optional rebatch) yields them."""
        runs = [simulate_loader(BufferShuffled(num_shards=self.shards.value,
                                               buffer_size=self.buffer.value, epoch=epoch),
                                self.workers.value, self.batch_size) for epoch in range(2)]
        if self.rebatch.value:
            orders = rebatched_orders(runs, self.rebatch.value, self.batch_size)
            runs = [np.split(o, range(self.batch_size, len(o), self.batch_size))
                    for o in orders]
        return runs

    def _title(self) -> str:
        return (f"buffer {self.buffer.value}, {_plural(self.workers.value, 'worker')}, "
                f"{_plural(self.shards.value, 'shard')}"
                + (f", rebatch {self.rebatch.value}" if self.rebatch.value else ""))

    def _figure(self, runs):
        return class_mix([(self._title(), runs[0], self.report)], self.labels, CLASSES)

    def redraw(self):
        self.runs = self.epochs()
        self.report = shuffle_report([np.concatenate(r) for r in self.runs],
                                     groups=self.labels, batch_size=self.batch_size)
        self.verdict.value = self.report._repr_html_()
        # Drawn into the Image widget's bytes: no output messages, so the redraw looks the
        # same in JupyterLab, in a headless run and in nbval. 100 dpi: one figure pixel is
        # one screen pixel, and the width is set so the browser never stretches it.
        fig = self._figure(self.runs)
        self.image.value = figure_png(fig, dpi=100)
        self.image.width = str(png_width(self.image.value))
        self.redraws += 1

    def still_png(self) -> bytes:
        """The heat map with the verdict's first line under it (slides, static pages)."""
        fig = self._figure(self.runs)
        fig.set_figheight(fig.get_figheight() + 0.5)
        fig.text(0.5, 0.0, repr(self.report).splitlines()[0].replace(" · ", "\n"),
                 ha="center", va="top",
                 fontsize=10, color=OK_COLOUR if self.report.ok else BAD_COLOUR)
        return figure_png(fig, dpi=100)
