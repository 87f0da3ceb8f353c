"""The picture of notebook 09's epoch: drawn from real DataLoaders, one box per micro-batch
over the positions its samples hold in the epoch's order."""

import matplotlib

matplotlib.use("Agg")

from talk_helpers.diagrams.reference_epoch import epoch_cut, record_epoch  # noqa: E402


def test_each_rank_reads_its_part_as_runs_of_micro_batches_taken_from_the_workers_in_turn():
    recorded = record_epoch(epoch=1)
    where = {sample: position for position, sample in enumerate(recorded["order"])}
    for rank, batches in enumerate(recorded["ranks"]):
        assert [worker for worker, _ in batches] == [0, 1] * 3
        positions = [sorted(where[i] for i in ids) for _, ids in batches]
        runs = [p for w in (0, 1) for (worker, _), p in zip(batches, positions, strict=True)
                if worker == w]
        flat = [position for run in runs for position in run]
        assert flat == list(range(30 * rank, 30 * rank + 30)), "consecutive runs, in order"
    fig = epoch_cut(recorded)
    boxes = fig.axes[0].patches
    assert len(boxes) == 61 + 12 + 1   # the order's cells, the micro-batches, the dropped one
