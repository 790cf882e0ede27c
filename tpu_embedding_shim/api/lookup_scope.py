"""The step contract between the runner and the feature layers: `LookupScope` and `EmbeddingActivations`.

On a TPU, a `model_fn` never looks embeddings up itself: TPUEstimator
enqueues the ids before the step, the TPU embedding engine looks them up,
and the feature layers only *read* the activations of the current step.
Here the runner (`TPUEstimator`) computes the step's activations, puts
them in a `LookupScope` and enters it around the model_fn; the layers
(feature_layers.py) read the innermost entered scope (`current_scope`).

What a layer returns is an `EmbeddingActivations`: a read-only float32
ndarray that is hashable by identity, so the model_fn can hand back
d(loss)/d(output) keyed by the very array it got:
`TPUEstimatorSpec(..., embedding_gradients={net: d_net})`. Anything computed
from it (`net @ w`, `net[:, :4]`, `np.tanh(net)`) is a plain ndarray. The
scope splits `d_net` back into one gradient per feature (`split_gradients`).

>>> import numpy as np
>>> scope = LookupScope({"a": np.ones((2, 2)), "b": np.zeros((2, 1))}, training=True)
>>> net = scope.record([("a", scope.activations["a"]), ("b", scope.activations["b"])])
>>> type(net).__name__, net.shape, type(net @ np.ones((3, 1))).__name__
('EmbeddingActivations', (2, 3), 'ndarray')
>>> {k: g.tolist() for k, g in scope.split_gradients({net: np.arange(6.0).reshape(2, 3)}).items()}
{'a': [[0.0, 1.0], [3.0, 4.0]], 'b': [[2.0], [5.0]]}
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["EmbeddingActivations", "LookupScope", "current_scope"]


# The layer output ------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """`value` with every EmbeddingActivations (also inside lists / tuples / dicts) as a plain ndarray."""
    if isinstance(value, EmbeddingActivations):
        return value.view(np.ndarray)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _on_plain_view(name: str) -> Any:
    """The method `name` of ndarray, run on a plain view: its result is a plain array."""

    def method(self: np.ndarray, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.view(np.ndarray), name)(*args, **kwargs)

    method.__name__ = name
    return method


class EmbeddingActivations(np.ndarray):
    """What a feature layer returns: float32 activations, read-only, hashable by identity.

    Use it as any array; every array computed from it (ufuncs, matmul,
    slicing, reshape, numpy functions) is a plain `np.ndarray`. Use the
    object itself as the key of `embedding_gradients`.
    """

    # identity: `{net: d_net}` works (numpy's stubs declare ndarray unhashable, `__hash__: None`)
    __hash__ = object.__hash__  # type: ignore[assignment]

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if "out" in kwargs:
            kwargs["out"] = _plain(kwargs["out"])
        # a ufunc's inputs are arrays or scalars (numpy converts a list itself): only the direct ones need a view
        plain = [x.view(np.ndarray) if isinstance(x, EmbeddingActivations) else x for x in inputs]
        return getattr(ufunc, method)(*plain, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return func(*_plain(args), **_plain(kwargs))

    def __getitem__(self, key):
        return self.view(np.ndarray)[key]

    @property
    def T(self):
        return self.view(np.ndarray).T

    def __reduce__(self):  # pickles / deep-copies as a plain array
        return self.view(np.ndarray).__reduce__()

    def __repr__(self):
        return "EmbeddingActivations(" + repr(self.view(np.ndarray))[6:]


# The ndarray methods that return a new array return a plain one.
for _name in ("reshape", "astype", "copy", "transpose", "ravel", "flatten", "squeeze"):
    setattr(EmbeddingActivations, _name, _on_plain_view(_name))


def _as_output(array: np.ndarray) -> EmbeddingActivations:
    """`array` as a read-only EmbeddingActivations: a view when it is float32 and contiguous already."""
    out = np.ascontiguousarray(array, dtype=np.float32).view(EmbeddingActivations)
    out.flags.writeable = False
    return out


# The scope the layers read -------------------------------------------------------------


_local = threading.local()


def current_scope() -> LookupScope | None:
    """The innermost entered `LookupScope` of this thread, or None."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


class LookupScope:
    """The activations of one step, what the feature layers read, and the gradient split back.

    Args:
      activations: feature key -> [B, D] (pooled) or [B, L, D] (sequence).
      sequence_lengths: sequence feature key -> [B] lengths.
      training: whether gradients will be asked for (a training step).
      features: the step's features (for error messages).

    The runner creates one per step and enters it (`with scope:`) around the
    model_fn. Every layer output is recorded with the feature slice each of
    its columns occupies, so `split_gradients` can route d(loss)/d(output)
    to the features.
    """

    builds_graph = False  # True in the TensorFlow bridge's scope, whose layers return graph tensors

    def __init__(
        self,
        activations: Mapping[str, np.ndarray],
        sequence_lengths: Mapping[str, np.ndarray] | None = None,
        *,
        training: bool = False,
        features: Mapping[str, Any] | None = None,
    ):
        self.activations = dict(activations)
        self.sequence_lengths = dict(sequence_lengths or {})
        self.training = training
        self.features = features
        self._outputs: dict[int, tuple[EmbeddingActivations, list[tuple[str | None, int, int]]]] = {}
        self.leaves: list[tuple[EmbeddingActivations, Any]] = []  # (output, framework tensor) from a bridge
        # feature key -> the name of the first layer that read it: the variable scope TensorFlow puts that
        # column's table in (`dense_features/<column>/embedding_weights`); the runner names checkpoints by it.
        self.layer_names: dict[str, str] = {}
        self._name_counts: dict[str, int] = {}
        self.lookup_result: Any = None  # the engine's LookupResult, in a scope made by `from_engine`

    @classmethod
    def from_engine(cls, engine: Any, features: Mapping[str, Any], *, training: bool = False) -> LookupScope:
        """A scope over `engine.forward(features, training=training)` (an inference lookup by default)."""
        result = engine.forward(features, training=training)
        scope = cls(result.activations, result.sequence_lengths, training=training, features=features)
        scope.lookup_result = result
        return scope

    def __enter__(self) -> LookupScope:
        if not hasattr(_local, "stack"):
            _local.stack = []
        _local.stack.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _local.stack.remove(self)

    # What layers call ------------------------------------------------------------------

    def unique_layer_name(self, base: str) -> str:
        """`base`, then `base_1`, `base_2`...: the names TensorFlow gives default-named layers in one graph."""
        count = self._name_counts.get(base, 0)
        self._name_counts[base] = count + 1
        return base if count == 0 else f"{base}_{count}"

    # A scope that `builds_graph` (the TensorFlow bridge's) makes the layers' outputs itself:

    def dense_output(self, columns: Sequence[Any], features: Mapping[str, Any], owner: str, layer: str) -> Any:
        raise NotImplementedError

    def sequence_output(self, columns: Sequence[Any], owner: str, layer: str) -> tuple[Any, Any]:
        raise NotImplementedError

    def activation(self, column: Any, owner: str, key: str | None = None) -> np.ndarray:
        """The step's activation of `column` (its feature `key`, when the caller has it), checked."""
        key = column.get_feature_key_name() if key is None else key
        if key not in self.activations:
            raise ValueError(
                f"{owner}: column {column.name!r} (feature {key!r}) has no activations in this step: it is not "
                f"among the embedding columns of the EmbeddingConfigSpec given to TPUEstimator "
                f"(features looked up: {sorted(self.activations)}). Add it to "
                "EmbeddingConfigSpec(feature_columns=...)."
            )
        value = self.activations[key]
        width = column.dimension
        if value.shape[-1] != width:
            raise ValueError(
                f"{owner}: column {column.name!r} has dimension {width} but the embedding of feature "
                f"{key!r} has width {value.shape[-1]}: is it the same column as in the EmbeddingConfigSpec?"
            )
        return value

    def record(self, pieces: list[tuple[str | None, np.ndarray]], layer: str | None = None) -> EmbeddingActivations:
        """Concatenates (feature key or None, array) pieces on the last axis and remembers the slices.

        `layer` is the name of the layer reading them (noted per feature, first reader wins). A single
        float32 piece is not copied: the output is a read-only view of it (the step's activations are the
        scope's own).
        """
        slices, start = [], 0
        for key, array in pieces:
            if key is not None and layer is not None:
                self.layer_names.setdefault(key, layer)
            stop = start + array.shape[-1]
            slices.append((key, start, stop))
            start = stop
        sizes = {a.shape[0] for _, a in pieces}
        if len(sizes) > 1:
            raise ValueError(
                "Batch size (first dimension) of each feature must be same. Received: "
                + ", ".join(f"{k or 'numeric'}: {a.shape[0]}" for k, a in pieces)
                + "."
            )
        arrays = [a for _, a in pieces]
        # one piece (a layer of one column): a read-only view of the step's activation, not a copy of it
        output = _as_output(arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=-1))
        self._outputs[id(output)] = (output, slices)
        return output

    # What the runner calls -----------------------------------------------------------------

    def owns(self, array: Any) -> bool:
        """Whether `array` is an output of a layer called in this scope."""
        entry = self._outputs.get(id(array))
        return entry is not None and entry[0] is array

    def split_gradients(self, gradients: Mapping[Any, Any] | None) -> dict[str, np.ndarray]:
        """d(loss)/d(outputs) -> one summed gradient per feature key.

        Keys of `gradients` are layer outputs returned in this scope, or
        feature keys (str) for a per-feature gradient. A value of None means
        no gradient. Slices of numeric columns are dropped. A feature's
        gradient given once as a whole float32 array is that array, not a
        copy (the engine reads it within the step); a slice of a layer's
        gradient is a contiguous copy; a feature given several gradients
        gets their sum, a new array.
        """
        per_feature: dict[str, np.ndarray] = {}
        if not gradients:
            return per_feature
        if not isinstance(gradients, Mapping):
            raise TypeError(
                "`embedding_gradients` must be a dict {layer output or feature key: d(loss)/d(it)}. "
                f"Received: {type(gradients).__name__}."
            )
        for key, grad in gradients.items():
            if grad is None:
                continue
            grad = _to_float_array(grad, key)
            if isinstance(key, str):
                if key not in self.activations:
                    raise ValueError(
                        f"`embedding_gradients` names feature {key!r}, which this step did not look up; "
                        f"features are {sorted(self.activations)}."
                    )
                _check_shape(grad, self.activations[key].shape, f"feature {key!r}")
                _accumulate(per_feature, key, grad)
                continue
            if not self.owns(key):
                raise ValueError(
                    "`embedding_gradients` keys must be the arrays the feature layers returned in this step "
                    "(DenseFeatures / input_layer / SequenceFeatures outputs, not arrays computed from them), "
                    f"or feature keys. Received a key of type {type(key).__name__} with shape "
                    f"{getattr(key, 'shape', None)}."
                )
            output, slices = self._outputs[id(key)]
            _check_shape(grad, output.shape, "a feature layer output")
            for feature, start, stop in slices:
                if feature is not None:
                    _accumulate(per_feature, feature, grad[..., start:stop])
        return per_feature


def _to_float_array(grad: Any, key: Any) -> np.ndarray:
    if hasattr(grad, "detach"):  # a torch tensor
        grad = grad.detach().cpu().numpy()
    try:
        return np.asarray(grad, dtype=np.float32)
    except (TypeError, ValueError):
        raise TypeError(
            f"The gradient for {key if isinstance(key, str) else 'a layer output'} must be a float "
            f"array. Received: {type(grad).__name__}."
        ) from None


def _check_shape(grad: np.ndarray, shape: tuple[int, ...], what: str) -> None:
    if grad.shape != tuple(shape):
        raise ValueError(
            f"The gradient for {what} must have its shape {list(shape)}. Received shape {list(grad.shape)}."
        )


def _accumulate(out: dict[str, np.ndarray], key: str, grad: np.ndarray) -> None:
    """`out[key]` plus `grad` (float32 already). The first is kept contiguous: a slice of a layer's gradient is
    copied once (the copy the engine's kernels would make), a whole gradient is used as it is; a second is
    added into a new array, never into the first."""
    out[key] = out[key] + grad if key in out else np.ascontiguousarray(grad)
