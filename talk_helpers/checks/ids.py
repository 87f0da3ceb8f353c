"""Sample ids out of whatever a loader yields: ints, integer tensors and arrays of any
shape, dicts with an ``"id"`` key, and (nested) lists or tuples of these."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from talk_helpers.arguments import is_int


def ids_of(samples) -> np.ndarray:
    """Flatten sample ids into one int64 array.

    ``samples`` may be an int, an integer tensor or numpy array of any shape, a dict with
    an ``"id"`` key, or a (nested) list/tuple of these, e.g. the batches a loader yielded.
    """
    return ids_in(samples, "samples")


_EMPTY = np.empty(0, dtype=np.int64)


_INT64_MAX = np.iinfo(np.int64).max




def ids_in(obj, name: str, where: str = "") -> np.ndarray:
    """ids_of for argument ``name``; ``where`` locates obj inside it for error messages."""
    ids = _flatten(obj, name, where or name)
    if ids.size and (low := ids.min()) < 0:
        raise ValueError(f"{name} contains negative ids, e.g. {int(low)}")
    return ids


def _flatten(obj, name: str, where: str) -> np.ndarray:
    if is_int(obj):
        if obj > _INT64_MAX:
            raise ValueError(f"{name} ids must fit in int64, got {obj}{_at(name, where)}")
        return np.array([obj], dtype=np.int64)
    if isinstance(obj, torch.Tensor):
        _check_kind(_torch_kind(obj.dtype), f"{obj.dtype} tensor", name, where)
        return obj.detach().reshape(-1).to("cpu", torch.int64).numpy()
    if isinstance(obj, np.ndarray):
        _check_kind(obj.dtype.kind, f"{obj.dtype} array", name, where)
        if obj.dtype == np.uint64 and obj.size and obj.max() > _INT64_MAX:
            raise ValueError(f"{name} ids must fit in int64, got {obj.max()}{_at(name, where)}")
        return obj.reshape(-1).astype(np.int64, copy=False)
    if isinstance(obj, range):
        return np.arange(obj.start, obj.stop, obj.step, dtype=np.int64)
    if isinstance(obj, Mapping):
        if "id" not in obj:
            raise TypeError(
                f"{name} dicts must have an 'id' key, got keys {sorted(map(str, obj))}"
                f"{_at(name, where)}"
            )
        return _flatten(obj["id"], name, f"{where}['id']")
    if isinstance(obj, list | tuple):
        return _flatten_sequence(obj, name, where)
    kind = _python_kind(obj)
    if kind != "O":
        _check_kind(kind, repr(obj)[:40], name, where)
    raise TypeError(
        f"{name} must hold ints, integer tensors or arrays, dicts with an 'id' key, "
        f"or lists of these; got {type(obj).__name__}{_at(name, where)}"
    )


def _flatten_sequence(seq, name: str, where: str) -> np.ndarray:
    if not seq:
        return _EMPTY
    if is_int(seq[0]):
        # A flat list of ints: one C-level conversion instead of a loop per id.
        try:
            arr = np.asarray(seq)
        except (ValueError, OverflowError):
            arr = None
        if arr is not None and arr.dtype.kind in "iu":
            return arr.reshape(-1).astype(np.int64, copy=False)
    if all(isinstance(item, torch.Tensor) for item in seq):
        # A list of tensor batches: one concatenation in torch, dtypes checked per batch.
        if all(_torch_kind(dtype) == "i" for dtype in {item.dtype for item in seq}):
            with torch.no_grad():
                try:
                    flat = torch.cat(seq)  # 1-D batches: no per-batch reshape needed
                except RuntimeError:
                    flat = torch.cat([item.reshape(-1) for item in seq])
            return flat.reshape(-1).to("cpu", torch.int64).numpy()
    parts = [_flatten(item, name, f"{where}[{i}]") for i, item in enumerate(seq)]
    return np.concatenate(parts)


def _torch_kind(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "b"
    if dtype.is_floating_point:
        return "f"
    if dtype.is_complex:
        return "c"
    return "i"


def _python_kind(obj) -> str:
    if isinstance(obj, bool | np.bool_):
        return "b"
    if isinstance(obj, float | np.floating):
        return "f"
    if isinstance(obj, complex | np.complexfloating):
        return "c"
    if isinstance(obj, str | bytes):
        return "U"
    return "O"


def _check_kind(kind: str, what: str, name: str, where: str) -> None:
    if kind in "iu":
        return
    label = {"b": "bool", "f": "float", "c": "complex", "U": "str", "S": "bytes"}.get(kind)
    detail = f"{label} ({what})" if label else what
    raise TypeError(f"{name} must hold integer ids, got {detail}{_at(name, where)}")


def _at(name: str, where: str) -> str:
    return "" if where == name else f" at {where}"
