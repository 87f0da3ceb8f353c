"""Will this DDP epoch hang? Sliders for the data layout, a table of batches per rank and
a verdict, all from :func:`talk_helpers.simulate.simulate` (no process is started).

    from talk_helpers.widgets.hang_predictor import HangPredictor
    HangPredictor()
"""

import ipywidgets as widgets

from talk_helpers.simulate import POLICIES, seed000_rule, shard_sizes_for, simulate

__all__ = ["HangPredictor"]


class HangPredictor(widgets.VBox):
    """Dataset size, shards, nodes, workers, micro-batch and drop_last → batches per rank.

    Shards are cut like ``to_iterable_dataset(num_shards)`` (sizes differ by at most one)
    and assigned with ``policy`` (round robin to ranks, then to workers, by default)."""

    def __init__(self, dataset_size=1000, num_shards=16, nodes=2, workers=2,
                 micro_batch_size=8, drop_last=False, policy="round_robin"):
        style = {"description_width": "initial"}

        def slider(value, low, high, name):
            return widgets.IntSlider(value, low, high, description=name, style=style,
                                     continuous_update=False)

        self.dataset_size = slider(dataset_size, 1, 5000, "dataset size")
        self.num_shards = slider(num_shards, 1, 256, "shards")
        self.nodes = slider(nodes, 1, 8, "nodes (ranks)")
        self.workers = slider(workers, 0, 8, "workers per rank")
        self.micro_batch_size = slider(micro_batch_size, 1, 64, "micro-batch")
        self.drop_last = widgets.Checkbox(drop_last, description="drop_last")
        self.policy = widgets.Dropdown(options=POLICIES, value=policy, description="policy")
        self.table = widgets.HTML()
        self.sim = None
        controls = (self.dataset_size, self.num_shards, self.nodes, self.workers,
                    self.micro_batch_size, self.drop_last, self.policy)
        for control in controls:
            control.observe(self._on_change, names="value")
        super().__init__([widgets.HBox(controls[:3]), widgets.HBox(controls[3:]),
                          self.table])
        self.redraw()

    def _on_change(self, _change):
        self.redraw()

    def redraw(self) -> None:
        size, shards = self.dataset_size.value, self.num_shards.value
        if shards > size:
            self.sim = None
            self.table.value = (f"<b>{shards} shards need at least {shards} samples</b>: "
                                "raise the dataset size or lower the shard count.")
            return
        self.sim = simulate(shard_sizes_for(size, shards), nodes=self.nodes.value,
                            workers=self.workers.value,
                            micro_batch_size=self.micro_batch_size.value,
                            drop_last=self.drop_last.value, policy=self.policy.value)
        rule = ""
        if self.workers.value:
            rule = "<p>seed 000's rule: " + repr(seed000_rule(
                size, shards, nodes=self.nodes.value, workers=self.workers.value,
                micro_batch_size=self.micro_batch_size.value)).removeprefix("rule ") + "</p>"
        self.table.value = self.sim._repr_html_() + rule
