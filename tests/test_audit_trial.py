"""The audit tried as a user would, on loaders modelled on what people train with
(tests/audit_trial_loaders.py): each one audited unchanged, with command-line flags only,
correct versions passing and planted bugs caught as what they are.

Every case runs the command's ``main`` in this process with ``--start-method fork`` (two
ranks each), so a case costs its loader's work, not a new interpreter; the libraries are
imported here once so that the forked ranks inherit them.
"""

import importlib
import json
import os
import re
import sys

import pytest

from talk_helpers.audit import cli as audit_cli

pytestmark = pytest.mark.distributed

M = "audit_trial_loaders"
NO_FLAGS = "cannot tell the sample ids"


@pytest.fixture(scope="module", autouse=True)
def libraries_imported_once(tmp_path_factory):
    """The libraries imported, and every file the loaders read built, before any rank
    starts: ranks inherit both, and never race to write the same data."""
    os.environ["AUDIT_TRIAL_DATA"] = str(tmp_path_factory.mktemp("audit-trial-data"))
    sys.modules.pop(M, None)   # its DATA is read when it is imported
    for name in ("datasets", "webdataset", "litdata", "torchdata.stateful_dataloader", M):
        importlib.import_module(name)
    sys.modules[M].build_all()
    yield
    os.environ.pop("AUDIT_TRIAL_DATA", None)


def audit_json(capsys, factory: str, *flags: str) -> tuple[int, dict]:
    keys = sys.modules[M].keys_file()
    status = audit_cli.main([f"{M}:{factory}", *(f.format(keys=keys) for f in flags),
                             "--start-method", "fork", "--json", "--timeout", "300"])
    out = capsys.readouterr().out
    return status, json.loads(out)


def failures(doc: dict) -> list[str]:
    return [p["text"] for p in doc["problems"] if p["mark"] == "✘"]


# (factory, flags, exit status, the ✘ problems in the headline)
CASES = [
    # torchtitan-style: an HF stream split by node, packed, StatefulDataLoader
    ("titan_loader", ["--by-content", "--no-shuffle"], 0, []),
    ("titan_unsplit", ["--by-content", "--no-shuffle"], 1, [r"\d+ identical contents"]),
    ("titan_endless_dicts", ["--by-content", "--steps", "3", "--reuse-loader", "--no-shuffle"],
     0, []),
    # OpenCLIP-style WebDataset: image/text with __key__, split by node and worker
    ("clip_loader", ["--ids", "__key__", "--expected", "32", "--no-shuffle"], 0, []),
    ("clip_unsplit", ["--ids", "__key__", "--expected", "32", "--no-shuffle"], 1,
     ["32 duplicated"]),
    # resampled shards draw with replacement: judged as exactly once, repeats and gaps
    # fail; judged for what they promise (coverage, balance, by shards of 8), they pass
    ("clip_resampled", ["--ids", "__key__", "--expected", "32", "--no-shuffle"], 1,
     [r"\d+ duplicated", r"\d+ missing"]),
    ("clip_resampled", ["--ids", "__key__", "--expected", "32", "--with-replacement",
                        "--mixing", "chunk:8", "--no-shuffle"], 0, []),
    # ImageFolder + DistributedSampler: 101 images padded to 102, float and uint8 pixels
    ("image_folder_loader", ["--by-content", "--expected", "101", "--repeated-by-design", "1",
                             "--shuffle"], 0, []),
    ("image_folder_uint8", ["--by-content", "--expected", "101", "--repeated-by-design", "1",
                            "--shuffle"], 0, []),
    ("image_folder_uint8", ["--by-content", "--expected", "101", "--shuffle"], 1,
     ["1 identical contents"]),
    ("image_folder_without_set_epoch", ["--by-content", "--expected", "101",
                                        "--repeated-by-design", "1", "--shuffle"], 1,
     ["order repeats"]),
    # a Lightning-style DataModule: one loader, set_epoch called by the loop
    ("datamodule_loader", ["--ids", "idx", "--expected", "64", "--reuse-loader",
                           "--epoch-call", "sampler.set_epoch", "--shuffle"], 0, []),
    ("datamodule_loader", ["--ids", "idx", "--expected", "64", "--reuse-loader",
                           "--shuffle"], 1, ["order repeats"]),
    # HF map-style datasets: an int idx column, a string id column
    ("hf_map_loader", ["--ids", "idx", "--expected", "60", "--shuffle"], 0, []),
    ("hf_map_seeded_by_rank", ["--ids", "idx", "--expected", "60", "--shuffle"], 1,
     [r"\d+ duplicated", r"\d+ missing"]),
    # string ids are judged for mixing too, in their sorted order
    ("hf_map_string_ids", ["--ids", "doc_id", "--expected", "60", "--shuffle"], 0, []),
    ("hf_map_string_ids_unsampled", ["--ids", "doc_id", "--expected", "60", "--no-shuffle"],
     1, ["60 duplicated"]),
    # a packing text stream: token windows, no ids
    ("packed_text_loader", ["--by-content", "--no-shuffle"], 0, []),
    ("packed_text_unsharded_workers", ["--by-content", "--no-shuffle"], 1,
     ["16 identical contents"]),
    ("packed_text_uncapped", ["--by-content", "--no-shuffle"], 1,
     ["unequal batches per rank"]),
    # nanoGPT's DataLoaderLite: endless (x, y) windows
    ("nanogpt_loader", ["--by-content", "--steps", "8", "--epochs", "1"], 0, []),
    ("nanogpt_ignoring_rank", ["--by-content", "--steps", "8", "--epochs", "1"], 1,
     ["32 identical contents"]),
    # dataclass and named-tuple batches
    ("dataclass_loader", ["--ids", "sample_ids", "--expected", "40", "--no-shuffle"], 0, []),
    ("namedtuple_loader", ["--ids", "index", "--expected", "200", "--shuffle"], 0, []),
    ("namedtuple_same_rank", ["--ids", "index", "--expected", "200", "--no-shuffle"], 1,
     ["100 duplicated", "100 missing"]),
    # file paths as ids
    ("file_loader", ["--ids", "0", "--expected", "101", "--repeated-by-design", "1",
                     "--no-shuffle"], 0, []),
    ("file_list_twice", ["--ids", "0", "--expected", "101", "--no-shuffle"], 1,
     ["101 duplicated"]),
    # length bucketing: whole batches dealt to ranks, the odd one dropped on purpose
    ("bucketing_loader", ["--expected", "64", "--dropped-by-design", "4", "--no-shuffle"], 0,
     []),
    ("bucketing_per_rank", ["--expected", "64", "--no-shuffle"], 1,
     ["unequal batches per rank"]),
    # a CSV stream sharded by rank and worker
    ("csv_loader", ["--ids", "row_id", "--expected", "50", "--no-shuffle"], 0, []),
    ("csv_unsharded_ranks", ["--ids", "row_id", "--expected", "50", "--no-shuffle"], 1,
     ["50 duplicated"]),
    # an HF iterable dataset whose batches carry an "id" column: no flag needed
    ("hf_iterable_loader", ["--expected", "48", "--no-shuffle"], 0, []),
    ("hf_iterable_unsplit", ["--expected", "48", "--no-shuffle"], 1, ["48 duplicated"]),
    # ids that start at 10 000: declared as a range; a rank that stops a batch early is
    # caught in epoch 0 as in epoch 1
    ("offset_ids_loader", ["--ids", "sample_id", "--id-range", "10000:10240", "--shuffle"],
     0, []),
    ("offset_ids_short", ["--ids", "sample_id", "--id-range", "10000:10240", "--shuffle"],
     1, ["16 missing"]),
    ("offset_ids_short", ["--ids", "sample_id", "--expected", "240", "--shuffle"],
     1, ["240 missing", "224 unexpected"]),
    # a resumed loader whose epoch 1 replays 60% of epoch 0's order: one story
    ("resumed_replay_loader", ["--expected", "256", "--shuffle"], 1, ["order repeats"]),
    # DistributedSampler with and without set_epoch: one finding, not two
    ("sampler_loader", ["--ids", "idx", "--expected", "400", "--shuffle"], 0, []),
    ("sampler_without_set_epoch", ["--ids", "idx", "--expected", "400", "--shuffle"], 1,
     ["order repeats"]),
    # an IterableDataset split by rank, and by worker or not
    ("rank_stream_loader", ["--expected", "96", "--no-shuffle"], 0, []),
    ("rank_stream_unsplit_workers", ["--expected", "96", "--no-shuffle"], 1,
     ["96 duplicated"]),
    # ConcatDataset: sources with their own id ranges, or both numbered from 0
    ("concat_loader", ["--expected", "140", "--shuffle"], 0, []),
    ("concat_colliding", ["--expected", "140", "--shuffle"], 1,
     ["40 duplicated", "40 missing"]),
    # webdataset's WebLoader, its workers counted behind the wrapper (⚠ idle: exit 0)
    ("webloader_loader", ["--ids", "__key__", "--expected", "32", "--no-shuffle"], 0, []),
    # WeightedRandomSampler with replacement, seeded per rank, or alike on every rank
    ("weighted_loader", ["--with-replacement", "--expected", "500"], 0, []),
    ("weighted_seeded_alike", ["--with-replacement", "--expected", "500"], 1,
     ["ranks draw alike"]),
    # WebDataset __key__s: listed in storage order in a file, or sorted; a loader that
    # shuffles shards but not samples is poorly mixed
    ("keyed_loader", ["--ids", "__key__", "--ids-file", "{keys}", "--shuffle"], 0, []),
    ("keyed_unshuffled", ["--ids", "__key__", "--expected", "128", "--shuffle"], 1,
     ["poorly mixed"]),
    # litdata: a chunk-level shuffle judged at its level; its own DDP drop worked out
    ("litdata_chunks_loader", ["--expected", "256", "--shuffle", "--reuse-loader",
                               "--mixing", "chunk:4"], 0, []),
    ("litdata_unshuffled_chunks", ["--expected", "256", "--shuffle", "--reuse-loader",
                                   "--mixing", "chunk:4"], 1, ["not shuffled"]),
    ("litdata_drop", ["--expected", "61", "--dropped-by-design", "auto", "--no-shuffle"], 0,
     []),
    ("litdata_drop", ["--expected", "61", "--no-shuffle"], 1, ["5 missing"]),
]


@pytest.mark.parametrize("factory, flags, status, problems", CASES,
                         ids=[f"{c[0]}-{'pass' if c[2] == 0 else 'caught'}" for c in CASES])
def test_each_trial_loader_is_audited_correctly_with_flags_only(capsys, factory, flags,
                                                               status, problems):
    found, doc = audit_json(capsys, factory, *flags)
    assert found == status == doc["exit_status"], (doc["headline"], doc["error"])
    shown = failures(doc)
    assert len(shown) == len(problems), doc["headline"]
    for text, pattern in zip(shown, problems, strict=True):
        assert re.fullmatch(pattern, text), doc["headline"]
    if (factory, tuple(flags)) in CAUSES:
        assert_cause(doc, *CAUSES[factory, tuple(flags)])


def test_every_cause_listed_belongs_to_a_case():
    assert set(CAUSES) <= {(c[0], tuple(c[1])) for c in CASES}


# (factory, flags) of a case above -> (the cause named, how the audit knows): each finding
# with a usual cause names it, and says what it saw
CAUSES = {
    ("offset_ids_short", ("--ids", "sample_id", "--expected", "240", "--shuffle")):
        ("the ids are the expected ones shifted by +10000", "--id-range 10000:10240"),
    ("sampler_without_set_epoch", ("--ids", "idx", "--expected", "400", "--shuffle")):
        ("set_epoch is not called", "the sampler's epoch (sampler.epoch) was 0 at the "
                                    "start of every epoch"),
    ("rank_stream_unsplit_workers", ("--expected", "96", "--no-shuffle")):
        ("the workers of every rank read the same ids", "came from more than one of its "
                                                        "workers"),
    ("concat_colliding", ("--expected", "140", "--shuffle")):
        ("ids collide across sources", "the duplicated ids are exactly 0–39, each read 2 "
                                       "times, and the missing ones are the top ids 100–139"),
    ("titan_unsplit", ("--by-content", "--no-shuffle")):
        ("the loader is not split by rank", "rank 0 and rank 1 each read all"),
    ("webloader_loader", ("--ids", "__key__", "--expected", "32", "--no-shuffle")):
        ("fewer shards than ranks × workers", "the dataset has 4 shards for 6 readers"),
    ("weighted_seeded_alike", ("--with-replacement", "--expected", "500")):
        ("every rank seeds its sampler alike", "drew the same sample at most positions"),
    ("litdata_drop", ("--expected", "61", "--no-shuffle")):
        ("a drop", "--dropped-by-design auto"),
    ("resumed_replay_loader", ("--expected", "256", "--shuffle")):
        ("part of an epoch replays the last one's order", "60% of epoch 1's positions hold "
                                                          "epoch 0's sample"),
    ("keyed_unshuffled", ("--ids", "__key__", "--expected", "128", "--shuffle")):
        ("batches hold storage neighbours", "each rank's batches score"),
    ("clip_resampled", ("--ids", "__key__", "--expected", "32", "--no-shuffle")):
        ("with replacement", "--with-replacement"),
    ("litdata_unshuffled_chunks", ("--expected", "256", "--shuffle", "--reuse-loader",
                                   "--mixing", "chunk:4")):
        ("the loader reads in storage order every epoch", "each worker's in storage order"),
}


def assert_cause(doc: dict, cause: str, evidence: str) -> None:
    found = [c for c in doc["causes"] if cause in c["cause"]]
    assert len(found) == 1, doc["causes"]
    assert evidence in found[0]["evidence"] + " " + (found[0]["fix"] or "")
    assert all(part in doc["headline"] for part in found[0]["finding"].split(" · "))


def test_workers_behind_a_wrapper_are_counted_or_said_to_be_uncounted(capsys):
    _, doc = audit_json(capsys, "webloader_loader", "--ids", "__key__", "--expected", "32",
                        "--no-shuffle")
    assert doc["epochs"][0]["samples_per_worker"] == [[8, 8, 0], [8, 8, 0]]
    assert "⚠ 2 of 6 workers idle" in doc["headline"]
    _, doc = audit_json(capsys, "litdata_loader", "--expected", "64", "--no-shuffle")
    assert doc["epochs"][0]["samples_per_worker"] == [[16, 16], [16, 16]]
    _, doc = audit_json(capsys, "datamodule_loader", "--ids", "idx", "--expected", "64",
                        "--reuse-loader", "--epoch-call", "sampler.set_epoch")
    assert doc["epochs"][1]["samples_per_worker"] == [[16, 16], [16, 16]]   # persistent


def test_a_loader_with_workers_the_audit_cannot_reach_says_so():
    from talk_helpers.audit.collect import worker_target

    class Hidden:
        num_workers = 4

        def __iter__(self):
            return iter([[0]])

    target, note = worker_target(Hidden())
    assert target is None and note == ("not counted: Hidden has 4 workers but is no "
                                       "DataLoader and holds none the audit can reach")
    assert worker_target([[0], [1]]) == (None, None)


# Without a flag, batches that hold no ids stop the audit (exit 2) with their structure;
# integer pixels, token windows and named-tuple fields are never read as ids.
UNREADABLE = [
    ("titan_loader", "list(dict{'input': Tensor[4, 16] int64}, Tensor[4, 16] int64)"),
    ("clip_loader", "dict{'__key__': list[4] of str, 'image': Tensor[4, 3, 8, 8] float32, "
                    "'text': list[4] of str}"),
    ("image_folder_uint8", "list(Tensor[8, 3, 8, 8] uint8, Tensor[8] int64)"),
    ("packed_text_loader", "Tensor[4, 32] int64"),
    ("nanogpt_loader", "tuple(Tensor[4, 32] int64, Tensor[4, 32] int64)"),
    ("namedtuple_loader", "Example(index=Tensor[10] int64, tokens=Tensor[10, 6] int64, "
                          "label=Tensor[10] int64)"),
    ("dataclass_loader", "ImageBatch(sample_ids=Tensor[5] int64, pixels=Tensor[5, 3, 2, 2] "
                         "uint8)"),
    ("hf_map_loader", "dict{'idx': Tensor[6] int64, 'text': list[6] of str}"),
]


@pytest.mark.parametrize("factory, structure", UNREADABLE, ids=[u[0] for u in UNREADABLE])
def test_without_a_flag_a_batch_that_holds_no_ids_stops_with_its_structure(capsys, factory,
                                                                           structure):
    found, doc = audit_json(capsys, factory)
    assert (found, doc["status"], doc["error"]["kind"]) == (2, "usage", "ids")
    assert f"batch: {structure}" in doc["error"]["message"]


def test_an_endless_loader_without_steps_ends_at_the_deadline_naming_the_flag(capsys):
    status = audit_cli.main([f"{M}:nanogpt_loader", "--by-content", "--start-method", "fork",
                             "--json", "--timeout", "5"])
    doc = json.loads(capsys.readouterr().out)
    assert (status, doc["error"]["kind"]) == (3, "hung")
    assert all(re.match(r"still running, epoch 0, batch \d+", text)
               for text in doc["error"]["progress"].values())
    assert "--steps N" in doc["error"]["hint"]


def test_litdata_keeps_its_own_epoch_so_only_a_reused_loader_shows_its_order_change(capsys):
    _, fresh = audit_json(capsys, "litdata_loader", "--expected", "64", "--shuffle")
    _, reused = audit_json(capsys, "litdata_loader", "--expected", "64", "--shuffle",
                           "--reuse-loader")
    assert fresh["order"]["changes_per_rank"] == {"0": [False], "1": [False]}
    assert reused["order"]["changes_per_rank"] == {"0": [True], "1": [True]}
    # both are poorly mixed, and say so: a batch of 4 comes from one chunk of 8
    for doc in (fresh, reused):
        assert doc["exit_status"] == 1 and "poorly mixed" in failures(doc)
    assert failures(fresh) == ["order repeats", "poorly mixed"]
    assert_cause(fresh, "litdata's StreamingDataLoader counts its own epochs",
                 "was 1 at the start of every epoch")
