"""The token datasets and the measuring plumbing of notebook 08: counts, never timings."""

import importlib.util
import os
import pickle

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from talk_helpers.lessons import loading_bench as lb
from talk_helpers.lessons.datasets.fast import (
    MASK_ID,
    TokenBatchedIterableDataset,
    TokenIterableDataset,
    TokenMapDataset,
    make_token_memmap,
    mask_tokens,
    open_tokens,
)

N = 1000
SEQ = 16


@pytest.fixture(scope="module")
def tokens_path(tmp_path_factory):
    return make_token_memmap(tmp_path_factory.mktemp("fast") / "tokens.npy", N, SEQ)


def collect(loader):
    batches = list(loader)
    ids = np.concatenate([np.asarray(b["id"]).reshape(-1) for b in batches])
    return batches, ids


def test_memmap_has_the_requested_shape_and_no_special_tokens(tokens_path):
    tokens = open_tokens(tokens_path)
    assert tokens.shape == (N, SEQ) and tokens.dtype == np.int32
    assert tokens.min() >= 4


def test_masking_depends_only_on_tokens_and_index(tokens_path):
    row = open_tokens(tokens_path)[7]
    a, labels = mask_tokens(row, 7, work=2)
    b, _ = mask_tokens(row, 7, work=2)
    assert np.array_equal(a, b)
    assert np.array_equal(labels, row)
    changed = a != labels
    assert np.all(a[changed] == MASK_ID)


def test_work_zero_copies_the_tokens(tokens_path):
    row = open_tokens(tokens_path)[3]
    input_ids, labels = mask_tokens(row, 3, work=0)
    assert np.array_equal(input_ids, row) and np.array_equal(labels, row)


def test_masking_masks_about_fifteen_percent(tokens_path):
    tokens = open_tokens(tokens_path)
    fraction = np.mean([np.mean(mask_tokens(tokens[i], i)[0] == MASK_ID) for i in range(N)])
    assert 0.10 < fraction < 0.20


def test_pickled_dataset_carries_a_path_not_the_tokens(tokens_path):
    dataset = TokenMapDataset(tokens_path)
    dataset[0]  # opens the memmap
    assert len(pickle.dumps(dataset)) < 2000


@pytest.mark.parametrize("num_workers", [0, 2])
def test_every_loader_kind_yields_each_id_once(tokens_path, num_workers):
    for kind in ("map", "iterable", "batched"):
        loader = lb.make_loader(kind, tokens_path, batch_size=64, num_workers=num_workers)
        _, ids = collect(loader)
        assert sorted(ids.tolist()) == list(range(N)), kind


def test_the_three_datasets_give_identical_samples(tokens_path):
    by_id = {}
    for kind in ("map", "iterable", "batched"):
        batches, _ = collect(lb.make_loader(kind, tokens_path, batch_size=50))
        rows = {int(i): (x, y) for b in batches
                for i, x, y in zip(b["id"], b["input_ids"], b["labels"], strict=True)}
        by_id[kind] = rows
    for i in (0, 499, 999):
        for kind in ("iterable", "batched"):
            assert torch.equal(by_id[kind][i][0], by_id["map"][i][0])
            assert torch.equal(by_id[kind][i][1], by_id["map"][i][1])


def test_batched_dataset_yields_stacked_tensors(tokens_path):
    batch = next(iter(TokenBatchedIterableDataset(tokens_path, batch_size=32)))
    assert batch["input_ids"].shape == (32, SEQ) and batch["input_ids"].dtype == torch.int64
    assert batch["id"].tolist() == list(range(32))


def test_iterable_datasets_split_a_rank_into_worker_blocks(tokens_path):
    ranks = [list(TokenIterableDataset(tokens_path, rank=r, world_size=3)) for r in range(3)]
    ids = sorted(s["id"] for rank in ranks for s in rank)
    assert ids == list(range(N))
    assert [len(r) for r in ranks] == [333, 333, 334]


def test_bad_arguments_name_the_argument(tokens_path):
    with pytest.raises(ValueError, match="batch_size"):
        TokenBatchedIterableDataset(tokens_path, batch_size=0)
    with pytest.raises(ValueError, match="rank"):
        TokenIterableDataset(tokens_path, rank=2, world_size=2)
    with pytest.raises(ValueError, match="kind"):
        lb.make_loader("nope", tokens_path, batch_size=4)


def test_batch_len_reads_dicts_tuples_and_tensors():
    assert lb.batch_len({"id": torch.arange(5)}) == 5
    assert lb.batch_len({"id": 3}) == 1
    assert lb.batch_len((np.zeros((4, 2)), "x")) == 4
    assert lb.batch_len(torch.zeros(7, 3)) == 7


def test_throughput_counts_samples_after_the_first_batch(tokens_path):
    loader = lb.make_loader("batched", tokens_path, batch_size=100)
    seen = []
    result = lb.measure_throughput(loader, progress=False, on_batch=seen.append)
    assert result.batches == 10 and len(seen) == 10
    assert result.samples == N - 100
    assert result.rate > 0 and "samples/s" in repr(result)


def test_throughput_stops_at_max_samples(tokens_path):
    loader = lb.make_loader("iterable", tokens_path, batch_size=10, num_workers=1)
    result = lb.measure_throughput(loader, max_samples=200, progress=False)
    assert result.samples == 200 and result.batches == 21


def test_ceiling_reads_every_sample(tokens_path):
    assert lb.measure_ceiling(tokens_path, progress=False).samples == N


def test_training_loop_times_every_step(tokens_path):
    loader = lb.make_loader("batched", tokens_path, batch_size=100)
    timing = lb.time_training_loop(loader, lb.make_train_step(width=8), max_steps=4,
                                   progress=False)
    assert len(timing.data_s) == len(timing.step_s) == 4 and timing.samples == 400
    assert 0 <= timing.data_share <= 1 and "data share" in repr(timing)


def test_epoch_start_times_counts_batches_per_epoch(tokens_path):
    loader = lb.make_loader("iterable", tokens_path, batch_size=250, num_workers=1,
                            persistent_workers=True)
    starts = lb.epoch_start_times(loader, epochs=2)
    assert starts.batches == [4, 4] and len(starts.first_batch_s) == 2


def test_profile_table_names_the_labelled_regions(tokens_path):
    loader = lb.make_loader("batched", tokens_path, batch_size=100)
    table = lb.profile_loop(loader, lb.make_train_step(width=8), max_steps=3,
                            row_limit=100)
    assert "fetch batch" in table and "train step" in table


def test_profile_leaves_no_profiler_log_on_stderr_and_restores_it(tokens_path, capfd):
    loader = lb.make_loader("batched", tokens_path, batch_size=100)
    lb.profile_loop(loader, lb.make_train_step(width=8), max_steps=2)
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"


def test_grid_table_has_ratios_and_the_ceiling(tokens_path):
    results = lb.run_grid(tokens_path, kinds=("map", "batched"), workers=(0,),
                          batch_sizes=(100,), max_seconds=None, progress=False)
    results["reference", 0, 100] = "not available"
    ceiling = lb.measure_ceiling(tokens_path, progress=False)
    table = lb.grid_table(results, ceiling)
    assert "| 1.00 |" in table and "ceiling" in table and "not available" in table
    assert len(table.splitlines()) == 2 + 3 + 1


def test_rebatch_keeps_every_sample_and_mixes_blocks(tokens_path):
    loader = lb.make_loader("batched", tokens_path, batch_size=50, num_workers=2)
    mixed = list(lb.rebatch(loader, 40, buffer_size=200, seed=1))
    ids = np.concatenate([b["id"].numpy() for b in mixed])
    assert sorted(ids.tolist()) == list(range(N))
    assert [len(b["id"]) for b in mixed] == [40] * 25
    assert max(lb.blocks_per_batch(mixed, N, 2)) == 2


def test_worker_batches_come_from_one_worker_block(tokens_path):
    for kind in ("iterable", "batched"):
        loader = lb.make_loader(kind, tokens_path, batch_size=64, num_workers=2)
        assert set(lb.blocks_per_batch(loader, N, 2)) == {1}, kind


def test_blocks_per_batch_uses_the_datasets_block_boundaries():
    batches = [{"id": torch.tensor([3])}, {"id": torch.tensor([2, 3])}]
    # 10 ids in 3 blocks: 0-2, 3-5, 6-9
    assert lb.blocks_per_batch(batches, 10, 3) == [1, 2]


@pytest.mark.skipif(importlib.util.find_spec("datasets") is None, reason="needs datasets")
def test_hf_row_yields_each_id_once_with_two_workers(tokens_path):
    loader = lb.make_loader("hf", tokens_path, batch_size=64, num_workers=2)
    _, ids = collect(loader)
    assert sorted(ids.tolist()) == list(range(N))


@pytest.mark.skipif(importlib.util.find_spec("webdataset") is None, reason="needs webdataset")
def test_wds_row_yields_each_id_once_with_two_workers(tokens_path, tmp_path):
    loader = lb.make_loader("wds", tokens_path, batch_size=64, num_workers=2,
                            data_dir=tmp_path)
    batches, ids = collect(loader)
    assert sorted(ids.tolist()) == list(range(N))
    first = next(iter(lb.make_loader("map", tokens_path, batch_size=N)))
    row = {int(i): x for b in batches for i, x in zip(b["id"], b["input_ids"], strict=True)}
    assert torch.equal(row[123], first["input_ids"][first["id"].tolist().index(123)])


def test_unavailable_reason_is_none_for_builtin_kinds():
    assert lb.unavailable_reason("map") is None
    reference = lb.unavailable_reason("reference")
    assert reference is None or reference.startswith("not available")


def test_loader_passes_prefetch_and_persistence_only_with_workers(tokens_path):
    loader = lb.make_loader("iterable", tokens_path, batch_size=8, num_workers=0,
                            prefetch_factor=4, persistent_workers=True)
    assert isinstance(loader, DataLoader) and loader.num_workers == 0
    loader = lb.make_loader("iterable", tokens_path, batch_size=8, num_workers=1,
                            prefetch_factor=4, persistent_workers=True)
    assert loader.prefetch_factor == 4 and loader.persistent_workers


@pytest.mark.skipif(not lb.reference_available(), reason="needs the reference dataset")
def test_reference_row_yields_the_same_samples_as_batched_in_workers(tokens_path):
    _, ids = collect(lb.make_loader("reference", tokens_path, batch_size=64, num_workers=2))
    assert sorted(ids.tolist()) == list(range(N))
    ref = next(iter(lb.make_loader("reference", tokens_path, batch_size=8)))
    mine = next(iter(lb.make_loader("batched", tokens_path, batch_size=8)))
    assert torch.equal(ref["id"], mine["id"])
    assert torch.equal(ref["input_ids"], mine["input_ids"])


def test_cpu_per_sample_is_a_positive_number_of_microseconds(tokens_path):
    assert lb.cpu_per_sample("batched", tokens_path, batch_size=100, repeats=1) > 0


def test_grid_keeps_every_run_and_reports_the_median_with_its_spread(tokens_path):
    results = lb.run_grid(tokens_path, kinds=("batched",), workers=(0,), batch_sizes=(100,),
                          max_seconds=None, repeats=3, progress=False)
    runs = results["batched", 0, 100]
    assert len(runs.runs) == 3
    assert runs.low <= runs.rate <= runs.high
    assert runs.rate == sorted(r.rate for r in runs.runs)[1]


def test_a_comparison_gives_a_verdict_only_beyond_the_spread():
    def runs(*rates):
        return lb.Runs("x", [lb.Throughput("x", int(r), 1, 1.0, 0.0) for r in rates])

    assert "no verdict" in lb.compare(runs(90, 100, 110), runs(95, 105, 115))
    assert "faster, beyond" in lb.compare(runs(200, 210, 220), runs(95, 105, 115))
    assert "slower, beyond" in lb.compare(runs(50, 60), runs(95, 105))


def test_the_reference_row_reads_the_memmap_not_a_copy(tokens_path):
    dataset = lb.make_loader("reference", tokens_path, batch_size=8).dataset
    assert dataset.num_samples == N and dataset._shards.sources[0] is None
    assert dataset.transform.path == str(tokens_path)


def test_a_data_timer_that_misses_the_wait_for_batches_fails_and_one_that_sees_it_passes():
    missed = lb.check_data_time("recipe", [0.001] * 10, loop_s=1.0, step_s=[0.02] * 10)
    seen = lb.check_data_time("next()", [0.075] * 10, loop_s=1.0, step_s=[0.02] * 10)
    assert not missed.ok and repr(missed).startswith("✘ recipe")
    assert seen.ok and repr(seen).startswith("✔ next()")


@pytest.mark.parametrize("loop_s", [0.0, -1.0, 0.1])
def test_a_loop_shorter_than_its_steps_is_refused_naming_loop_s(loop_s):
    with pytest.raises(ValueError, match="loop_s"):
        lb.check_data_time("t", [0.01], loop_s=loop_s, step_s=[0.1, 0.1])


def test_epoch_samples_are_counted_against_the_share():
    batches = [{"id": torch.arange(4)}] * 3
    assert lb.check_epoch_samples(batches, 12).ok
    over = lb.check_epoch_samples(batches, 3)
    assert not over.ok and "4× its share of 3" in repr(over)
    with pytest.raises(ValueError, match="share"):
        lb.check_epoch_samples(batches, 0)


def test_cpu_per_sample_also_takes_a_loader_factory(tokens_path):
    assert lb.cpu_per_sample(lambda: lb.make_loader("batched", tokens_path, batch_size=50),
                             repeats=1) > 0
    with pytest.raises(TypeError, match="path and batch_size"):
        lb.cpu_per_sample("batched")


def test_with_epoch_after_batched_counts_batches_in_every_worker(tokens_path, tmp_path):
    """The course module's pattern yields workers × batch size × its count; on the loader,
    with_epoch counts the loader's batches."""
    import webdataset as wds
    from torch.utils.data import DataLoader

    shards = lb.write_wds_shards(tokens_path, tmp_path / "wds", n_shards=2)
    batched = lb.wds_dataset(shards, 4)
    per_worker = DataLoader(lb.wds_dataset(shards, 4).with_epoch(6), batch_size=None,
                            num_workers=2, multiprocessing_context="fork")
    assert lb.check_epoch_samples(per_worker, 48).ok
    on_loader = wds.WebLoader(batched, batch_size=None, num_workers=2,
                              multiprocessing_context="fork").with_epoch(12)
    assert lb.check_epoch_samples(on_loader, 48).ok


def _runs(label, *rates):
    return lb.Runs(label, [lb.Throughput(label, int(r), 1, 1.0, 0.0) for r in rates])


def test_more_workers_than_cores_get_a_verdict_only_beyond_the_spread():
    slower = {0: _runs("w0", 5, 6, 7), 2: _runs("w2", 9, 10, 11), 4: _runs("w4", 3, 4, 5)}
    assert lb.beyond_cores(slower, cores=2).endswith("(slower, beyond the spread)")
    faster = {0: _runs("w0", 5, 6, 7), 2: _runs("w2", 9, 10, 11), 8: _runs("w8", 30, 31, 32)}
    assert lb.beyond_cores(faster, cores=2).endswith("(faster, beyond the spread)")
    overlap = {2: _runs("w2", 6, 10, 13), 4: _runs("w4", 7, 9, 12)}
    assert lb.beyond_cores(overlap, cores=2).endswith("(no verdict: within the spread)")
    assert lb.beyond_cores({0: _runs("w0", 1), 2: _runs("w2", 2)}, cores=2).startswith(
        "· nothing to compare")
