"""Notebooks 04 and 05's figures: what each worker saw, and who read which sample, idle
workers included."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from torch.utils.data import DataLoader, IterableDataset, get_worker_info  # noqa: E402

from talk_helpers.diagrams.ddp import rank_worker_grids  # noqa: E402
from talk_helpers.diagrams.seeds import worker_copies  # noqa: E402
from talk_helpers.model.simulate import simulate  # noqa: E402


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_a_persistent_worker_is_drawn_with_the_copy_it_kept():
    new = [[{"worker": w, "seed": 100 * e + w, "epoch": e} for w in (0, 1)] for e in (0, 1)]
    kept = [[{"worker": w, "seed": 500 + w, "epoch": 0} for w in (0, 1)] for _ in (0, 1)]
    fig = worker_copies({"new": new, "persistent": kept})
    new_ax, kept_ax = fig.axes
    assert "worker 1: seed = base_seed + 1\nits copy: epoch 1" in _texts(new_ax)
    assert "set_epoch(1) · no new base_seed\nsame workers, same copies" in _texts(kept_ax)
    assert _texts(kept_ax).count("worker 0: seed = base_seed + 0\nits copy: epoch 0") == 2


@pytest.mark.parametrize("runs, message", [
    ({}, "at least one loader"),
    ({"a": []}, "holds no epoch"),
    ({"a": [[{"worker": 0, "seed": 1}]]}, "'worker', 'seed' and 'epoch'"),
])
def test_malformed_runs_are_refused_by_name(runs, message):
    with pytest.raises(ValueError, match=message):
        worker_copies(runs)


def test_every_worker_of_a_simulation_gets_a_row_and_idle_ones_say_so():
    sim = simulate([20], nodes=2, workers=2, micro_batch_size=5, policy="nested_modulo")
    ax = rank_worker_grids({"two modulos": sim}, n_ids=20).axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["rank 0 · worker 0", "rank 0 · worker 1 (idle)",
                      "rank 1 · worker 0 (idle)", "rank 1 · worker 1"]
    assert "20 of 20 ids read · 0 duplicated · 0 missing · 2 of 4 workers idle" in \
        ax.get_title(loc="left")


def test_pairs_count_duplicated_ids_as_the_exactly_once_check_does():
    pairs = [(0, (0, 0)), (0, (1, 0)), (1, (0, 0)), (1, (1, 0)), (2, (0, 0))]
    ax = rank_worker_grids({"no rank sharding": pairs}, n_ids=4).axes[0]
    assert "3 of 4 ids read · 2 duplicated · 1 missing (▲)" in ax.get_title(loc="left")


def test_an_audit_without_a_real_run_is_refused():
    from talk_helpers.audit import audit

    report = audit(lambda rank, world_size, epoch: [[rank]], world_size=2, epochs=1,
                   in_process=True)
    with pytest.raises(ValueError, match="real run"):
        rank_worker_grids({"in process": report})
    with pytest.raises(ValueError, match="panels must map"):
        rank_worker_grids({})


class TwoModulos(IterableDataset):
    def __init__(self, size, rank, world_size):
        self.size, self.rank, self.world_size = size, rank, world_size

    def __iter__(self):
        info = get_worker_info()
        yield from (i for i in range(self.size)
                    if i % self.world_size == self.rank and i % info.num_workers == info.id)


def two_modulos(rank, world_size, epoch):
    return DataLoader(TwoModulos(8, rank, world_size), batch_size=2, num_workers=2)


@pytest.mark.distributed
def test_a_real_audit_is_drawn_with_the_workers_that_read_nothing():
    from talk_helpers.audit import audit

    report = audit(two_modulos, world_size=2, epochs=1, expected=8)
    ax = rank_worker_grids({"audited": report}, n_ids=8).axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["rank 0 · worker 0", "rank 0 · worker 1 (idle)",
                      "rank 1 · worker 0 (idle)", "rank 1 · worker 1"]
