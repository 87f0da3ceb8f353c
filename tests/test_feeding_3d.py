"""Feeding a TP × DP × PP world of 8 real gloo ranks, nanotron style and Megatron style."""

import time

import pytest
from torch.utils.data import DistributedSampler

from talk_helpers.lessons.feeding_3d import (
    FeedConfig,
    check_feeding,
    feed_rank,
    feeding_table,
    megatron_builder,
    reads_data,
    results_of,
    write_corpus,
)
from talk_helpers.runtime.world import run_ranks

pytestmark = pytest.mark.distributed


def world_sampler(dataset, dp_rank, dp_size):
    """DistributedSampler's defaults: the whole world, the global rank."""
    return DistributedSampler(dataset, shuffle=False, drop_last=True)


def build_readers_only(rank, world_size, cfg):
    if not reads_data(rank, world_size, cfg):
        time.sleep(2)
        return "skipped the builder"
    return megatron_builder(rank, world_size, cfg)


def build_every_rank(rank, world_size, cfg):
    return megatron_builder(rank, world_size, cfg)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    prefix = write_corpus(tmp_path_factory.mktemp("corpus"))
    tasks = (("nanotron", FeedConfig(prefix)),
             ("megatron", FeedConfig(prefix)),
             ("nanotron", FeedConfig(prefix, make_sampler=world_sampler)),
             ("nanotron", FeedConfig(prefix, tp=2, dp=1, pp=4)),
             ("megatron", FeedConfig(prefix, tp=2, dp=1, pp=4)),
             ("megatron", FeedConfig(prefix, consumed_samples=8, steps=2)))
    results = run_ranks(feed_rank, 8, args=(tasks,), timeout_s=240, start_method="fork")
    return tasks, results


@pytest.mark.parametrize("task", [0, 1, 3, 4, 5])
def test_both_styles_pass_every_check(world, task):
    tasks, results = world
    report = check_feeding(results_of(results, task), tasks[task][1])
    assert report.ok, report


def test_a_sampler_over_the_whole_world_splits_tp_groups(world):
    tasks, results = world
    report = check_feeding(results_of(results, 2), tasks[2][1])
    assert not report.same_in_tp_group
    assert not report.labels_are_shifted_tokens
    assert not report.exactly_once.ok


def test_only_tp_rank_zero_reads_in_megatron_and_every_tp_rank_in_nanotron(world):
    _, results = world
    nanotron, megatron = results_of(results, 0), results_of(results, 1)
    assert all(r["bytes_read"] > 0 for r in nanotron)
    assert [r["bytes_read"] > 0 for r in megatron] == [r["tp"] == 0 for r in megatron]
    assert sum(r["bytes_read"] for r in nanotron) == 2 * sum(r["bytes_read"] for r in megatron)
    assert sum(r["bytes_sent"] for r in megatron) == sum(r["bytes_received"] for r in megatron)
    assert "total" in feeding_table(megatron)


def test_middle_stages_get_pointers_in_nanotron_and_nothing_in_megatron(world):
    _, results = world
    nanotron, megatron = results_of(results, 3), results_of(results, 4)
    for r in nanotron + megatron:
        if r["pp"] in (1, 2):
            assert r["bytes_read"] == 0 and r["bytes_received"] == 0
            assert all(s["tokens"] is None and s["labels"] is None for s in r["seen"])
    assert {r["role"] for r in nanotron if r["pp"] in (1, 2)} == {"empty dataset"}
    assert {r["role"] for r in megatron if r["pp"] in (1, 2)} == {"nothing"}


def test_a_resumed_megatron_world_continues_where_the_full_one_was(world):
    _, results = world
    full, resumed = results_of(results, 1), results_of(results, 5)

    def ids(seen):
        return [None if s["ids"] is None else s["ids"].tolist() for s in seen]

    for a, b in zip(full, resumed, strict=True):
        assert ids(a["seen"][2:]) == ids(b["seen"])      # 1 step = 2 micro-batches skipped


def test_the_dataset_builder_hangs_unless_every_rank_enters_it(tmp_path):
    cfg = FeedConfig(write_corpus(tmp_path))
    skipped = run_ranks(build_readers_only, 8, args=(cfg,), timeout_s=60,
                        collective_timeout_s=1, start_method="fork")
    assert skipped == ["timed out in the builder's barrier", "skipped the builder"] * 4
    everyone = run_ranks(build_every_rank, 8, args=(cfg,), timeout_s=60,
                         collective_timeout_s=1, start_method="fork")
    assert everyone == ["built the dataset", "barrier only"] * 4


def test_megatron_reads_on_tp_rank_zero_of_the_first_and_last_stages(tmp_path):
    cfg = FeedConfig("unused", tp=2, dp=1, pp=4)
    assert [r for r in range(8) if reads_data(r, 8, cfg)] == [0, 6]


def test_the_mystery_loader_leaves_half_the_samples_unread():
    from talk_helpers.audit import audit
    from talk_helpers.lessons.feeding_3d import make_mystery_dp_loader

    report = audit(make_mystery_dp_loader, world_size=2, epochs=1, expected=32, in_process=True)
    assert report.checks[0].exactly_once.missing_ids.tolist() == list(range(1, 32, 2))
    assert report.checks[0].exactly_once.duplicate_ids.size == 0
