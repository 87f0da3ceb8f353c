"""Step through a DataLoader epoch: main process, index queues, workers, result queue.

The batches, the worker that built each one and the order the main process received
them come from a real run (:func:`talk_helpers.lessons.trace.run_loader`). The steps in between
replay DataLoader's own rules (prefetch ``prefetch_factor`` tasks per worker, hand tasks
out round-robin, deliver in task order, one new task per batch taken), with the workers
taking turns in lockstep. Real workers run concurrently, so their timing differs from run
to run; :func:`replay` checks that the replay delivers exactly the recorded batches and,
for a map-style dataset, sends and receives in the order the main process did.

    from talk_helpers.widgets.dataloader_steps import step_through
    step_through(run)          # a slider over every step
"""

import html
import textwrap
from collections import deque
from dataclasses import dataclass

import ipywidgets as widgets

from talk_helpers.palette import PALETTE
from talk_helpers.widgets.still import WithStill, figure_png, short_line, table_figure

__all__ = ["Step", "StepThrough", "replay", "render_step", "step_through"]

DONE = "done"


@dataclass(frozen=True)
class Step:
    """Everything visible after one step."""

    caption: str
    index_queues: tuple      # per worker: tuple of (task, label)
    workers: tuple           # per worker: a short status
    result_queue: tuple      # (task, worker, ids or DONE), oldest first
    delivered: tuple         # (worker, ids) handed to the training loop so far


def replay(run) -> list:
    """The steps of ``run`` (a LoaderRun with num_workers ≥ 1), first to last."""
    if run.num_workers < 1:
        raise ValueError(f"run.num_workers must be ≥ 1 to show workers, got {run.num_workers}")
    return _Replay(run).steps


class _Replay:
    def __init__(self, run):
        self.run, n = run, run.num_workers
        self.queues = [deque() for _ in range(n)]
        self.status = ["waiting"] * n
        self.output = [deque(b.ids for b in run.batches_of(w)) for w in range(n)]
        self.ended = [False] * n       # the worker found its iterator exhausted
        self.active = [True] * n       # the main process still sends it tasks
        self.cycle, self.send_idx, self.rcvd_idx = 0, 0, 0
        self.task_worker, self.stash = {}, {}
        self.results, self.delivered, self.steps, self.log = deque(), [], [], []
        self.sends = iter(run.sends) if run.kind == "map-style" else None
        self._play()
        got = [(b.worker, tuple(b.ids)) for b in run.batches]
        if self.delivered != got:
            raise AssertionError("the replay does not deliver the recorded batches")
        if run.kind == "map-style" and self.log != run.events:
            raise AssertionError("the replay sends and receives in another order than the run")

    def _snap(self, caption):
        self.steps.append(Step(
            caption,
            tuple(tuple(q) for q in self.queues),
            tuple(self.status),
            tuple(self.results),
            tuple(self.delivered)))

    def _label(self, payload):
        if payload is None:
            return f"{[None] * self.run.batch_size}"
        return f"{list(payload)}"

    def _try_put(self):
        """One new task to the next active worker; its description, or '' if none."""
        if self.sends is not None:
            payload = next(self.sends, StopIteration)
            if payload is StopIteration:
                return ""
        else:
            payload = None
        n = self.run.num_workers
        for _ in range(n):
            worker = self.cycle
            self.cycle = (self.cycle + 1) % n
            if self.active[worker]:
                break
        else:
            return ""
        task = self.send_idx
        self.queues[worker].append((task, self._label(payload)))
        self.task_worker[task] = worker
        self.send_idx += 1
        self.log.append(("send", task))
        return f"sends task {task} {self._label(payload)} to worker {worker}"

    def _play(self):
        n, kind = self.run.num_workers, self.run.kind
        what = ("the indices of one batch" if kind == "map-style"
                else "'next batch, please' (one None per sample)")
        self._snap(f"The main process starts {n} workers. Each has its own index queue; "
                   f"all share one result queue. A task is {what}.")
        for _ in range(self.run.prefetch_factor * n):
            sent = self._try_put()
            if sent:
                self._snap(f"Prefetch: the main process {sent}.")
        while True:
            while self.rcvd_idx < self.send_idx:
                worker = self.task_worker[self.rcvd_idx]
                if self.rcvd_idx in self.stash or self.active[worker]:
                    break
                self.rcvd_idx += 1
            else:
                self.status = ["stopped"] * n
                self._snap("No task is left: the epoch ends and the workers shut down.")
                return
            if self.rcvd_idx in self.stash:
                self._deliver(self.rcvd_idx, self.stash.pop(self.rcvd_idx))
            elif self.results:
                task, worker, ids = self.results.popleft()
                if ids == DONE:
                    self.active[worker] = False
                    sent = self._try_put()
                    then = f" and {sent}" if sent else ""
                    self._snap(f"The main process reads 'worker {worker} is exhausted', "
                               f"stops sending it tasks{then}.")
                elif task == self.rcvd_idx:
                    self._deliver(task, (worker, ids))
                else:
                    self.stash[task] = (worker, ids)
                    self._snap(f"Batch of task {task} arrived early: the main process keeps "
                               f"it aside until task {self.rcvd_idx} is delivered.")
            else:
                self._work()

    def _deliver(self, task, result):
        worker, ids = result
        self.rcvd_idx += 1
        sent = self._try_put()
        self.log.append(("receive", len(self.delivered)))
        self.delivered.append((worker, ids))
        then = f", {sent}" if sent else ""
        self._snap(f"The main process takes task {task}'s batch (worker {worker}){then} "
                   f"and hands the batch to your training loop.")

    def _work(self):
        done = []
        for worker, queue in enumerate(self.queues):
            if not queue:
                self.status[worker] = "exhausted" if self.ended[worker] else "waiting"
                continue
            task, _ = queue.popleft()
            if self.ended[worker]:
                self.status[worker] = f"ignores task {task}"
                continue
            if self.output[worker]:
                ids = self.output[worker].popleft()
                self.results.append((task, worker, ids))
                call = "dataset[i] per index" if self.run.kind == "map-style" else "next()"
                self.status[worker] = f"built task {task}'s batch with {call}"
                done.append(f"worker {worker} builds task {task}'s batch")
            else:
                self.ended[worker] = True
                self.results.append((task, worker, DONE))
                self.status[worker] = f"task {task}: next() raised StopIteration"
                done.append(f"worker {worker} is exhausted")
        self._snap("Workers run in parallel: " + "; ".join(done) + ". Results go to the "
                   "result queue." if done else "Workers have nothing to do.")


# --- Drawing -------------------------------------------------------------------------------

def _text_colour(background):
    return "#000" if background in ("#E69F00", "#56B4E9", "#F0E442", "#009E73") else "#fff"


def _chip(text, worker, dim=False):
    colour = PALETTE[worker % len(PALETTE)]
    style = (f"background:{colour};color:{_text_colour(colour)};padding:1px 5px;"
             "margin:1px;border-radius:4px;display:inline-block;font-family:monospace;"
             f"font-size:85%;{'opacity:0.45;' if dim else ''}")
    return f'<span style="{style}">{html.escape(text)}</span>'


def render_step(steps, k) -> str:
    """HTML for step ``k`` of ``steps`` (from :func:`replay`)."""
    step, n = steps[k], len(steps[k].workers)
    cell = "border:1px solid #bbb;padding:4px;vertical-align:top;"
    head = "".join(f'<th style="{cell}">{h}</th>' for h in
                   ("main process", "index queue", "worker", "result queue", "training loop got"))
    results = " ".join(_chip(f"t{t}: " + ("done" if ids == DONE else str(list(ids))), w)
                       for t, w, ids in step.result_queue) or "empty"
    delivered = " ".join(_chip(str(list(ids)), w) for w, ids in step.delivered) or "nothing yet"
    rows = []
    for w in range(n):
        queue = " ".join(_chip(f"t{t}: {label}", w) for t, label in step.index_queues[w])
        worker = _chip(f"worker {w}", w) + f"<br><small>{html.escape(step.workers[w])}</small>"
        row = f'<td style="{cell}">{queue or "empty"}</td><td style="{cell}">{worker}</td>'
        if w == 0:
            span = f'rowspan="{n}"'
            got = len(step.delivered)
            row = (f'<td {span} style="{cell}width:14%">sent {_sent(steps, k)} tasks'
                   f'<br>received {got} batch{"" if got == 1 else "es"}</td>' + row +
                   f'<td {span} style="{cell}width:22%">{results}</td>'
                   f'<td {span} style="{cell}width:26%">{delivered}</td>')
        rows.append(f"<tr>{row}</tr>")
    caption = f"<p><b>Step {k} of {len(steps) - 1}.</b> {html.escape(step.caption)}</p>"
    return (f'{caption}<table style="border-collapse:collapse;font-size:90%">'
            f"<tr>{head}</tr>{''.join(rows)}</table>")


def _sent(steps, k):
    """How many tasks the main process has sent by step k."""
    seen = set()
    for step in steps[:k + 1]:
        for queue in step.index_queues:
            seen.update(t for t, _ in queue)
        seen.update(t for t, _, _ in step.result_queue)
    return len(seen)


NONE_NOTE = ("Why <code>[None, None, None]</code>? An iterable dataset has no indices to "
             "send. Its sampler (<code>_InfiniteConstantSampler</code>) yields "
             "<code>None</code> forever, batched into one <code>None</code> per sample; the "
             "worker calls <code>next()</code> on its own copy of the dataset's iterator once "
             "per <code>None</code>. Which samples come out is the worker's business, not the "
             "main process's.")


def step_through(run, start=0):
    """A widget over every step of ``run``'s replay: ◀ / ▶, play, and a slider."""
    return StepThrough(run, start)


def _step_table(steps, k) -> tuple[list[str], list[list[str]]]:
    """Step ``k`` as plain-text rows, one per worker (for the still picture)."""
    step = steps[k]
    header = ["worker", "index queue", "status", "result queue", "training loop got"]
    results = " ".join(f"t{t}:" + ("done" if ids == DONE else str(list(ids)))
                       for t, _, ids in step.result_queue) or "empty"
    got = " ".join(str(list(ids)) for _, ids in step.delivered) or "nothing yet"
    rows = []
    for w in range(len(step.workers)):
        queue = " ".join(f"t{t}:{label}" for t, label in step.index_queues[w]) or "empty"
        rows.append([str(w), queue, step.workers[w], results if w == 0 else "",
                     got if w == 0 else ""])
    return header, rows


class StepThrough(WithStill, widgets.VBox):
    """◀ / ▶ buttons, play and a slider over the steps, and the step drawn below."""

    def __init__(self, run, start=0):
        self.steps = replay(run)
        self.kind = run.kind
        last = len(self.steps) - 1
        if not 0 <= start <= last:
            raise ValueError(f"start must be between 0 and {last}, got {start!r}")
        self.slider = widgets.IntSlider(
            value=start, min=0, max=last, description="step", continuous_update=True,
            tooltip="drag, or click and use the arrow keys",
            style={"description_width": "40px"}, layout=widgets.Layout(width="420px"))
        self.play = widgets.Play(value=start, min=0, max=last, interval=1200,
                                 tooltip="play every step")
        widgets.jslink((self.play, "value"), (self.slider, "value"))
        self.back = widgets.Button(description="◀", tooltip="previous step",
                                   layout=widgets.Layout(width="44px"))
        self.forward = widgets.Button(description="▶", tooltip="next step",
                                      layout=widgets.Layout(width="44px"))
        self.back.on_click(lambda _: self.go(self.slider.value - 1))
        self.forward.on_click(lambda _: self.go(self.slider.value + 1))
        self.view = widgets.HTML(self._html(start))
        self.slider.observe(self._show, names="value")
        super().__init__([widgets.HBox([self.back, self.forward, self.play, self.slider]),
                          self.view])

    def go(self, k: int) -> None:
        """Show step ``k`` (clipped to the first and last step)."""
        self.slider.value = min(max(k, 0), len(self.steps) - 1)

    def _show(self, change):
        self.view.value = self._html(change["new"])

    def _html(self, k) -> str:
        note = f"<p><small>{NONE_NOTE}</small></p>" if self.kind != "map-style" else ""
        return render_step(self.steps, k) + note

    def __repr__(self) -> str:
        k = self.slider.value
        return short_line(f"Step {k} of {len(self.steps) - 1}: {self.steps[k].caption}")

    def still_png(self) -> bytes:
        """The current step as a table under its caption (slides, static pages)."""
        k = self.slider.value
        header, rows = _step_table(self.steps, k)
        caption = "\n".join(textwrap.wrap(
            f"Step {k} of {len(self.steps) - 1}. {self.steps[k].caption}", 110))
        footer = ("[None, None, None]: an iterable dataset has no indices; the worker "
                  "calls next() once per None." if self.kind != "map-style" else "")
        return figure_png(table_figure(caption, header, rows, footer=footer, width=10))
