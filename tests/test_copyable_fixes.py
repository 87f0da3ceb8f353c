"""The fixes a reader copies from notebooks 06-11, tried on layouts they were not written
for: uneven files, a rank with one file, more workers than files. A fix holds there, or
the notebook shows where it stops holding."""

import multiprocessing
from functools import partial

import pytest
from notebook_code import importable_names

from talk_helpers.audit import audit
from talk_helpers.runtime.start_cost import time_limit_s

pytestmark = [pytest.mark.distributed,
              pytest.mark.filterwarnings("ignore:This DataLoader will create")]


def _audit(make_loader, expected, **options):
    return audit(make_loader, world_size=2, epochs=1, expected=expected,
                 timeout_s=time_limit_s(30, interpreters=8), **options)


def test_10_stopping_together_keeps_ranks_in_step_on_files_of_40_7_7_7_rows():
    cell = importable_names("10", upto="nb10-uneven-files")
    together = _audit(partial(cell["make_hf_in_step"], build=cell["make_hf_files"]), 61,
                      shuffle=False, dropped_by_design=30)
    assert together.ok, together
    assert list(together.checks[0].batch_counts.counts) == [4, 4]


def test_10_a_fixed_count_of_6_is_shown_failing_on_files_of_40_7_7_7_rows():
    cell = importable_names("10", upto="nb10-uneven-files")
    capped = _audit(partial(cell["make_hf_files"], steps=6), 61, shuffle=False)
    epoch = capped.checks[0]
    assert list(epoch.batch_counts.counts) == [6, 4]
    assert epoch.exactly_once.missing_count == 20


# Layouts the fixes of notebooks 06 and 11 were not written for: shards of 5, 3, 3, 3 ids
# there. Here a rank with one file (rank 1 holds shard 1 alone) whose file is short, and
# more workers than a rank has files.
ONE_SHORT_FILE = {"shard_sizes": [6, 2, 5], "workers": 3, "batch_size": 2}


def _batches_per_rank(make_loader, world_size=2):
    return [list(make_loader(rank, world_size, 0)) for rank in range(world_size)]


def test_06_a_fixed_count_keeps_ranks_in_step_with_a_rank_of_one_short_file():
    cell = importable_names("06", upto="nb06-9eb3732b")
    layout = partial(cell["make_sharded_loader"], **ONE_SHORT_FILE)
    per_rank = _batches_per_rank(layout)
    steps = min(len(batches) for batches in per_rank)
    kept = {i for batches in per_rank for batch in batches[:steps] for i in batch.tolist()}
    dropped = sorted(set(range(13)) - kept)
    fixed = partial(cell["make_fixed_count_loader"], steps=steps, **ONE_SHORT_FILE)
    report = _audit(fixed, 13, shuffle=False, dropped_by_design=dropped)
    assert report.ok, report
    assert set(report.checks[0].batch_counts.counts) == {steps}


@pytest.mark.parametrize("fix", ["train_until_any_exhausted", "train_with_join"])
def test_06_the_training_loop_fixes_end_on_every_rank_with_a_rank_of_one_short_file(fix):
    from talk_helpers.runtime import run_world

    cell = importable_names("06", upto="nb06-072f3180")
    layout = partial(cell["make_sharded_loader"], **ONE_SHORT_FILE)
    shortest = min(len(batches) for batches in _batches_per_rank(layout))
    world = run_world(cell[fix], 2, args=(layout,), collective_timeout_s=30,
                      timeout_s=time_limit_s(60, interpreters=8))
    assert world.ok, world
    steps = [result["steps"] for result in world.results]
    if fix == "train_until_any_exhausted":
        assert steps == [shortest, shortest]
    else:  # join lets every rank read all its batches; the short one shadows the rest
        assert min(steps) == shortest and max(steps) > shortest


@pytest.mark.parametrize("dataset_size", [1, 3, 7])
def test_11_evaluating_each_sample_once_holds_when_a_rank_has_fewer_or_none(dataset_size):
    from talk_helpers.runtime import run_world

    cell = importable_names("11", upto="7c6251be")
    world = run_world(cell["evaluate_each_once"], 3, args=(dataset_size,),
                      timeout_s=time_limit_s(30, interpreters=3))
    assert world.ok, world
    seen = sorted(i for result in world.results for i in result[0])
    assert seen == list(range(dataset_size))
    assert {tuple(result[1]) for result in world.results} == {
        (sum(i % 3 != 0 for i in range(dataset_size)), dataset_size)}


@pytest.mark.parametrize("captions", [401, 130])
def test_11_the_final_loader_gives_every_rank_as_many_batches_on_other_sizes(captions, tmp_path):
    cell = importable_names("11", upto="04ab02ae")
    path = cell["write_caption_tokens"](captions, str(tmp_path / "tokens.npy"))
    per_rank = _batches_per_rank(partial(cell["make_final_loader"], path=path))
    assert len(per_rank[0]) == len(per_rank[1]), [len(b) for b in per_rank]
    ids = [i for batches in per_rank for batch in batches for i in batch["id"].tolist()]
    ways = 2 * 2  # ranks × workers: past a multiple of it, a few samples wait for an epoch
    assert len(ids) == len(set(ids)) == captions - captions % ways


def test_11_the_first_rank_of_a_node_is_found_under_torchrun_srun_or_mpirun(monkeypatch):
    cell = importable_names("11", upto="eb5afc04")
    for name in cell["LOCAL_RANK_VARIABLES"]:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RuntimeError, match="no launcher set any of"):
        cell["local_rank_zero"](0)
    monkeypatch.setenv("SLURM_LOCALID", "1")  # plain srun: no LOCAL_RANK
    assert not cell["local_rank_zero"](5)
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0")  # srun's variable comes first
    assert not cell["local_rank_zero"](5)
    monkeypatch.delenv("SLURM_LOCALID")
    assert cell["local_rank_zero"](4)


def test_08_counting_an_epoch_after_the_workers_holds_with_more_workers_than_files(tmp_path):
    import webdataset as wds

    from talk_helpers.lessons import loading_bench as lb
    from talk_helpers.lessons.datasets.fast import make_token_memmap

    cell = importable_names("08", upto="nb08-b1c98a0d")
    tokens = make_token_memmap(tmp_path / "tiny.npy", 120, seq_len=16)
    shards = lb.write_wds_shards(tokens, tmp_path / "wds", n_shards=2)
    fast = "fork" if "fork" in multiprocessing.get_all_start_methods() else None  # as 08 does
    loader = wds.WebLoader(cell["batched_shards"](shards, 4), batch_size=None, num_workers=3,
                           multiprocessing_context=fast).with_epoch(48 // 4)
    assert lb.check_epoch_samples(loader, 48).ok
