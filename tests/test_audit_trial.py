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
    status = audit_cli.main([f"{M}:{factory}", *flags, "--start-method", "fork", "--json",
                             "--timeout", "300"])
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
    # resampled shards draw with replacement: repeats and gaps are the truth, not a bug
    ("clip_resampled", ["--ids", "__key__", "--expected", "32", "--no-shuffle"], 1,
     [r"\d+ duplicated", r"\d+ missing"]),
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
]


@pytest.mark.parametrize("factory, flags, status, problems", CASES,
                         ids=[f"{c[0]}-{'pass' if c[2] == 0 else 'caught'}" for c in CASES])
def test_each_trial_loader_is_audited_correctly_with_flags_only(capsys, factory, flags,
                                                               status, problems):
    found, doc = audit_json(capsys, factory, *flags)
    assert found == status == doc["exit_status"], doc["headline"]
    shown = failures(doc)
    assert len(shown) == len(problems), doc["headline"]
    for text, pattern in zip(shown, problems, strict=True):
        assert re.fullmatch(pattern, text), doc["headline"]


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
