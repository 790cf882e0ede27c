"""The checks of a training step, shared by `Engine` and `DistributedEngine`: same rules, same messages.

Each runs before anything is written, so a refused step changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..spec import EmbeddingSpec, FeatureSpec
from .kernels import Kernels
from .ragged import CheckedBatch, Ragged, check_nan_weights_dropped


def feature_batch(
    spec: EmbeddingSpec,
    kernels: Kernels,
    feature: FeatureSpec,
    features: Mapping[str, Any],
    weights: Mapping[str, Any] | None,
    *,
    copy: bool,
) -> Ragged:
    """`feature`'s ids (and weights: `weights[name]`, else `features[feature.weight_key]`) as a checked `Ragged`.

    A `CheckedBatch` (`check_batch`) is taken as it is, without a second check or copy."""
    if feature.name not in features:
        raise ValueError(
            f"Feature {feature.name!r} is missing from the features; the spec looks up "
            f"{[f.name for f in spec.features]}. Received keys: {sorted(features)}."
        )
    ids = features[feature.name]
    weight = None
    if weights is not None and feature.name in weights:
        weight = weights[feature.name]
    elif feature.weight_key is not None:
        if feature.weight_key in features:
            weight = features[feature.weight_key]
        elif not isinstance(ids, CheckedBatch):  # a checked batch holds its weights
            raise ValueError(
                f"Feature {feature.name!r} is weighted by {feature.weight_key!r}, which is missing "
                f"from the features. Received keys: {sorted(features)}."
            )
    if isinstance(ids, CheckedBatch):  # checked (and copied) with its weights already: used as it is
        batch = ids.for_feature(feature, weight)
    else:
        batch = kernels.to_batch(ids, feature, weight, copy=copy)
    if batch.weights is not None and not feature.is_sequence:
        check_nan_weights_dropped(batch, feature, spec.table(feature.table).combiner)
    return batch


def check_trainable(result: Any, step: int, gradients: Any) -> None:
    """`result` is a training lookup of this step, and `gradients` name only its features."""
    if not result.training:
        raise RuntimeError(
            "apply_gradients() was called after an inference lookup (training=False); "
            "look up with training=True to train."
        )
    if result.step != step:
        raise RuntimeError(
            f"This lookup was made at step {result.step} but the engine is at step "
            f"{step}: apply each lookup's gradients once, in order."
        )
    if not isinstance(gradients, Mapping):
        raise TypeError(
            f"Argument `gradients` must be a dict of feature name -> array. Received: {type(gradients).__name__}."
        )
    unknown = sorted(set(gradients) - set(result.activations))
    if unknown:
        raise ValueError(
            f"Gradients were given for unknown features {unknown}; features are {sorted(result.activations)}."
        )


def gradient_multiplier(spec: EmbeddingSpec, step: int) -> np.float32:
    """`experimental_gradient_multiplier_fn(step)` as float32 (1 without one); it must be finite."""
    fn = spec.gradient_multiplier_fn
    if fn is None:
        return np.float32(1.0)
    value = fn(step)
    try:
        value = float(value)
    except (TypeError, ValueError):
        value = float("nan")
    if not np.isfinite(value):
        raise ValueError(f"gradient_multiplier_fn({step}) must return a finite number. Received: {value!r}.")
    return np.float32(value)


def checked_gradient(
    feature: FeatureSpec, expected: tuple[int, ...], grad: Any, *, kernels: Kernels, check_numerics: bool
) -> np.ndarray | None:
    """`grad` as float32 of the activation's shape `expected` (None: no gradient); finite if `check_numerics`."""
    if grad is None:
        return None
    try:
        array = np.asarray(grad, dtype=np.float32)
    except (TypeError, ValueError):
        raise TypeError(
            f"The gradient of feature {feature.name!r} must be a float array of shape "
            f"{list(expected)}. Received: {type(grad).__name__}."
        ) from None
    if array.shape != expected:
        raise ValueError(
            f"The gradient of feature {feature.name!r} must have the shape of its activation, "
            f"{list(expected)}. Received shape {list(array.shape)}."
        )
    if check_numerics and not kernels.all_finite(array):
        raise not_finite(feature)
    return array


def not_finite(feature: FeatureSpec) -> ValueError:
    """The error of a gradient holding inf or NaN."""
    return ValueError(f"The gradient of feature {feature.name!r} holds NaN or infinite values; no table was changed.")


def checked_gradients(
    features: Sequence[FeatureSpec],
    expected: Sequence[tuple[int, ...]],
    gradients: Mapping[str, Any],
    *,
    kernels: Kernels,
    check_numerics: bool,
    finite_checked_later: bool = False,
) -> list[np.ndarray | None]:
    """`checked_gradient` of each feature (`gradients.get(name)`), raising the error the first failing one
    raises, as a loop of them would; the finite checks of all of them in one call where the kernels have
    `first_not_finite` (FastKernels). `finite_checked_later`: the caller checks that the gradients
    returned are finite (`FastKernels.sum_packed`), raising `not_finite(feature)`; an error here still
    comes after the non-finite gradient of an earlier feature."""
    first_not_finite = getattr(kernels, "first_not_finite", None)
    if first_not_finite is None or not check_numerics:
        return [
            checked_gradient(f, shape, gradients.get(f.name), kernels=kernels, check_numerics=check_numerics)
            for f, shape in zip(features, expected)
        ]
    grads: list[np.ndarray | None] = []
    try:
        for feature, shape in zip(features, expected):
            grads.append(checked_gradient(feature, shape, gradients.get(feature.name), kernels=kernels,
                                          check_numerics=False))  # fmt: skip
    except Exception:
        _raise_not_finite(features, grads, first_not_finite)  # an earlier feature's error comes first
        raise
    if not finite_checked_later:
        _raise_not_finite(features, grads, first_not_finite)
    return grads


def _raise_not_finite(features: Sequence[FeatureSpec], grads: list[np.ndarray | None], first_not_finite) -> None:
    """`checked_gradient`'s error for the first of `grads` (those of the first features) holding inf or NaN."""
    given = [(f, g) for f, g in zip(features, grads) if g is not None]
    bad = first_not_finite([g for _, g in given])
    if bad >= 0:
        raise not_finite(given[bad][0])


def check_state(spec: EmbeddingSpec, state: Any, rows: Mapping[str, int] | None = None) -> dict[str, list[str]]:
    """Table -> its slot names, once `state` ({table: {'embedding': [V, D], slot: [V, D]}}) matches `spec`
    whole: the same tables, each with the spec's slots, every array of the table's shape (`rows[table]`
    rows instead of V when given: one rank's share)."""
    structure = spec.structure()
    if not isinstance(state, Mapping) or set(state) != set(structure):
        received = sorted(state) if isinstance(state, Mapping) else type(state).__name__
        raise ValueError(f"The state holds tables {received}, the spec {sorted(structure)}.")
    slots = {}
    for name, expected in structure.items():
        arrays = state[name]
        names = sorted(set(arrays) - {"embedding"})
        if "embedding" not in arrays or names != expected["slots"]:
            raise ValueError(
                f"Table {name!r}: the state holds {sorted(arrays)}, the spec expects "
                f"['embedding'] + {expected['slots']}."
            )
        shape = (expected["vocabulary_size"] if rows is None else rows[name], expected["dim"])
        for key, value in arrays.items():
            if np.shape(value) != shape:
                raise ValueError(f"Table {name!r}, {key!r}: shape {np.shape(value)}, expected {shape}.")
            _check_real(name, key, value)
        slots[name] = names
    return slots


def _check_real(table: str, key: str, value: Any) -> None:
    """ValueError unless `value` holds real numbers that float32 holds (the engine keeps tables in float32):
    objects, strings, bools and complex numbers are refused, and so are finite values that become inf."""
    array = np.asarray(value) if not isinstance(value, np.ndarray) else value
    if array.dtype.kind not in "iuf":
        raise ValueError(
            f"Table {table!r}, {key!r}: dtype {array.dtype} ({type(value).__name__}); expected real numbers "
            "(float or int) that float32 holds."
        )
    if array.dtype.kind == "f" and array.dtype.itemsize > 4:
        with np.errstate(over="ignore"):
            overflow = np.isinf(array.astype(np.float32)) & np.isfinite(array)
        if overflow.any():
            k = int(np.flatnonzero(overflow.reshape(-1))[0])
            raise ValueError(
                f"Table {table!r}, {key!r}: {float(array.reshape(-1)[k])!r} at entry {k} is beyond float32's range "
                f"(|x| <= {float(np.finfo(np.float32).max):g}); the engine keeps tables in float32."
            )
