"""Explore buffer shuffles: buffer size, workers and shards, and what each batch holds.

Every redraw computes the loader's order with :func:`talk_helpers.toy.shuffling.
simulate_loader` (checked in notebook 03 against a real DataLoader run) for two epochs,
measures it with :func:`talk_helpers.mixing.shuffle_report` and draws the class
histogram of the first batches.

    from talk_helpers.widgets.buffer_shuffle import BufferExplorer
    BufferExplorer()
"""

from __future__ import annotations

import io

import ipywidgets as widgets
import numpy as np

from talk_helpers.diagrams.shuffling import class_mix
from talk_helpers.mixing import shuffle_report
from talk_helpers.toy.shuffling import (
    CLASSES,
    SIZE,
    BufferShuffled,
    labels_of,
    rebatched_orders,
    simulate_loader,
)

__all__ = ["BufferExplorer", "explore"]


class BufferExplorer(widgets.VBox):
    """Sliders for buffer size, workers and shards (and an optional main-process
    rebatch buffer); the figure and the verdict redraw whenever one of them changes."""

    def __init__(self, buffer_size=64, num_workers=2, num_shards=8, rebatch_buffer=0,
                 batch_size=20):
        self.batch_size = batch_size
        self.labels = labels_of()
        style = {"description_width": "initial"}
        self.buffer = widgets.IntSlider(buffer_size, 1, SIZE, description="buffer size",
                                        style=style, continuous_update=False)
        self.workers = widgets.IntSlider(num_workers, 1, 4, description="workers",
                                         style=style, continuous_update=False)
        self.shards = widgets.IntSlider(num_shards, 1, 24, description="shards",
                                        style=style, continuous_update=False)
        self.rebatch = widgets.IntSlider(rebatch_buffer, 0, SIZE, step=20,
                                         description="main-process rebatch buffer (0 = off)",
                                         style=style, continuous_update=False)
        self.image = widgets.Image(format="png")
        self.verdict = widgets.HTML()
        self.redraws = 0
        self.report = None
        for slider in (self.buffer, self.workers, self.shards, self.rebatch):
            slider.observe(self._on_change, names="value")
        super().__init__([widgets.HBox([self.buffer, self.workers, self.shards]),
                          self.rebatch, self.verdict, self.image])
        self.redraw()

    def __repr__(self) -> str:
        return (f"BufferExplorer(buffer size {self.buffer.value}, {self.workers.value} "
                f"worker(s), {self.shards.value} shard(s), rebatch buffer "
                f"{self.rebatch.value}) · mixing {self.report.mixing:.2f}")

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

    def redraw(self):
        runs = self.epochs()
        self.report = shuffle_report([np.concatenate(r) for r in runs], groups=self.labels,
                                     batch_size=self.batch_size)
        self.verdict.value = self.report._repr_html_()
        title = (f"buffer {self.buffer.value}, {self.workers.value} worker(s), "
                 f"{self.shards.value} shard(s)")
        fig = class_mix([(title, runs[0], self.report)], self.labels, CLASSES)
        # Drawn into the Image widget's bytes: no output messages, so the redraw looks the
        # same in JupyterLab, in a headless run and in nbval.
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        self.image.value = buffer.getvalue()
        self.redraws += 1


def explore(**kwargs) -> BufferExplorer:
    """A :class:`BufferExplorer` with the given starting values."""
    return BufferExplorer(**kwargs)
