"""Every cause in the audit's catalogue, told from the others: a loader planted with each
cause gets its own cause and no other (a confusion matrix). Audits run in process (no
process group), so the whole matrix costs a few seconds."""

import numpy as np
import pytest
import torch
from torch.utils.data import (
    ConcatDataset,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    Sampler,
    get_worker_info,
)

from talk_helpers.audit import audit

# What each cause says, as the report words it (a substring of its cause line).
CATALOGUE = {
    "offset": "shifted by",
    "ranks not split": "every rank reads the same ids",
    "workers not split": "read the same ids: the dataset is split by rank but not by worker",
    "sources collide": "ids collide across sources",
    "padding": "padding: the loader repeats",
    "drop": "a drop: samples that do not fill",
    "random shares": "each rank draws a random share of its own: repeats and gaps that change",
    "overlapping shares": "the ranks' shares overlap and leave gaps",
    "draws again": "draws some samples again",
    "not shuffled": "reads in storage order every epoch",
    "similar order": "moves samples only a little",
    "storage neighbours": "batches hold storage neighbours",
    "partial replay": "part of an epoch replays",
    "set_epoch not called": "set_epoch is not called",
    "seed fixed elsewhere": "a seed fixed elsewhere",
    "persistent workers": "persistent workers keep the copy",
    "order not told apart": "not told apart: an epoch",
    "fewer shards": "fewer shards than ranks × workers",
    "two modulos": "share the factor",
    "idle not told apart": "not told apart: fewer shards",
}


def _batches(ids, size=10):
    ids = np.asarray(ids)
    return [torch.as_tensor(ids[i:i + size]) for i in range(0, len(ids), size)]


def _perm(seed, n):
    return np.random.default_rng(seed).permutation(n)


# --- one loader per cause: make_loader(rank, world_size, epoch) ---------------------------


def offset(rank, world_size, epoch):
    return _batches(10_000 + _perm(epoch, 40)[rank::world_size])


def ranks_not_split(rank, world_size, epoch):
    return _batches(_perm(epoch, 40))


class RankHalf(IterableDataset):
    def __init__(self, rank, world_size, split_workers):
        self.ids = list(range(rank, 40, world_size))
        self.split_workers = split_workers

    def __iter__(self):
        info = get_worker_info()
        ids = self.ids
        if self.split_workers and info is not None:
            ids = ids[info.id::info.num_workers]
        return iter(ids)


def workers_not_split(rank, world_size, epoch):
    return DataLoader(RankHalf(rank, world_size, False), batch_size=5, num_workers=2,
                      multiprocessing_context="fork")


def sources_collide(rank, world_size, epoch):
    return DataLoader(ConcatDataset([list(range(20)), list(range(20))]), batch_size=10)


def padding(rank, world_size, epoch):
    sampler = DistributedSampler(list(range(41)), world_size, rank, shuffle=False)
    return DataLoader(list(range(41)), batch_size=7, sampler=sampler)


def drop(rank, world_size, epoch):
    return _batches(np.arange(41)[rank:40:world_size])


def random_shares(rank, world_size, epoch):
    return _batches(_perm(100 * rank + epoch, 40)[:20])


def overlapping_shares(rank, world_size, epoch):
    return _batches(_perm(100 * rank, 40)[:20])


def draws_again(rank, world_size, epoch):
    return _batches(np.random.default_rng(7).integers(0, 40, 40))


def not_shuffled(rank, world_size, epoch):
    return _batches(np.arange(400), 20)


def similar_order(rank, world_size, epoch):
    """A uniform order; each later epoch puts at each position an id close to the last
    epoch's (ids swapped only among runs of 8 neighbours)."""
    order = _perm(0, 400)
    for e in range(1, epoch + 1):
        swap = np.concatenate([np.random.default_rng(e).permutation(w)
                               for w in np.arange(400).reshape(-1, 8)])
        order = swap[order]
    return _batches(order, 20)


def storage_neighbours(rank, world_size, epoch):
    """Chunks of 20 neighbours in a new order every epoch: each batch one chunk."""
    chunks = np.arange(400).reshape(20, 20)[_perm(epoch, 20)]
    return _batches(chunks.reshape(-1), 20)


def partial_replay(rank, world_size, epoch):
    order = _perm(0, 400)
    if epoch:
        order = np.concatenate([order[:300], order[300:][_perm(epoch, 100)]])
    return _batches(order, 20)


def set_epoch_not_called(rank, world_size, epoch):
    data = list(range(400))
    sampler = DistributedSampler(data, world_size, rank, shuffle=True, seed=0)
    return DataLoader(data, batch_size=20, sampler=sampler)


class FixedSeed(Sampler):
    """Holds the epoch it is given, and shuffles with a seed of its own all the same."""

    def __init__(self, n):
        self.n, self.epoch = n, 0

    def __iter__(self):
        return iter(_perm(0, self.n).tolist())

    def __len__(self):
        return self.n


def seed_fixed_elsewhere(rank, world_size, epoch):
    sampler = FixedSeed(400)
    sampler.epoch = epoch
    return DataLoader(list(range(400)), batch_size=20, sampler=sampler)


class PlainEpoch(IterableDataset):
    """Shuffles with seed + epoch; its epoch is a plain attribute."""

    def __init__(self, n=400):
        self.n, self.epoch = n, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        info = get_worker_info()
        order = _perm(self.epoch, self.n)
        return iter(order[info.id::info.num_workers].tolist())


def persistent_workers(rank, world_size, epoch):
    return DataLoader(PlainEpoch(), batch_size=20, num_workers=2, persistent_workers=True,
                      multiprocessing_context="fork")


def order_not_told_apart(rank, world_size, epoch):
    return _batches(_perm(0, 400), 20)


class OneShard(IterableDataset):
    """Every id in worker 0; ``num_shards`` says how many shards (None: not said)."""

    def __init__(self, num_shards=None):
        if num_shards is not None:
            self.num_shards = num_shards

    def __iter__(self):
        return iter(range(40) if get_worker_info().id == 0 else [])


def fewer_shards(rank, world_size, epoch):
    return DataLoader(OneShard(1), batch_size=10, num_workers=2,
                      multiprocessing_context="fork")


def idle_not_told_apart(rank, world_size, epoch):
    return DataLoader(OneShard(), batch_size=10, num_workers=2, multiprocessing_context="fork")


class TwoModulos(IterableDataset):
    """Keeps id i when i % world_size == rank and i % num_workers == worker."""

    def __init__(self, rank, world_size, n=40):
        self.rank, self.world_size, self.n = rank, world_size, n

    def __iter__(self):
        info = get_worker_info()
        return iter(i for i in range(self.n) if i % self.world_size == self.rank
                    and i % info.num_workers == info.id)


def two_modulos(rank, world_size, epoch):
    return DataLoader(TwoModulos(rank, world_size), batch_size=5, num_workers=2,
                      multiprocessing_context="fork")


def hf_unshuffled_uneven_shards(rank, world_size, epoch):
    """An unshuffled HF iterable dataset over 10 shards of uneven sizes, 2 workers."""
    from datasets import IterableDataset as HFIterable

    sizes = [5, 40, 12, 30, 8, 25, 3, 50, 17, 10]
    starts = np.cumsum([0, *sizes[:-1]])

    def rows(shards):
        for s in shards:
            yield from ({"id": int(i)} for i in range(starts[s], starts[s] + sizes[s]))

    stream = HFIterable.from_generator(rows, gen_kwargs={"shards": list(range(10))})
    return DataLoader(stream.with_format("torch"), batch_size=10, num_workers=2,
                      multiprocessing_context="fork")


def reversed_each_epoch(rank, world_size, epoch):
    """Storage order, then the reverse: the order changes, anti-correlated, nothing kept."""
    order = np.arange(400)
    return _batches(order[::-1].copy() if epoch % 2 else order, 20)


# loader -> (the cause it plants, make_loader, audit keywords)
ONCE = dict(shuffle=False)      # exactly-once causes: the order is not judged
ORDER = dict(world_size=1, shuffle=True)
PLANTED = {
    "offset": ("offset", offset, dict(world_size=2, expected=40, **ONCE)),
    "ranks not split": ("ranks not split", ranks_not_split, dict(world_size=2, **ONCE)),
    "workers not split": ("workers not split", workers_not_split,
                          dict(world_size=2, expected=40, **ONCE)),
    "sources collide": ("sources collide", sources_collide,
                        dict(world_size=1, expected=40, **ONCE)),
    "padding": ("padding", padding, dict(world_size=2, expected=41, **ONCE)),
    "drop": ("drop", drop, dict(world_size=2, expected=41, **ONCE)),
    "random shares": ("random shares", random_shares, dict(world_size=2, expected=40, **ONCE)),
    "overlapping shares": ("overlapping shares", overlapping_shares,
                           dict(world_size=2, expected=40, **ONCE)),
    "draws again": ("draws again", draws_again, dict(world_size=1, expected=40, **ONCE)),
    "not shuffled": ("not shuffled", not_shuffled, ORDER),
    "similar order": ("similar order", similar_order, ORDER),
    "storage neighbours": ("storage neighbours", storage_neighbours, ORDER),
    "partial replay": ("partial replay", partial_replay, ORDER),
    "set_epoch not called": ("set_epoch not called", set_epoch_not_called, ORDER),
    "seed fixed elsewhere": ("seed fixed elsewhere", seed_fixed_elsewhere, ORDER),
    "persistent workers": ("persistent workers", persistent_workers,
                           dict(ORDER, reuse_loader=True, epoch_call="dataset.set_epoch")),
    "order not told apart": ("order not told apart", order_not_told_apart, ORDER),
    "fewer shards": ("fewer shards", fewer_shards, dict(world_size=1, **ONCE)),
    "idle not told apart": ("idle not told apart", idle_not_told_apart,
                            dict(world_size=1, **ONCE)),
    "two modulos": ("two modulos", two_modulos, dict(world_size=2, expected=40, **ONCE)),
    "hf unshuffled": ("not shuffled", hf_unshuffled_uneven_shards, ORDER),
    "reversed": ("storage neighbours", reversed_each_epoch, ORDER),
}


def causes_named(report) -> list[str]:
    """The catalogue's names of every cause the report gives."""
    return [name for c in report.causes for name, words in CATALOGUE.items()
            if words in c.cause]


@pytest.fixture(scope="module")
def named():
    out = {}
    for loader, (_, make_loader, keywords) in PLANTED.items():
        report = audit(make_loader, epochs=2, in_process=True, **keywords)
        out[loader] = (causes_named(report), report)
    return out


def test_every_cause_in_the_catalogue_has_a_planted_loader():
    assert {cause for cause, _, _ in PLANTED.values()} == set(CATALOGUE)


def test_each_planted_loader_gets_its_own_cause_and_no_other(named):
    confusion = {loader: found for loader, (found, _) in named.items()
                 if found != [PLANTED[loader][0]]}
    assert confusion == {}, "\n\n".join(f"{c}: {f}\n{named[c][1]!r}"
                                        for c, f in confusion.items())


def test_two_modulos_are_told_from_the_ids_not_guessed_as_fewer_shards(named):
    _, report = named["two modulos"]
    assert report.results["workers"].data["epochs"][0]["samples_per_worker"] == [[20, 0],
                                                                                [0, 20]]
    assert "fewer" not in repr(report) and "usually" not in repr(report)


def test_an_order_that_changes_is_never_called_similar_or_repeated(named):
    for loader in ("reversed", "storage neighbours"):
        text = repr(named[loader][1])
        assert "similar" not in text and "repeat" not in text, text


def test_set_epoch_not_called_never_appears_when_the_audit_called_it(named):
    _, report = named["persistent workers"]
    assert "set_epoch is not called" not in repr(report)
    assert "set_epoch not called" not in repr(report)
