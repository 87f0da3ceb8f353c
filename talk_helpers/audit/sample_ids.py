"""Which sample is which: the ids of every sample in a batch, read the way the user said.

The audit never guesses. A batch's ids come from one of three places:

* **By default**, only from a batch that cannot mean anything else: a 1-D integer
  batch (a tensor, an array, a list of ints; a single int is a batch of one) or a dict
  with an ``"id"`` key.
* **A path** (``--ids PATH``, ``audit(ids="PATH")``): a dict key, a position (in a tuple,
  or along a tensor's first dimension) or an attribute, dotted for nested batches: ``idx``,
  ``0``, ``meta.id``, ``__key__``. Applied
  to a list of per-sample dicts, a key is read from each. What it points at holds one id
  per sample: integers, or strings (``"doc-0042"``, a WebDataset ``__key__``).
* **The content** (``--by-content``, ``audit(by_content=True)``): a stable hash of each
  sample's content along the batch dimension. Tensors and arrays are split into rows;
  lists of strings, bytes or numbers into items; dicts, tuples, named tuples and
  dataclasses field by field (every field must hold the same number of samples).

Anything else raises :class:`UnreadableBatch` with the batch's structure (keys, types,
shapes) and these choices, before a wrong verdict can be drawn from it.

Integer ids are used as they are (they also number samples in storage order, which the
mixing check relies on); they must be ≥ 0, which the rank checks once per epoch. String
ids and contents become 63-bit hashes; a reader keeps the text of string ids (``names``)
so that a report can name them.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

__all__ = ["BY_CONTENT", "DEFAULT", "SampleIds", "UnreadableBatch", "describe", "hash_strings",
           "sample_ids"]

DEFAULT, BY_CONTENT = "default", "content"
_INT64_MAX = np.iinfo(np.int64).max
_HASH_MASK = np.uint64(_INT64_MAX)  # hashes become non-negative int64 ids


class UnreadableBatch(ValueError):
    """A batch whose sample ids the audit cannot tell (exit status 2 on the command line)."""


def sample_ids(ids: str | int | None = None, by_content: bool = False,
               batch_ids=None) -> SampleIds:
    """The reader for one of the choices; bad combinations raise ValueError or TypeError
    naming the argument."""
    chosen = [name for name, value in (("ids", ids), ("by_content", by_content),
                                       ("batch_ids", batch_ids)) if value not in (None, False)]
    if len(chosen) > 1:
        raise ValueError(f"pass at most one of ids, by_content and batch_ids, got "
                         f"{' and '.join(chosen)}")
    if not isinstance(by_content, bool):
        raise TypeError(f"by_content must be True or False, got {by_content!r}")
    if batch_ids is not None and not callable(batch_ids):
        raise TypeError(f"batch_ids must be None or a callable batch -> ids, got {batch_ids!r}")
    if ids is not None:
        if isinstance(ids, bool) or not isinstance(ids, str | int):
            raise TypeError(f"ids must be a path string such as 'idx', '0' or 'meta.id', "
                            f"got {ids!r}")
        path = str(ids)
        if not path or any(not part for part in path.split(".")):
            raise ValueError(f"ids must be a path such as 'idx', '0' or 'meta.id' (dotted, no "
                             f"empty part), got {ids!r}")
        return SampleIds(path=path)
    if by_content:
        return SampleIds(mode=BY_CONTENT)
    if batch_ids is not None:
        return SampleIds(read=batch_ids)
    return SampleIds()


@dataclasses.dataclass(frozen=True)
class SampleIds:
    """``reader(batch) -> (ids, names)``: int64 ids, one per sample, and for string ids
    their text (``{id: text}``, else None). Picklable, so every rank reads the same way."""

    mode: str = DEFAULT
    path: str | None = None
    read: Any = None   # a callable batch -> ids (the Python API's batch_ids)

    @property
    def label(self) -> str:
        """How ids are read, for the report: 'id', 'path idx', 'content', 'batch_ids'."""
        if self.path is not None:
            return f"ids {self.path}"
        if self.read is not None:
            return "batch_ids"
        return "content" if self.mode == BY_CONTENT else "default"

    @property
    def counted(self) -> bool:
        """True when ids cannot be enumerated (contents), so ``expected`` is a count."""
        return self.mode == BY_CONTENT

    def __call__(self, batch) -> tuple[np.ndarray, dict[int, str] | None]:
        if self.mode == BY_CONTENT:
            return _content_ids(batch), None
        if self.read is not None:
            return _legacy_ids(self.read(batch))
        if self.path is not None:
            return _ids_value(_follow(batch, self.path), f"--ids {self.path}", batch)
        return _default_ids(batch)


# ----------------------------------------------------------------- default and path


_TORCH_INTS = frozenset({torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8})


def _default_ids(batch) -> tuple[np.ndarray, dict | None]:
    if type(batch) is torch.Tensor and batch.dtype in _TORCH_INTS and batch.ndim <= 1:
        return _tensor_ids(batch), None   # the common case, first and short
    if isinstance(batch, Mapping) and "id" in batch:
        return _ids_value(batch["id"], "the 'id' key", batch)
    if _is_int(batch) or (_int_array(batch) and batch.ndim <= 1) or _int_list(batch):
        return _ids_value(batch, "the batch", batch)
    raise UnreadableBatch(_ambiguous(batch))


def _ids_value(value, what: str, batch) -> tuple[np.ndarray, dict | None]:
    """One id per sample out of ``value``: ints (any integer dtype) or strings."""
    if _is_int(value):
        return np.array([int(value)], dtype=np.int64), None
    if isinstance(value, str | bytes):
        return hash_strings([value])
    if isinstance(value, torch.Tensor | np.ndarray):
        if value.ndim > 1:
            raise UnreadableBatch(
                f"{what} holds shape {tuple(value.shape)}: one id per sample needs a 1-D "
                f"value (a tensor, an array or a list of ints or strings)\n"
                f"  batch: {describe(batch)}")
        if _int_array(value):
            if isinstance(value, torch.Tensor):
                return _tensor_ids(value), None
            return np.array(value, dtype=np.int64).reshape(-1), None
        if isinstance(value, np.ndarray) and value.dtype.kind in "USO" and all(
                isinstance(v, str | bytes) for v in value.reshape(-1).tolist()):
            return hash_strings(value.reshape(-1).tolist())
        raise UnreadableBatch(f"{what} holds {_dtype_name(value)} values, not integer or "
                              f"string ids\n  batch: {describe(batch)}")
    if isinstance(value, list | tuple):
        if not value:
            return np.empty(0, dtype=np.int64), None
        if all(_is_int(v) for v in value):
            return np.array([int(v) for v in value], dtype=np.int64), None
        if all(isinstance(v, str | bytes) for v in value):
            return hash_strings(list(value))
        if all(isinstance(v, torch.Tensor | np.ndarray) and v.ndim == 0 and _int_array(v)
               for v in value):
            return _ids_value([int(v) for v in value], what, batch)
    raise UnreadableBatch(f"{what} holds {_short_type(value)}, not one integer or string id "
                          f"per sample\n  batch: {describe(batch)}")


def _follow(batch, path: str):
    """``batch`` followed along a dotted path of keys, positions and attributes."""
    value, done = batch, []
    for part in path.split("."):
        value = _step(value, part, ".".join(done), path, batch)
        done.append(part)
    return value


def _step(value, part: str, where: str, path: str, batch):
    here = f"the batch's {where}" if where else "the batch"
    if isinstance(value, Mapping):
        if part in value:
            return value[part]
        if part.lstrip("-").isdigit() and int(part) in value:
            return value[int(part)]
        keys = ", ".join(repr(k) for k in list(value)[:12])
        raise UnreadableBatch(f"--ids {path}: {here} has no key {part!r} (keys: {keys})\n"
                              f"  batch: {describe(batch)}")
    if part.lstrip("-").isdigit():
        if isinstance(value, list | tuple | torch.Tensor | np.ndarray) and not (
                isinstance(value, torch.Tensor | np.ndarray) and value.ndim == 0):
            index = int(part)
            if -len(value) <= index < len(value):
                return value[index]
            raise UnreadableBatch(f"--ids {path}: {here} has {len(value)} items, no position "
                                  f"{index}\n  batch: {describe(batch)}")
        raise UnreadableBatch(f"--ids {path}: {here} is {_short_type(value)}, which has no "
                              f"position {part}\n  batch: {describe(batch)}")
    if isinstance(value, list | tuple) and not _is_record(value) and value and all(
            isinstance(item, Mapping) or _is_record(item) for item in value):
        return [_step(item, part, f"{where}[i]" if where else "[i]", path, batch)
                for item in value]   # a list of per-sample dicts: the key of each
    if not isinstance(value, torch.Tensor | np.ndarray) and hasattr(value, part):
        return getattr(value, part)
    raise UnreadableBatch(f"--ids {path}: {here} is {_short_type(value)}, which has no "
                          f"{part!r}\n  batch: {describe(batch)}")


def _legacy_ids(value) -> tuple[np.ndarray, dict | None]:
    """What a ``batch_ids`` callable returned: integer ids of any shape, flattened (the
    caller said these are the ids), or strings."""
    if isinstance(value, list | tuple) and value and all(isinstance(v, str | bytes)
                                                         for v in value):
        return hash_strings(list(value))
    from talk_helpers.checks import ids_of

    try:
        return np.array(ids_of(value), dtype=np.int64), None
    except (TypeError, ValueError) as exc:
        raise UnreadableBatch(f"batch_ids returned what holds no ids ({exc})") from None


def _tensor_ids(tensor: torch.Tensor) -> np.ndarray:
    """A copy (never a view of the batch's shared memory) as int64."""
    try:
        array = tensor.numpy()
    except (RuntimeError, TypeError):   # on a GPU, or requiring grad
        array = tensor.numpy(force=True)
    return np.array(array, dtype=np.int64).reshape(-1)


# ----------------------------------------------------------------- strings and contents


def _hash64(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") & _INT64_MAX


def hash_strings(values: list) -> tuple[np.ndarray, dict[int, str]]:
    names = {}
    ids = np.empty(len(values), dtype=np.int64)
    for i, value in enumerate(values):
        raw = value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")
        ids[i] = key = _hash64(b"s" + raw)
        names[key] = value if isinstance(value, str) else repr(value)
    return ids, names


def _content_ids(batch) -> np.ndarray:
    digests = _digests(batch, "the batch", batch)
    if digests is None:  # a single sample (batch_size=None)
        digests = [_sample_digest(batch, batch)]
    return np.array([_hash64(d) for d in digests], dtype=np.int64)


def _digests(value, where: str, batch) -> list[bytes] | None:
    """One digest per sample of ``value``, or None when ``value`` is one sample."""
    if isinstance(value, torch.Tensor | np.ndarray):
        if value.ndim == 0:
            return None
        rows = _array(value)
        head = f"{rows.dtype.str}{rows.shape[1:]}".encode()
        flat = np.ascontiguousarray(rows).reshape(len(rows), -1).view(np.uint8)
        return [hashlib.blake2b(head + row.tobytes(), digest_size=16).digest() for row in flat]
    if _is_scalar(value):
        return None
    fields = _fields(value)
    if fields is not None:
        parts = {name: _digests(item, f"{where}.{name}", batch) for name, item in fields}
        sized = {name: d for name, d in parts.items() if d is not None}
        if not sized:
            return None
        sizes = {len(d) for d in sized.values()}
        if len(sizes) > 1:
            listed = ", ".join(f"{name}: {len(d)}" for name, d in sized.items())
            raise UnreadableBatch(f"--by-content: the fields of {where} hold different numbers "
                                  f"of samples ({listed})\n  batch: {describe(batch)}")
        n = sizes.pop()
        return [hashlib.blake2b(b"".join(name.encode() + d[i] for name, d in sized.items()),
                                digest_size=16).digest() for i in range(n)]
    if isinstance(value, list | tuple):
        items = list(value)
        if items and not any(_is_scalar(v) for v in items):
            # (inputs, labels) from a collate function: parts of one batch, each with the
            # samples along its first dimension; else a list of whole samples
            parts = [_digests(item, f"{where}[{i}]", batch) for i, item in enumerate(items)]
            if all(p is not None for p in parts) and len({len(p) for p in parts}) == 1:
                return [hashlib.blake2b(b"".join(p[i] for p in parts), digest_size=16).digest()
                        for i in range(len(parts[0]))]
        return [_sample_digest(item, batch) for item in items]
    raise UnreadableBatch(f"--by-content cannot read {_short_type(value)} at {where}\n"
                          f"  batch: {describe(batch)}")


def _sample_digest(sample, batch) -> bytes:
    """The digest of one whole sample (any nesting of the supported types)."""
    if isinstance(sample, torch.Tensor | np.ndarray):
        array = _array(sample)
        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8).tobytes()
        return hashlib.blake2b(f"{array.dtype.str}{array.shape}".encode() + data,
                               digest_size=16).digest()
    if isinstance(sample, bytes):
        return hashlib.blake2b(b"b" + sample, digest_size=16).digest()
    if isinstance(sample, str):
        return hashlib.blake2b(b"s" + sample.encode("utf-8", "surrogatepass"),
                               digest_size=16).digest()
    if isinstance(sample, bool | int | float) or sample is None:
        return hashlib.blake2b(f"{type(sample).__name__}:{sample!r}".encode(),
                               digest_size=16).digest()
    fields = _fields(sample)
    if fields is None and isinstance(sample, list | tuple):
        fields = [(str(i), item) for i, item in enumerate(sample)]
    if fields is None:
        raise UnreadableBatch(f"--by-content cannot read {_short_type(sample)}\n"
                              f"  batch: {describe(batch)}")
    return hashlib.blake2b(b"".join(name.encode() + _sample_digest(item, batch)
                                    for name, item in fields), digest_size=16).digest()


def _fields(value) -> list[tuple[str, Any]] | None:
    """(name, value) of a dict, named tuple or dataclass; None for anything else."""
    if isinstance(value, Mapping):
        return [(str(k), v) for k, v in value.items()]
    if _is_record(value):
        if dataclasses.is_dataclass(value):
            return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
        return list(zip(value._fields, value, strict=True))
    return None


def _array(value) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach()
        if value.dtype == torch.bfloat16:
            value = value.view(torch.int16)
        return value.numpy(force=True)
    return value


# ----------------------------------------------------------------- describing a batch


def describe(value, depth: int = 0) -> str:
    """A batch's structure in one line: keys, types, shapes (``dict{'x': Tensor[8, 3]
    float32, 'id': list[8] of str}``), for the message that asks where the ids are."""
    if isinstance(value, torch.Tensor):
        return f"Tensor[{', '.join(map(str, value.shape))}] {_dtype_name(value)}"
    if isinstance(value, np.ndarray):
        return f"ndarray[{', '.join(map(str, value.shape))}] {value.dtype}"
    if isinstance(value, str | bytes | int | float | bool) or value is None:
        return type(value).__name__
    if depth >= 3:
        return _short_type(value)
    fields = _fields(value)
    if fields is not None:
        shown = ", ".join(f"{name!r}: {describe(v, depth + 1)}" if isinstance(value, Mapping)
                          else f"{name}={describe(v, depth + 1)}" for name, v in fields[:12])
        more = ", …" if len(fields) > 12 else ""
        head = "dict" if isinstance(value, dict) else type(value).__name__
        return f"{head}{{{shown}{more}}}" if isinstance(value, Mapping) \
            else f"{head}({shown}{more})"
    if isinstance(value, list | tuple):
        kinds = {describe(v, depth + 1) for v in value[:64]}
        if len(kinds) == 1 and len(value) > 3:
            return f"{type(value).__name__}[{len(value)}] of {kinds.pop()}"
        shown = ", ".join(describe(v, depth + 1) for v in value[:6])
        more = ", …" if len(value) > 6 else ""
        return f"{type(value).__name__}({shown}{more})"
    return _short_type(value)


def _ambiguous(batch) -> str:
    return (f"cannot tell which sample is which in this batch:\n  batch: {describe(batch)}\n"
            "Without a flag the audit reads ids only from a 1-D integer batch or a dict with "
            "an 'id' key. Say where the ids are with --ids PATH (a key, a position or a "
            "dotted path: idx, 0, meta.id, __key__), or identify samples by a hash of their "
            "content with --by-content.")


# ----------------------------------------------------------------- small predicates


def _is_int(value) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def _int_array(value) -> bool:
    if isinstance(value, torch.Tensor):
        return not (value.dtype.is_floating_point or value.dtype.is_complex
                    or value.dtype == torch.bool)
    return isinstance(value, np.ndarray) and value.dtype.kind in "iu"


def _int_list(value) -> bool:
    return isinstance(value, list | tuple) and not _is_record(value) and bool(value) \
        and all(_is_int(v) for v in value)


def _is_scalar(value) -> bool:
    return isinstance(value, str | bytes | int | float | bool) or value is None


def _is_record(value) -> bool:
    return (dataclasses.is_dataclass(value) and not isinstance(value, type)) or (
        isinstance(value, tuple) and hasattr(value, "_fields"))


def _short_type(value) -> str:
    return describe(value, 3) if isinstance(value, torch.Tensor | np.ndarray) \
        else type(value).__name__


def _dtype_name(value) -> str:
    return str(value.dtype).removeprefix("torch.")
