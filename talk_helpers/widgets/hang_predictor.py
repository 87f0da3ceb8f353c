"""Will this DDP epoch hang? Sliders for the data layout, a table of batches per rank and
a verdict, all from :func:`talk_helpers.model.simulate.simulate` (no process is started).

    from talk_helpers.widgets.hang_predictor import HangPredictor
    HangPredictor()
"""

import html

import ipywidgets as widgets

from talk_helpers.arguments import check_choice, check_int
from talk_helpers.model.simulate import POLICIES, shard_count_rule, shard_sizes_for, simulate
from talk_helpers.palette import BAD_COLOUR, OK_COLOUR
from talk_helpers.verdicts.render import verdict_html
from talk_helpers.widgets.still import WithStill, figure_png, table_figure

__all__ = ["HangPredictor"]

SLIDER_WIDTH = "440px"   # label + readout + a track of ≥ 250 px: easy to drag
LABEL_WIDTH = "90px"
CELL = "border:1px solid #999;padding:3px 10px;text-align:right"


def _slider(value, low, high, name, tooltip):
    return widgets.IntSlider(value, low, high, description=name, tooltip=tooltip,
                             continuous_update=False,
                             style={"description_width": LABEL_WIDTH},
                             layout=widgets.Layout(width=SLIDER_WIDTH))


class HangPredictor(WithStill, widgets.VBox):
    """Dataset size, shards, nodes, workers, micro-batch and drop_last → batches per rank.

    Shards are cut like ``to_iterable_dataset(num_shards)`` (sizes differ by at most one)
    and assigned with ``policy`` (round robin to ranks, then to workers, by default)."""

    def __init__(self, dataset_size=1000, num_shards=16, nodes=2, workers=2,
                 micro_batch_size=8, drop_last=False, policy="round_robin"):
        for name, value, low, high in (("dataset_size", dataset_size, 1, 5000),
                                       ("num_shards", num_shards, 1, 256),
                                       ("nodes", nodes, 1, 8), ("workers", workers, 0, 8),
                                       ("micro_batch_size", micro_batch_size, 1, 64)):
            check_int(name, value, low, high)
        check_choice("drop_last", drop_last, (False, True))
        check_choice("policy", policy, POLICIES)
        self.dataset_size = _slider(dataset_size, 1, 5000, "samples",
                                    "dataset size: samples in the whole dataset")
        self.num_shards = _slider(num_shards, 1, 256, "shards",
                                  "shards the dataset is cut into (sizes differ by at most 1)")
        self.nodes = _slider(nodes, 1, 8, "ranks", "DDP ranks (one process per GPU)")
        self.workers = _slider(workers, 0, 8, "workers",
                               "DataLoader workers per rank (0: the rank reads itself)")
        self.micro_batch_size = _slider(micro_batch_size, 1, 64, "micro-batch",
                                        "samples per batch on each rank")
        self.drop_last = widgets.Checkbox(drop_last, description="drop_last", indent=False,
                                          tooltip="drop each worker's last partial batch")
        self.policy = widgets.Dropdown(options=POLICIES, value=policy, description="policy",
                                       tooltip="how shards are assigned to ranks and workers",
                                       style={"description_width": LABEL_WIDTH},
                                       layout=widgets.Layout(width=SLIDER_WIDTH))
        self.table = widgets.HTML()
        self.sim = None
        controls = (self.dataset_size, self.num_shards, self.nodes, self.workers,
                    self.micro_batch_size, self.policy, self.drop_last)
        for control in controls:
            control.observe(self._on_change, names="value")
        grid = widgets.GridBox(list(controls), layout=widgets.Layout(
            grid_template_columns=f"repeat(2, {SLIDER_WIDTH})", grid_gap="2px 24px"))
        super().__init__([grid, self.table])
        self.redraw()

    def __repr__(self) -> str:
        if self.sim is None:
            return f"HangPredictor: {self._problem()}"
        return f"HangPredictor: {self.sim.verdict}"

    def _on_change(self, _change):
        self.redraw()

    def _problem(self) -> str:
        shards = self.num_shards.value
        return f"{shards} shards need at least {shards} samples"

    def _rule(self):
        if not self.workers.value:
            return None
        return shard_count_rule(self.dataset_size.value, self.num_shards.value,
                                nodes=self.nodes.value, workers=self.workers.value,
                                micro_batch_size=self.micro_batch_size.value,
                                drop_last=self.drop_last.value)

    def redraw(self) -> None:
        size, shards = self.dataset_size.value, self.num_shards.value
        if shards > size:
            self.sim = None
            self.table.value = (f"<b>{html.escape(self._problem())}</b>: raise the dataset "
                                "size or lower the shard count.")
            return
        self.sim = simulate(shard_sizes_for(size, shards), nodes=self.nodes.value,
                            workers=self.workers.value,
                            micro_batch_size=self.micro_batch_size.value,
                            drop_last=self.drop_last.value, policy=self.policy.value)
        self.table.value = self._html()

    def _rows(self) -> list[list[str]]:
        sim = self.sim
        return [[str(r), str(sim.batches_per_rank[r]), str(sim.samples_per_rank[r]),
                 " ".join(map(str, sim.batches_per_worker[r]))] for r in range(sim.nodes)]

    HEADER = ["rank", "batches", "samples", "batches per worker"]

    def _html(self) -> str:
        head = "".join(f'<th style="{CELL};background:#eee">{h}</th>' for h in self.HEADER)
        body = "".join("<tr>" + "".join(f'<td style="{CELL}">{html.escape(v)}</td>' for v in row)
                       + "</tr>" for row in self._rows())
        rule = self._rule()
        rule_line = "" if rule is None else (
            f"<p>the shard-count rule of thumb from a user's notes on a DDP hang: "
            f"{html.escape(repr(rule).removeprefix('rule '))}</p>")
        return (f'<table style="border-collapse:collapse;margin:6px 0">'
                f"<tr>{head}</tr>{body}</table>"
                f'<p>{verdict_html(self.sim.ok, self.sim.verdict[2:])}</p>'
                + rule_line)

    def still_png(self) -> bytes:
        """The table and verdict as a picture (for slides and static pages)."""
        title = (f"{self.dataset_size.value} samples in {self.num_shards.value} shards · "
                 f"{self.nodes.value} ranks × {self.workers.value} workers · micro-batch "
                 f"{self.micro_batch_size.value} · drop_last={self.drop_last.value}")
        if self.sim is None:
            fig = table_figure(title, [], [], footer=self._problem(), footer_colour=BAD_COLOUR)
        else:
            fig = table_figure(title, self.HEADER, self._rows(), footer=self.sim.verdict,
                               footer_colour=OK_COLOUR if self.sim.ok else BAD_COLOUR)
        return figure_png(fig)
