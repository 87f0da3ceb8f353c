"""A tiny Megatron-LM-style data pipeline: .bin/.idx files, the three indices, the sampler.

- :func:`write_indexed_dataset` / :class:`IndexedDataset`: the ``MMIDIDX`` format of
  ``megatron/core/datasets/indexed_dataset.py``: lengths and byte offsets per *sequence*,
  and ``document_indices`` marking where each document's sequences start.
- :func:`preprocess_jsonl`: what ``tools/preprocess_data.py`` (``Encoder.encode``) makes of
  JSON lines: one document per line, one sequence per sentence with ``--split-sentences``,
  an end-of-document token with ``--append-eod``.
- :func:`build_document_index`, :func:`build_sample_index`, :func:`build_shuffle_index`:
  what ``GPTDataset._build_document_sample_shuffle_indices`` computes (the sample index is a
  Python port of ``build_sample_idx`` in ``helpers.cpp``). :class:`GPTSamples` puts them
  together; each sample has ``seq_len + 1`` tokens and consecutive samples share one token.
- :class:`MegatronPretrainingSampler` ('single') and :class:`MegatronPretrainingRandomSampler`
  ('cyclic', data_sharding=True): the micro-batch samplers driven by ``consumed_samples``;
  :class:`SkipBatchSampler`: how nanotron's HF-datasets path resumes a DistributedSampler.
- :func:`split_micro_batch` / :func:`collate_clm`: from ``[micro_batch, seq_len + 1]`` rows
  to input_ids, input_mask, label_ids, label_mask (nanotron's ``DataCollatorForCLM``).
- :func:`gpt_sample`: the dict Megatron's current ``GPTDataset.__getitem__`` returns for one
  sample (tokens, labels, loss_mask, position_ids, optionally attention_mask);
- :func:`label_tokens`: the tokens a run trained on as labels, to check a resume by token.
"""

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "GPTSamples", "IndexedDataset", "MegatronPretrainingRandomSampler",
    "MegatronPretrainingSampler", "SkipBatchSampler", "TensorPointer", "build_document_index",
    "build_sample_index", "build_shuffle_index", "collate_clm", "gpt_sample", "label_tokens",
    "make_documents",
    "nanotron_rank_ids", "num_epochs_needed", "preprocess_jsonl", "sampler_steps",
    "split_micro_batch", "write_indexed_dataset",
]

INDEX_HEADER = b"MMIDIDX\x00\x00"
INDEX_VERSION = 1
# Megatron's DType codes (indexed_dataset.py).
DTYPE_CODES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5,
               np.float64: 6, np.float32: 7, np.uint16: 8}
CODE_DTYPES = {code: dtype for dtype, code in DTYPE_CODES.items()}


# --------------------------------------------------------------------------------------
# .bin / .idx


def make_documents(lengths, start_token: int = 1) -> list[np.ndarray]:
    """Documents whose token ids count up across the corpus, so every token is traceable."""
    docs, token = [], start_token
    for length in lengths:
        docs.append(np.arange(token, token + length, dtype=np.int64))
        token += length
    return docs


def write_indexed_dataset(prefix, sequences, dtype=np.uint16,
                          document_indices=None) -> tuple[Path, Path]:
    """Write ``prefix.bin`` (tokens back to back) and ``prefix.idx`` (where each one starts).

    ``sequences`` are token arrays (empty ones allowed); ``document_indices`` lists where each
    document's sequences start, ``[0, ..., len(sequences)]`` (default: one sequence per
    document), as ``IndexedDatasetBuilder.add_document`` records it.
    """
    dtype = np.dtype(dtype).type
    if dtype not in DTYPE_CODES:
        raise ValueError(f"dtype must be one of {[d.__name__ for d in DTYPE_CODES]}, "
                         f"got {dtype!r}")
    sequences = [np.asarray(d) for d in sequences]
    _check_corpus([len(d) for d in sequences])
    if document_indices is None:
        document_indices = np.arange(len(sequences) + 1, dtype=np.int64)
    document_indices = np.asarray(document_indices, dtype=np.int64)
    if (len(document_indices) < 1 or document_indices[0] != 0
            or document_indices[-1] != len(sequences) or np.any(np.diff(document_indices) < 0)):
        raise ValueError(f"document_indices must rise from 0 to len(sequences) = "
                         f"{len(sequences)}, got {document_indices.tolist()}")
    prefix = Path(prefix)
    bin_path, idx_path = prefix.with_suffix(".bin"), prefix.with_suffix(".idx")
    lengths = np.array([len(d) for d in sequences], dtype=np.int32)
    itemsize = np.dtype(dtype).itemsize
    pointers = np.concatenate([[0], np.cumsum(lengths[:-1], dtype=np.int64) * itemsize])
    with open(bin_path, "wb") as f:
        for seq in sequences:
            f.write(seq.astype(dtype).tobytes(order="C"))
    with open(idx_path, "wb") as f:
        f.write(INDEX_HEADER)
        f.write(struct.pack("<Q", INDEX_VERSION))
        f.write(struct.pack("<B", DTYPE_CODES[dtype]))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(document_indices)))
        f.write(lengths.tobytes(order="C"))
        f.write(pointers.astype(np.int64).tobytes(order="C"))
        f.write(document_indices.tobytes(order="C"))
    return bin_path, idx_path


def preprocess_jsonl(lines, tokenize, *, split_sentences: bool = False,
                     append_eod: bool = False, eod: int = 0) -> tuple[list, np.ndarray]:
    """``(sequences, document_indices)`` of JSON lines, as ``tools/preprocess_data.py`` makes them.

    Each line's ``"text"`` is one document. With ``split_sentences`` each sentence (split after
    ``.``, ``!`` or ``?``) becomes its own sequence; sentences with no tokens are dropped. With
    ``append_eod`` the ``eod`` token ends the document's last sequence. ``tokenize`` maps a
    string to a list of ints.
    """
    import json
    import re

    if not callable(tokenize):
        raise ValueError(f"tokenize must be a function from str to a list of ints, "
                         f"got {tokenize!r}")
    sequences, document_indices = [], [0]
    for line in lines:
        text = json.loads(line)["text"]
        parts = [t for t in re.split(r"(?<=[.!?])\s+", text) if t] if split_sentences else [text]
        doc = [list(tokenize(part)) for part in parts]
        doc = [ids for ids in doc if ids]
        if doc and append_eod:
            doc[-1].append(eod)
        sequences += [np.array(ids, dtype=np.int64) for ids in doc]
        document_indices.append(len(sequences))
    return sequences, np.array(document_indices, dtype=np.int64)


class IndexedDataset:
    """Read a ``.bin``/``.idx`` pair; ``get(i, offset, length)`` reads only those tokens.

    Index ``i`` is a sequence; ``document_indices[d]:document_indices[d + 1]`` are the
    sequences of document ``d``.
    """

    def __init__(self, prefix):
        prefix = Path(prefix)
        self.bin_path = prefix.with_suffix(".bin")
        raw = prefix.with_suffix(".idx").read_bytes()
        if raw[:len(INDEX_HEADER)] != INDEX_HEADER:
            raise ValueError(f"{prefix}.idx is not a Megatron index (header {raw[:9]!r})")
        pos = len(INDEX_HEADER)
        (version,) = struct.unpack_from("<Q", raw, pos)
        (code,) = struct.unpack_from("<B", raw, pos + 8)
        (n_seq,) = struct.unpack_from("<Q", raw, pos + 9)
        (n_doc,) = struct.unpack_from("<Q", raw, pos + 17)
        pos += 25
        if version != INDEX_VERSION:
            raise ValueError(f"unsupported index version {version}")
        self.dtype = CODE_DTYPES[code]
        self.sequence_lengths = np.frombuffer(raw, np.int32, n_seq, pos)
        pos += 4 * n_seq
        self.sequence_pointers = np.frombuffer(raw, np.int64, n_seq, pos)
        pos += 8 * n_seq
        self.document_indices = np.frombuffer(raw, np.int64, n_doc, pos)
        self._tokens = np.memmap(self.bin_path, dtype=self.dtype, mode="r")
        self.bytes_read = 0

    def __len__(self) -> int:
        return len(self.sequence_lengths)

    def get(self, idx: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        """Tokens ``offset .. offset+length`` of sequence ``idx``, read from the .bin file."""
        size = int(self.sequence_lengths[idx])
        if length is None:
            length = size - offset
        itemsize = np.dtype(self.dtype).itemsize
        start = int(self.sequence_pointers[idx]) // itemsize + offset
        self.bytes_read += length * itemsize
        return np.array(self._tokens[start:start + length])

    def __getitem__(self, idx: int) -> np.ndarray:
        return self.get(idx)


# --------------------------------------------------------------------------------------
# document, sample and shuffle indices


def _check_corpus(lengths) -> None:
    if len(lengths) == 0:
        raise ValueError("sequences must not be empty: there is nothing to sample from")


def num_epochs_needed(num_samples: int, tokens_per_epoch: int, seq_len: int) -> int:
    """Smallest number of passes over the corpus that yields ``num_samples`` samples."""
    epochs = 1
    while epochs * tokens_per_epoch < num_samples * seq_len + 1:
        epochs += 1
    return epochs


def build_document_index(num_documents: int, num_epochs: int, rng) -> np.ndarray:
    """Every document id once per epoch, all epochs shuffled together (int32)."""
    index = np.tile(np.arange(num_documents, dtype=np.int32), num_epochs)
    if rng is not None:
        rng.shuffle(index)
    return index


def build_sample_index(sizes, document_index, seq_len: int) -> np.ndarray:
    """``[num_samples + 1, 2]`` rows of (position in document_index, token offset).

    Sample ``i`` runs from row ``i`` to row ``i+1`` plus one token: ``seq_len + 1`` tokens
    of the documents laid end to end, so sample ``i+1`` starts on sample ``i``'s last token.
    Like ``build_sample_idx`` in ``helpers.cpp``, a document of 0 tokens is passed over.
    """
    if not isinstance(seq_len, int | np.integer) or seq_len < 1:
        raise ValueError(f"seq_len must be an int >= 1, got {seq_len!r}")
    sizes = np.asarray(sizes, dtype=np.int64)
    _check_corpus(sizes)
    document_index = np.asarray(document_index)
    total = int(sizes[document_index].sum())
    num_samples = (total - 1) // seq_len
    if num_samples < 1:
        raise ValueError(f"the documents hold {total} tokens; one sample needs seq_len + 1 = "
                         f"{seq_len + 1}")
    sample_index = np.zeros((num_samples + 1, 2), dtype=np.int64)
    position, offset = 0, 0
    for i in range(1, num_samples + 1):
        remaining = seq_len + 1
        while remaining:
            left_in_doc = int(sizes[document_index[position]]) - offset
            remaining -= left_in_doc
            if remaining <= 0:
                offset += remaining + left_in_doc - 1   # the shared token starts sample i
                remaining = 0
            else:
                position += 1
                offset = 0
        sample_index[i] = position, offset
    return sample_index


def build_shuffle_index(num_samples: int, rng) -> np.ndarray:
    """A permutation of the sample ids: which sample is read at each position."""
    index = np.arange(num_samples, dtype=np.uint32)
    if rng is not None:
        rng.shuffle(index)
    return index


class GPTSamples:
    """GPTDataset's reading scheme over an :class:`IndexedDataset`.

    ``self[i]`` is ``{"id": i, "text": seq_len + 1 tokens}``: position ``i`` goes through
    the shuffle index, the sample index and the document index to token ranges on disk.
    One ``RandomState(seed)`` shuffles the document index, then the shuffle index.
    """

    def __init__(self, prefix, seq_len: int, num_samples: int | None = None, seed: int = 1234,
                 shuffle: bool = True):
        self.indexed = IndexedDataset(prefix)
        self.seq_len = seq_len
        sizes = self.indexed.sequence_lengths
        tokens_per_epoch = int(sizes.sum())
        epochs = 1 if num_samples is None else num_epochs_needed(num_samples, tokens_per_epoch,
                                                                 seq_len)
        self.num_epochs = epochs
        rng = np.random.RandomState(seed) if shuffle else None
        self.document_index = build_document_index(len(sizes), epochs, rng)
        self.sample_index = build_sample_index(sizes, self.document_index, seq_len)
        self.shuffle_index = build_shuffle_index(len(self.sample_index) - 1, rng)
        self.num_samples = len(self.shuffle_index)

    def __len__(self) -> int:
        return self.num_samples

    def tokens(self, sample: int) -> np.ndarray:
        """The ``seq_len + 1`` tokens of sample ``sample`` (before shuffling)."""
        (doc_f, off_f), (doc_l, off_l) = self.sample_index[sample], self.sample_index[sample + 1]
        docs = self.document_index
        if doc_f == doc_l:
            return self.indexed.get(docs[doc_f], off_f, off_l - off_f + 1)
        parts = [self.indexed.get(docs[doc_f], off_f)]
        parts += [self.indexed.get(docs[d]) for d in range(doc_f + 1, doc_l)]
        parts.append(self.indexed.get(docs[doc_l], 0, off_l + 1))
        return np.concatenate(parts)

    def __getitem__(self, idx: int) -> dict:
        if not 0 <= idx < self.num_samples:
            raise IndexError(f"sample {idx} out of range 0..{self.num_samples - 1}")
        return {"id": int(idx),
                "text": self.tokens(int(self.shuffle_index[idx])).astype(np.int64)}


# --------------------------------------------------------------------------------------
# samplers driven by consumed_samples


class MegatronPretrainingSampler:
    """Megatron's 'single' sampler: contiguous slices of each ``mbs*dp`` chunk of indices.

    It walks global indices ``consumed_samples .. total_samples`` in order; DP rank ``r``
    gets ``[r*mbs, (r+1)*mbs)`` of every chunk. Resuming means passing a new
    ``consumed_samples`` (counted in *samples*, summed over all DP ranks).
    """

    def __init__(self, total_samples: int, consumed_samples: int, micro_batch_size: int,
                 data_parallel_rank: int, data_parallel_size: int, drop_last: bool = True):
        _check_sampler_arguments(total_samples, micro_batch_size, data_parallel_rank,
                                 data_parallel_size)
        if not 0 <= consumed_samples < total_samples:
            raise ValueError(f"consumed_samples must be in 0..{total_samples - 1}, "
                             f"got {consumed_samples}")
        self.total_samples = total_samples
        self.consumed_samples = consumed_samples
        self.micro_batch_size = micro_batch_size
        self.data_parallel_rank = data_parallel_rank
        self.chunk = micro_batch_size * data_parallel_size
        self.drop_last = drop_last

    def __len__(self) -> int:
        return self.total_samples  # as in Megatron: a sample count, not a batch count

    def __iter__(self):
        start = self.data_parallel_rank * self.micro_batch_size
        batch = []
        for idx in range(self.consumed_samples, self.total_samples):
            batch.append(idx)
            if len(batch) == self.chunk:
                yield batch[start:start + self.micro_batch_size]
                batch = []
        if batch and not self.drop_last:
            yield batch[start:start + self.micro_batch_size]


class MegatronPretrainingRandomSampler:
    """Megatron's 'cyclic' sampler with data sharding: each DP rank owns one bucket.

    Rank ``r`` permutes its own contiguous bucket with a generator seeded by the epoch and
    skips ``consumed_samples // dp`` of it on resume, so the buckets depend on the DP size.
    """

    def __init__(self, total_samples: int, consumed_samples: int, micro_batch_size: int,
                 data_parallel_rank: int, data_parallel_size: int):
        _check_sampler_arguments(total_samples, micro_batch_size, data_parallel_rank,
                                 data_parallel_size)
        if total_samples < micro_batch_size * data_parallel_size:
            raise ValueError(f"total_samples must be at least micro_batch_size * "
                             f"data_parallel_size = {micro_batch_size * data_parallel_size} "
                             f"(one step), got {total_samples}")
        if consumed_samples < 0:  # may pass total_samples: this sampler runs many epochs
            raise ValueError(f"consumed_samples must be >= 0, got {consumed_samples}")
        self.total_samples = total_samples
        self.consumed_samples = consumed_samples
        self.micro_batch_size = micro_batch_size
        self.data_parallel_rank = data_parallel_rank
        self.data_parallel_size = data_parallel_size
        self.chunk = micro_batch_size * data_parallel_size
        self.last_batch_size = total_samples % self.chunk

    def __len__(self) -> int:
        return self.total_samples

    def __iter__(self):
        import torch

        active_total = self.total_samples - self.last_batch_size
        epoch = self.consumed_samples // active_total
        in_epoch = self.consumed_samples % active_total
        if in_epoch % self.chunk:
            raise ValueError(f"consumed_samples={self.consumed_samples} is not a multiple of "
                             f"micro_batch_size*dp={self.chunk}")
        bucket_size = (self.total_samples // self.chunk) * self.micro_batch_size
        start = self.data_parallel_rank * bucket_size
        g = torch.Generator()
        g.manual_seed(epoch)
        order = torch.randperm(bucket_size, generator=g).tolist()
        batch = []
        for x in order[in_epoch // self.data_parallel_size:]:
            batch.append(start + x)
            if len(batch) == self.micro_batch_size:
                self.consumed_samples += self.chunk
                yield batch
                batch = []


def _check_sampler_arguments(total_samples: int, micro_batch_size: int,
                             data_parallel_rank: int, data_parallel_size: int) -> None:
    """The checks both Megatron samplers share; each adds its own bound on consumed_samples."""
    if total_samples <= 0:
        raise ValueError(f"total_samples must be > 0, got {total_samples}")
    if micro_batch_size <= 0:
        raise ValueError(f"micro_batch_size must be > 0, got {micro_batch_size}")
    if not 0 <= data_parallel_rank < data_parallel_size:
        raise ValueError(f"data_parallel_rank must be in 0..{data_parallel_size - 1}, "
                         f"got {data_parallel_rank}")


class SkipBatchSampler:
    """nanotron's resume wrapper: drop the first ``consumed // dp`` items of ``sampler``.

    nanotron wraps a per-rank DistributedSampler in it and passes it to the DataLoader as
    ``sampler=``, so the items dropped are sample indices, not batches (despite the name).
    """

    def __init__(self, sampler, skip_batches: int, dp_size: int):
        self.sampler = sampler
        self.skip_batches = skip_batches // dp_size

    def __iter__(self):
        for index, item in enumerate(self.sampler):
            if index >= self.skip_batches:
                yield item

    def __len__(self) -> int:
        return len(self.sampler) - self.skip_batches


def nanotron_rank_ids(total_samples: int, consumed_samples: int, dp: int, dp_rank: int,
                      shuffle: bool = False, seed: int = 42) -> list[int]:
    """The sample indices DP rank ``dp_rank`` reads after resuming nanotron's HF-datasets path."""
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(range(total_samples), num_replicas=dp, rank=dp_rank,
                                 shuffle=shuffle, seed=seed, drop_last=True)
    if consumed_samples > 0:
        sampler = SkipBatchSampler(sampler, skip_batches=consumed_samples, dp_size=dp)
    return list(sampler)


def sampler_steps(sampler_cls, *, total_samples: int, consumed_samples: int,
                  micro_batch_size: int, dp: int, micro_batches_per_step: int,
                  steps: int) -> list[list[list[int]]]:
    """``[step][dp_rank]`` -> the sample indices that DP rank reads in that step."""
    iters = [iter(sampler_cls(total_samples, consumed_samples, micro_batch_size, r, dp))
             for r in range(dp)]
    out = []
    for _ in range(steps):
        out.append([[i for _ in range(micro_batches_per_step) for i in next(it)]
                    for it in iters])
    return out


# --------------------------------------------------------------------------------------
# micro-batch format


@dataclass(frozen=True)
class TensorPointer:
    """nanotron's placeholder: the tensor lives on pipeline rank ``group_rank``."""

    group_rank: int


def gpt_sample(text, *, eod: int | None = None, eod_mask_loss: bool = False,
               create_attention_mask: bool = False) -> dict:
    """What ``GPTDataset.__getitem__`` returns for one sample of ``seq_len + 1`` tokens.

    tokens = text[:-1], labels = text[1:], loss_mask of ones (0 on EOD tokens with
    ``eod_mask_loss``), position_ids ``0..seq_len-1``; ``attention_mask`` (``[1, S, S]``,
    True where attention is *blocked*) only with ``create_attention_mask``.
    """
    import torch

    text = torch.as_tensor(np.asarray(text), dtype=torch.long)
    if text.ndim != 1 or text.numel() < 2:
        raise ValueError(f"text must be one row of seq_len + 1 >= 2 tokens, got shape "
                         f"{tuple(text.shape)}")
    tokens, labels = text[:-1].contiguous(), text[1:].contiguous()
    seq_len = tokens.numel()
    loss_mask = torch.ones(seq_len, dtype=torch.float)
    if eod_mask_loss and eod is not None:
        loss_mask[tokens == eod] = 0.0
    out = {"tokens": tokens, "labels": labels}
    if create_attention_mask:
        out["attention_mask"] = torch.tril(torch.ones(seq_len, seq_len)).unsqueeze(0) < 0.5
    out["loss_mask"] = loss_mask
    out["position_ids"] = torch.arange(seq_len, dtype=torch.long)
    return out


def split_micro_batch(rows) -> dict:
    """``[micro_batch, seq_len + 1]`` token rows -> the four arrays a language model needs.

    input_ids drops the last token, label_ids drops the first one: label ``t`` is the token
    that follows input ``t``. Both masks are all True (no padding in pretraining rows).
    """
    rows = np.asarray(rows)
    if rows.ndim != 2 or rows.shape[1] < 2:
        raise ValueError(f"rows must have shape [micro_batch, seq_len + 1] with seq_len >= 1, "
                         f"got shape {rows.shape}")
    input_ids, label_ids = rows[:, :-1], rows[:, 1:]
    return {"input_ids": input_ids, "input_mask": np.ones(input_ids.shape, dtype=bool),
            "label_ids": label_ids, "label_mask": np.ones(label_ids.shape, dtype=bool)}


def collate_clm(examples, *, pp_rank: int, input_pp_rank: int, output_pp_rank: int) -> dict:
    """nanotron's DataCollatorForCLM: real arrays only on the stage that uses them.

    The first stage keeps input_ids/input_mask, the last keeps label_ids/label_mask, every
    other key is a :class:`TensorPointer`. Middle stages receive ``{}`` examples (from an
    empty dataset of the same length) and get four pointers. ``"id"``, when every example
    has one, is kept for checks.
    Each example holds its ``seq_len + 1`` tokens under ``"input_ids"`` (nanotron's Nanoset
    and HF paths) or ``"text"`` (:class:`GPTSamples`, Megatron's older format).
    """
    out = {"input_ids": TensorPointer(input_pp_rank), "input_mask": TensorPointer(input_pp_rank),
           "label_ids": TensorPointer(output_pp_rank),
           "label_mask": TensorPointer(output_pp_rank)}
    if pp_rank not in (input_pp_rank, output_pp_rank):
        if any(ex for ex in examples):
            raise ValueError("a middle pipeline stage must receive empty examples")
        return out
    parts = split_micro_batch(np.vstack([ex["input_ids"] if "input_ids" in ex else ex["text"]
                                         for ex in examples]))
    if pp_rank == input_pp_rank:
        out["input_ids"], out["input_mask"] = parts["input_ids"], parts["input_mask"]
    if pp_rank == output_pp_rank:
        out["label_ids"], out["label_mask"] = parts["label_ids"], parts["label_mask"]
    if all("id" in ex for ex in examples):
        out["id"] = np.array([ex["id"] for ex in examples], dtype=np.int64)
    return out


class EmptyInfiniteDataset:
    """nanotron's stand-in on middle stages: ``{}`` for every index, the real length."""

    def __init__(self, length: int):
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, idx: int) -> dict:
        return {}


def label_tokens(samples: GPTSamples, steps) -> list[np.ndarray]:
    """The tokens each DP rank trains on as labels, step by step: for ``steps`` as
    :func:`sampler_steps` lists them, every read sample's tokens but its first. Token ids
    that count up across the corpus make these the positions trained on."""
    return [np.concatenate([samples[i]["text"][1:] for i in ids]) if ids else
            np.empty(0, dtype=np.int64) for step in steps for ids in step]
