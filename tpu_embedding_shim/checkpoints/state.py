"""The dense model's state: what a numpy (or torch) model_fn keeps between steps and checkpoints.

TensorFlow keeps a model's dense variables in the graph and its
checkpoints. A numpy model_fn keeps them in `params['dense_state']`, a
`DenseState` dict the runner owns: it survives from step to step and from
call to call, is saved with every checkpoint (in the TensorFlow checkpoint,
`to_tensors`), and is restored when training resumes.

Values may be

- numpy arrays or numbers (a python number comes back as the same python
  type, a numpy scalar as a 0-d array), e.g. weights and optimizer slots;
  None, strings, and lists / tuples / dicts of all these;
- objects with `state_dict()` / `load_state_dict()`, e.g. a torch module or
  optimizer: their state dict is saved, and loaded back into the object the
  model_fn puts under the same key (at once if it is already there, else as
  soon as it is set).

In a TensorFlow checkpoint (`to_tensors`) every number is a tensor named
by its key: `w` for `state["w"]`, `model/fc.weight` for an entry of the
state dict of `state["model"]` (nested keys and list positions joined by
'/'); python numbers become 0-d int64 / float64 / bool tensors. The rest
of the structure (containers, None, strings, which values were python
numbers or torch tensors) is a JSON `structure` kept beside them.

A value restored from a checkpoint TensorFlow wrote (`add_pending`) waits
for the model_fn to set its key, as an object's state dict does: then
`state.setdefault("dense/kernel", initial)` returns the checkpoint's value.

>>> state = DenseState()
>>> w = state.setdefault("w", np.zeros(3))   # first step: initialise; later steps: the trained value
>>> w += 1.0                                 # update in place (or assign state["w"] = ...)
>>> state["w"].tolist()
[1.0, 1.0, 1.0]
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np

_INDEX_KEY = "__index__"


def _is_stateful(value: Any) -> bool:
    return callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None))


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "detach") and hasattr(value, "numpy")


class DenseState(dict):
    """A dict of the dense model's state, saved with each checkpoint (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._pending: dict[str, Any] = {}
        self._pending_arrays: dict[str, tuple[np.ndarray, str]] = {}  # key -> (value, where it comes from)

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str):
            raise TypeError(f"dense_state keys must be str. Received: {key!r}.")
        if key in self._pending and _is_stateful(value):
            value.load_state_dict(self._pending.pop(key))
        if key in self._pending_arrays and not _is_stateful(value):
            value = _claim(key, value, *self._pending_arrays.pop(key))
        super().__setitem__(key, value)

    def add_pending(self, values: dict[str, tuple[np.ndarray, str]]) -> None:
        """Values for keys the model_fn has not set yet: `{key: (array, where from)}`, applied when it sets them.

        Setting such a key stores the pending value instead, cast to the
        dtype (and python or torch type) of the value set; a shape that
        differs raises a ValueError naming the checkpoint and the tensor.
        """
        self._pending_arrays.update(values)

    @property
    def pending_keys(self) -> list[str]:
        """Keys with a restored value (an object's state dict or an array) the model_fn has not set yet."""
        return sorted(set(self._pending) | set(self._pending_arrays))

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    # Saving / loading ----------------------------------------------------------------

    def _index(self, arrays: _Arrays) -> dict[str, Any]:
        index = {}
        for key, value in self.items():
            if _is_stateful(value):
                index[key] = {"kind": "object", "tree": _encode(value.state_dict(), arrays, (key,))}
            else:
                index[key] = {"kind": "array", "tree": _encode(value, arrays, (key,))}
        for key, tree in self._pending.items():  # restored but not yet claimed: keep it
            if key not in index:
                index[key] = {"kind": "object", "tree": _encode(tree, arrays, (key,))}
        return index

    def to_bytes(self) -> bytes:
        """The state as `.npz` bytes: arrays plus a JSON index (no pickle)."""
        arrays = _Arrays(numbers_as_arrays=False)
        index = self._index(arrays)
        buffer = io.BytesIO()
        payload: dict[str, Any] = {f"a{i}": a for i, a in enumerate(arrays.values)}  # savez's **kwds
        payload[_INDEX_KEY] = np.frombuffer(json.dumps(index).encode("utf-8"), dtype=np.uint8)
        np.savez(buffer, **payload)
        return buffer.getvalue()

    def to_tensors(self, rename: dict[str, str] | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """(tensor name -> array, structure) for a TensorFlow checkpoint (see the module docstring).

        `rename` gives some top-level keys another tensor name (the runner
        saves tensor-core tables under TensorFlow's table names). Arrays are
        not copied. Raises ValueError when two values would get one name.
        """
        arrays = _Arrays(numbers_as_arrays=True, rename=rename or {})
        index = self._index(arrays)
        tensors: dict[str, np.ndarray] = {}
        for (path, name), array in zip(arrays.paths, arrays.values):
            if name in tensors:
                raise ValueError(
                    f"dense_state: two values would be saved as the tensor {name!r} (the second is "
                    f"{_where(path)}); rename one of the keys."
                )
            tensors[name] = array
        return tensors, {"index": index, "tensors": [name for _, name in arrays.paths]}

    def load_bytes(self, data: bytes, *, where: str = "dense state") -> None:
        """Replaces the state with `data` (from `to_bytes`); objects already present are loaded in place."""
        self.replace(decode_bytes(data, where=where))

    def replace(self, restored: dict[str, tuple[str, Any]]) -> None:
        """Replaces the state with restored entries (`decode_tensors`); objects already present are loaded in place."""
        for key in [k for k, v in self.items() if not _is_stateful(v) and k not in restored]:
            super().__delitem__(key)
        self._pending = {}
        self._pending_arrays = {}
        self.load_entries(restored)

    def load_entries(self, restored: dict[str, tuple[str, Any]]) -> None:
        """Sets restored entries: arrays at once, objects' state dicts into them now or when the model_fn sets them."""
        for key, (kind, value) in restored.items():
            if kind == "array":
                super().__setitem__(key, value)
            elif _is_stateful(self.get(key)):
                self[key].load_state_dict(value)
            else:
                self._pending[key] = value


def decode_bytes(data: bytes, *, where: str = "dense state") -> dict[str, tuple[str, Any]]:
    """The entries (key -> (kind, value)) of `to_bytes` output."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            index = json.loads(bytes(npz[_INDEX_KEY]).decode("utf-8"))
            arrays = {name: npz[name] for name in npz.files if name != _INDEX_KEY}
        return {key: (entry["kind"], _decode(entry["tree"], arrays)) for key, entry in index.items()}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{where} can't be read: {error}") from None


def decode_tensors(structure: dict[str, Any], tensors: dict[str, np.ndarray]) -> dict[str, tuple[str, Any]]:
    """The entries (key -> (kind, value)) a `to_tensors` structure describes, given its tensors by name."""
    arrays = {f"a{i}": tensors[name] for i, name in enumerate(structure["tensors"])}
    return {key: (entry["kind"], _decode(entry["tree"], arrays)) for key, entry in structure["index"].items()}


def _where(path: tuple[Any, ...]) -> str:
    return f"dense_state[{path[0]!r}]" + "".join(f"[{p!r}]" for p in path[1:])


class _Arrays:
    """Where `_encode` puts the arrays of a state: their values and paths (and tensor names)."""

    def __init__(self, *, numbers_as_arrays: bool, rename: dict[str, str] | None = None):
        self.numbers_as_arrays = numbers_as_arrays
        self.rename = rename or {}
        self.values: list[np.ndarray] = []
        self.paths: list[tuple[tuple[Any, ...], str]] = []

    def add(self, path: tuple[Any, ...], array: np.ndarray, **tags: Any) -> dict[str, Any]:
        name = "/".join([self.rename.get(path[0], path[0])] + [str(p) for p in path[1:]])
        self.values.append(array)
        self.paths.append((path, name))
        return {"a": len(self.values) - 1, **tags}


def _encode(value: Any, arrays: _Arrays, path: tuple[Any, ...]) -> Any:
    where = _where(path)
    if isinstance(value, dict):
        return {"d": [[_encode_key(k, where), _encode(v, arrays, path + (k,))] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return {"l" if isinstance(value, list) else "t": [_encode(v, arrays, path + (i,)) for i, v in enumerate(value)]}
    if _is_tensor(value):
        return arrays.add(path, value.detach().cpu().numpy().copy(), torch=True)
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        if array.dtype.kind not in "biufc":
            raise TypeError(
                f"{where}: only numeric or bool arrays can be saved (no pickle). Received dtype {array.dtype}."
            )
        return arrays.add(path, array if arrays.numbers_as_arrays else np.array(array, copy=True))
    if value is None or isinstance(value, str):
        return {"v": value}
    if isinstance(value, bool):
        return arrays.add(path, np.bool_(value), py="bool") if arrays.numbers_as_arrays else {"v": value}
    if isinstance(value, int) and arrays.numbers_as_arrays and -(2**63) <= value < 2**63:
        return arrays.add(path, np.int64(value), py="int")
    if isinstance(value, float) and (arrays.numbers_as_arrays or not np.isfinite(value)):
        return arrays.add(path, np.float64(value), py="float")
    if isinstance(value, (int, float)):
        return {"v": value}
    raise TypeError(
        f"{where}: can't save a value of type {type(value).__name__}. dense_state holds numpy arrays, "
        "numbers, and objects with state_dict() / load_state_dict() (e.g. torch modules and optimizers)."
    )


def _claim(key: str, value: Any, stored: np.ndarray, where: str) -> Any:
    """The pending `stored` value in the form of `value`, the one the model_fn sets for `key`."""
    target = value.detach().cpu().numpy() if _is_tensor(value) else np.asarray(value)
    if target.shape != stored.shape:
        raise ValueError(
            f"{where}: tensor {key!r} has shape {list(stored.shape)}, but the model_fn sets "
            f"dense_state[{key!r}] to shape {list(target.shape)}."
        )
    if target.dtype.kind not in "biufc":
        return value
    if isinstance(value, (bool, int, float)):
        return type(value)(stored.item())
    array = np.array(stored, dtype=target.dtype)
    if _is_tensor(value):
        import torch  # only a torch value gets here

        return torch.from_numpy(array)
    return array if isinstance(value, np.ndarray) else array.reshape(target.shape)[()]


def _encode_key(key: Any, where: str) -> Any:
    if isinstance(key, bool) or not isinstance(key, (str, int)):
        raise TypeError(f"{where}: state dict keys must be str or int. Received: {key!r}.")
    return {"s": key} if isinstance(key, str) else {"i": int(key)}


def _decode(tree: Any, arrays: dict[str, np.ndarray]) -> Any:
    if "d" in tree:
        return {(k["s"] if "s" in k else k["i"]): _decode(v, arrays) for k, v in tree["d"]}
    if "l" in tree:
        return [_decode(v, arrays) for v in tree["l"]]
    if "t" in tree:
        return tuple(_decode(v, arrays) for v in tree["t"])
    if "a" in tree:
        array = arrays[f"a{tree['a']}"]
        if tree.get("torch"):
            import torch  # only a checkpoint written from torch objects gets here

            return torch.from_numpy(np.array(array, copy=True))
        if tree.get("py") in ("float", "int", "bool"):
            return {"float": float, "int": int, "bool": bool}[tree["py"]](array)
        return array
    return tree["v"]
