"""The Megatron-style indexed dataset, its three indices, the samplers and the micro-batch."""

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from talk_helpers.lessons.megatron_data import (
    GPTSamples,
    IndexedDataset,
    MegatronPretrainingRandomSampler,
    MegatronPretrainingSampler,
    TensorPointer,
    build_document_index,
    build_sample_index,
    collate_clm,
    gpt_sample,
    make_documents,
    nanotron_rank_ids,
    preprocess_jsonl,
    sampler_steps,
    split_micro_batch,
    write_indexed_dataset,
)


def samples_from_index(sizes, document_index, sample_index, seq_len):
    docs = make_documents([sizes[d] for d in range(len(sizes))])
    stream = np.concatenate([docs[d] for d in document_index])
    out = []
    for (df, of), (dl, ol) in zip(sample_index[:-1], sample_index[1:], strict=True):
        start = sum(sizes[d] for d in document_index[:df]) + of
        end = sum(sizes[d] for d in document_index[:dl]) + ol + 1
        out.append(stream[start:end])
    return stream, out


# ---------------------------------------------------------------- .bin / .idx


def test_index_file_has_megatrons_header_and_arrays(tmp_path):
    write_indexed_dataset(tmp_path / "corpus", make_documents([3, 5, 2]))
    raw = (tmp_path / "corpus.idx").read_bytes()
    assert raw[:9] == b"MMIDIDX\x00\x00"
    assert struct.unpack_from("<QBQQ", raw, 9) == (1, 8, 3, 4)   # uint16 is code 8
    assert (tmp_path / "corpus.bin").stat().st_size == 10 * 2


def test_reader_returns_what_the_writer_wrote(tmp_path):
    docs = make_documents([3, 5, 2])
    write_indexed_dataset(tmp_path / "c", docs, dtype=np.int32)
    ds = IndexedDataset(tmp_path / "c")
    assert len(ds) == 3
    assert list(ds.sequence_lengths) == [3, 5, 2]
    assert list(ds.sequence_pointers) == [0, 12, 32]
    assert list(ds.document_indices) == [0, 1, 2, 3]
    for i, d in enumerate(docs):
        np.testing.assert_array_equal(ds[i], d)
    np.testing.assert_array_equal(ds.get(1, offset=2, length=2), docs[1][2:4])


def test_reader_rejects_a_file_that_is_not_an_index(tmp_path):
    (tmp_path / "x.idx").write_bytes(b"not an index at all, really")
    (tmp_path / "x.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="not a Megatron index"):
        IndexedDataset(tmp_path / "x")


# ---------------------------------------------------------------- sample index


@pytest.mark.parametrize("sizes,seq_len", [
    ([2, 3, 1, 2, 4], 4),      # every document shorter than seq_len
    ([20, 17], 4),             # documents longer than seq_len
    ([13], 4),                 # a single document
    ([1, 1, 1, 1, 1, 1], 2),   # one-token documents
    ([9, 1, 30, 2], 1),        # seq_len 1
])
def test_each_sample_is_seq_len_plus_one_tokens_of_the_concatenated_documents(sizes, seq_len):
    rng = np.random.RandomState(0)
    doc_index = build_document_index(len(sizes), 2, rng)
    sample_index = build_sample_index(sizes, doc_index, seq_len)
    stream, samples = samples_from_index(sizes, doc_index, sample_index, seq_len)
    assert len(samples) == (len(stream) - 1) // seq_len
    for i, s in enumerate(samples):
        np.testing.assert_array_equal(s, stream[i * seq_len:i * seq_len + seq_len + 1])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=8), st.integers(1, 6))
def test_consecutive_samples_share_exactly_one_token(sizes, seq_len):
    doc_index = np.arange(len(sizes))
    if sum(sizes) < seq_len + 1:
        with pytest.raises(ValueError, match="one sample needs"):
            build_sample_index(sizes, doc_index, seq_len)
        return
    _, samples = samples_from_index(sizes, doc_index,
                                    build_sample_index(sizes, doc_index, seq_len), seq_len)
    assert all(len(s) == seq_len + 1 for s in samples)
    for a, b in zip(samples, samples[1:], strict=False):
        assert a[-1] == b[0]


def test_a_single_short_document_cannot_make_a_sample():
    with pytest.raises(ValueError, match="seq_len \\+ 1 = 5"):
        build_sample_index([4], [0], 4)


@pytest.mark.parametrize("seq_len", [0, -3, 2.5])
def test_seq_len_below_one_is_rejected(seq_len):
    with pytest.raises(ValueError, match="seq_len must be an int >= 1"):
        build_sample_index([5, 5], [0, 1], seq_len)


def test_empty_documents_are_passed_over_as_megatrons_build_sample_idx_does():
    # helpers.cpp by hand: sample 1 ends on doc 0's last token (0, 4); sample 2 takes that
    # token, walks through the empty doc 1 and stops at offset 3 of doc 2.
    assert build_sample_index([5, 0, 5], [0, 1, 2], 4).tolist() == [[0, 0], [0, 4], [2, 3]]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=2, max_size=12).filter(lambda s: sum(s) >= 4),
       st.integers(1, 3))
def test_samples_over_a_corpus_with_empty_documents_are_cut_from_its_tokens(sizes, seq_len):
    document_index = list(range(len(sizes)))
    sample_index = build_sample_index(sizes, document_index, seq_len)
    stream, samples = samples_from_index(sizes, document_index, sample_index, seq_len)
    assert [s.tolist() for s in samples] == [stream[i * seq_len:i * seq_len + seq_len + 1].tolist()
                                             for i in range(len(samples))]


def test_a_corpus_without_sequences_is_rejected():
    with pytest.raises(ValueError, match="sequences must not be empty"):
        build_sample_index([], [], 2)


def test_gpt_samples_read_a_corpus_with_empty_documents(tmp_path):
    docs = make_documents([3, 0, 4, 0, 0, 5])
    write_indexed_dataset(tmp_path / "c", docs)
    samples = GPTSamples(tmp_path / "c", seq_len=3, shuffle=False)
    assert [samples[i]["text"].tolist() for i in range(len(samples))] == \
        [[1, 2, 3, 4], [4, 5, 6, 7], [7, 8, 9, 10]]


def test_sizes_and_pointers_are_per_sequence_and_documents_group_them(tmp_path):
    seqs = make_documents([2, 3, 4])
    write_indexed_dataset(tmp_path / "c", seqs, document_indices=[0, 2, 2, 3])
    ds = IndexedDataset(tmp_path / "c")
    assert len(ds) == 3
    assert ds.sequence_lengths.tolist() == [2, 3, 4]
    assert ds.sequence_pointers.tolist() == [0, 4, 10]
    assert ds.document_indices.tolist() == [0, 2, 2, 3]


@pytest.mark.parametrize("document_indices", [[1, 3], [0, 2], [0, 3, 2, 3]])
def test_writer_rejects_document_indices_that_do_not_cover_the_sequences(tmp_path,
                                                                         document_indices):
    with pytest.raises(ValueError, match="must rise from 0 to len\\(sequences\\) = 3"):
        write_indexed_dataset(tmp_path / "c", make_documents([1, 1, 1]),
                              document_indices=document_indices)


def _lengths_as_tokens(text):
    return [len(word) for word in text.split()]


def test_preprocessing_makes_one_document_per_line_and_one_sequence_per_sentence_when_asked():
    lines = ['{"text": "Hi there. Bye now!"}', '{"text": ""}', '{"text": "One more."}']
    seqs, docs = preprocess_jsonl(lines, _lengths_as_tokens)
    assert [s.tolist() for s in seqs] == [[2, 6, 3, 4], [3, 5]]
    assert docs.tolist() == [0, 1, 1, 2]
    seqs, docs = preprocess_jsonl(lines, _lengths_as_tokens, split_sentences=True,
                                  append_eod=True, eod=0)
    assert [s.tolist() for s in seqs] == [[2, 6], [3, 4, 0], [3, 5, 0]]
    assert docs.tolist() == [0, 2, 2, 3]


def test_preprocessing_rejects_a_tokenizer_that_is_not_a_function():
    with pytest.raises(ValueError, match="tokenize must be a function"):
        preprocess_jsonl(['{"text": "a"}'], tokenize="gpt2")


def test_gpt_sample_has_megatrons_keys_and_shapes():
    out = gpt_sample(np.arange(9))
    assert list(out) == ["tokens", "labels", "loss_mask", "position_ids"]
    assert out["tokens"].tolist() == list(range(8)) and out["labels"].tolist() == list(range(1, 9))
    assert out["position_ids"].tolist() == list(range(8))
    with_mask = gpt_sample(np.arange(9), create_attention_mask=True, eod=3, eod_mask_loss=True)
    assert tuple(with_mask["attention_mask"].shape) == (1, 8, 8)
    blocked = with_mask["attention_mask"][0]
    assert bool(blocked[0, 1]) and not bool(blocked[1, 0])   # True = may not attend
    assert with_mask["loss_mask"].tolist() == [1, 1, 1, 0, 1, 1, 1, 1]


def test_gpt_sample_rejects_a_batch():
    with pytest.raises(ValueError, match="text must be one row"):
        gpt_sample(np.zeros((2, 9)))


def test_gpt_samples_read_the_shuffled_samples_from_disk(tmp_path):
    sizes = [7, 3, 11, 5, 9]
    write_indexed_dataset(tmp_path / "c", make_documents(sizes))
    ds = GPTSamples(tmp_path / "c", seq_len=4, seed=3)
    stream, samples = samples_from_index(sizes, ds.document_index, ds.sample_index, 4)
    assert sorted(ds.shuffle_index.tolist()) == list(range(len(ds)))
    for i in range(len(ds)):
        item = ds[i]
        assert item["id"] == i
        np.testing.assert_array_equal(item["text"], samples[ds.shuffle_index[i]])
    assert ds.indexed.bytes_read > 0


def test_gpt_samples_add_epochs_when_more_samples_are_asked_for(tmp_path):
    write_indexed_dataset(tmp_path / "c", make_documents([6, 6]))
    one = GPTSamples(tmp_path / "c", seq_len=4)
    more = GPTSamples(tmp_path / "c", seq_len=4, num_samples=3 * len(one))
    assert more.num_epochs > 1 and len(more) >= 3 * len(one)


# ---------------------------------------------------------------- samplers


def test_single_sampler_gives_contiguous_slices_per_dp_rank():
    got = [list(MegatronPretrainingSampler(10, 0, 2, r, 2)) for r in range(2)]
    assert got == [[[0, 1], [4, 5]], [[2, 3], [6, 7]]]    # 8, 9 dropped (partial chunk)


def test_resume_with_consumed_samples_equals_the_uninterrupted_run():
    kw = dict(total_samples=64, micro_batch_size=2, dp=2, micro_batches_per_step=2)
    full = sampler_steps(MegatronPretrainingSampler, consumed_samples=0, steps=6, **kw)
    resumed = sampler_steps(MegatronPretrainingSampler, consumed_samples=3 * 8, steps=3, **kw)
    assert full[3:] == resumed


def test_resume_counted_in_steps_instead_of_samples_repeats_data():
    kw = dict(total_samples=64, micro_batch_size=2, dp=2, micro_batches_per_step=2)
    full = sampler_steps(MegatronPretrainingSampler, consumed_samples=0, steps=6, **kw)
    wrong = sampler_steps(MegatronPretrainingSampler, consumed_samples=3, steps=3, **kw)
    seen = {i for step in full[:3] for r in step for i in r}
    assert seen & {i for step in wrong for r in step for i in r}


def test_single_sampler_survives_a_dp_change_but_the_sharded_random_one_does_not():
    for cls, survives in ((MegatronPretrainingSampler, True),
                          (MegatronPretrainingRandomSampler, False)):
        before = sampler_steps(cls, total_samples=48, consumed_samples=0, micro_batch_size=2,
                               dp=2, micro_batches_per_step=1, steps=4)
        after = sampler_steps(cls, total_samples=48, consumed_samples=16, micro_batch_size=2,
                              dp=4, micro_batches_per_step=1, steps=4)
        ids = [i for run in (before, after) for step in run for r in step for i in r]
        assert (len(ids) == len(set(ids))) is survives


def test_sampler_rejects_bad_arguments():
    with pytest.raises(ValueError, match="consumed_samples"):
        MegatronPretrainingSampler(10, 10, 2, 0, 2)
    with pytest.raises(ValueError, match="data_parallel_rank"):
        MegatronPretrainingSampler(10, 0, 2, 2, 2)


@pytest.mark.parametrize(("args", "argument"), [
    ((0, 0, 2, 0, 2), "total_samples must be > 0"),
    ((3, 0, 2, 0, 2), "total_samples must be at least"),
    ((10, -1, 2, 0, 2), "consumed_samples must be >= 0"),
    ((10, 0, 0, 0, 2), "micro_batch_size"),
    ((10, 0, 2, 2, 2), "data_parallel_rank"),
])
def test_random_sampler_rejects_bad_arguments_by_name(args, argument):
    with pytest.raises(ValueError, match=argument):
        MegatronPretrainingRandomSampler(*args)


def test_random_sampler_accepts_an_offset_past_the_first_epoch():
    sampler = MegatronPretrainingRandomSampler(8, 12, 2, 0, 2)
    assert len(list(sampler)) == 1  # epoch 1, half of it already consumed


# ---------------------------------------------------------------- micro-batch


def test_split_micro_batch_shifts_labels_by_one():
    rows = np.arange(12).reshape(2, 6)
    mb = split_micro_batch(rows)
    assert mb["input_ids"].shape == mb["label_ids"].shape == (2, 5)
    np.testing.assert_array_equal(mb["label_ids"][:, :-1], mb["input_ids"][:, 1:])
    np.testing.assert_array_equal(mb["input_ids"], rows[:, :-1])
    np.testing.assert_array_equal(mb["label_ids"], rows[:, 1:])
    assert mb["input_mask"].all() and mb["label_mask"].all()
    assert mb["input_mask"].dtype == bool


@pytest.mark.parametrize("shape", [(6,), (2, 1), (2, 3, 4)])
def test_split_micro_batch_rejects_rows_of_the_wrong_shape(shape):
    with pytest.raises(ValueError, match="micro_batch, seq_len \\+ 1"):
        split_micro_batch(np.zeros(shape))


def test_collator_keeps_inputs_on_the_first_stage_and_labels_on_the_last():
    examples = [{"id": 0, "text": np.arange(5)}, {"id": 1, "text": np.arange(4, 9)}]
    first = collate_clm(examples, pp_rank=0, input_pp_rank=0, output_pp_rank=2)
    last = collate_clm(examples, pp_rank=2, input_pp_rank=0, output_pp_rank=2)
    middle = collate_clm([{}, {}], pp_rank=1, input_pp_rank=0, output_pp_rank=2)
    assert first["label_ids"] == TensorPointer(2) and last["input_ids"] == TensorPointer(0)
    np.testing.assert_array_equal(last["label_ids"], np.vstack([e["text"][1:] for e in examples]))
    assert all(isinstance(v, TensorPointer) for v in middle.values())
    both = collate_clm(examples, pp_rank=0, input_pp_rank=0, output_pp_rank=0)
    assert not any(isinstance(v, TensorPointer) for v in both.values())


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("dp_after", [2, 4])
def test_nanotrons_skip_batch_sampler_skips_samples_not_batches(shuffle, dp_after):
    total, consumed, dp = 64, 24, 2
    before = [nanotron_rank_ids(total, 0, dp, r, shuffle)[:consumed // dp] for r in range(dp)]
    after = [nanotron_rank_ids(total, consumed, dp_after, r, shuffle) for r in range(dp_after)]
    read = [i for ids in before + after for i in ids]
    assert sorted(read) == list(range(total))     # each sample once, even with a new dp
    assert len(after[0]) == total // dp_after - consumed // dp_after


def test_a_resume_with_another_seq_len_trains_tokens_twice_and_skips_others(tmp_path):
    from talk_helpers.checks import check_exactly_once
    from talk_helpers.lessons.feeding_3d import write_corpus
    from talk_helpers.lessons.megatron_data import label_tokens

    prefix = write_corpus(tmp_path)
    kw = dict(micro_batch_size=2, dp=2, micro_batches_per_step=2)
    samples = GPTSamples(prefix, seq_len=8, seed=1234)
    epoch = label_tokens(samples, sampler_steps(MegatronPretrainingSampler,
                                                total_samples=len(samples),
                                                consumed_samples=0, steps=len(samples) // 8,
                                                **kw))

    def resumed(seq_len):
        again = GPTSamples(prefix, seq_len=seq_len, seed=1234)
        before = sampler_steps(MegatronPretrainingSampler, total_samples=len(samples),
                               consumed_samples=0, steps=3, **kw)
        after = sampler_steps(MegatronPretrainingSampler, total_samples=len(again),
                              consumed_samples=24, steps=(len(again) - 24) // 8, **kw)
        return label_tokens(samples, before) + label_tokens(again, after)

    expected = np.concatenate(epoch)
    assert len(np.unique(expected)) == len(expected)
    assert check_exactly_once(resumed(8), expected).ok
    other = check_exactly_once(resumed(12), expected)
    assert other.duplicated_count > 0 and other.missing_count > 0
