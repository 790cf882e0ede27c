"""A `tf.data.Dataset`'s elements as numpy, read with less Python per element than `next(iterator)`.

The runner iterates an input_fn's dataset eagerly, one element a step.
`next()` on TensorFlow's eager iterator switches to synchronous execution,
runs the `IteratorGetNext` op, then rebuilds the element's nested
structure from its type specs, and the bridge then read each tensor as
numpy: 0.17 ms an element on the B = 64 migration program of
docs/benchmarks.md (three id features and labels), about a tenth of its
step. The op itself takes 0.03 ms.

`numpy_elements` runs the same op on the same iterator (`tf.raw_ops.
IteratorGetNext`, with the iterator's own resource, types and shapes) and
builds the numpy element directly, by a plan made once from the dataset's
`element_spec`. Only for the common elements, dicts, tuples and lists of
plain tensors, read in synchronous mode (TensorFlow's default); anything
else (a `tf.SparseTensor` or `tf.RaggedTensor` in the element, another
container, asynchronous execution, an iterator without those attributes)
is read by `next()` and `tf_bridge.to_numpy`, as before. Either way the
element is the one `to_numpy(next(iterator))` gives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import tensorflow as tf

__all__ = ["numpy_elements"]

_Plan = Callable[[Iterator[Any]], Any]  # takes the element's flat tensors, in order; returns its numpy value


def numpy_elements(dataset: tf.data.Dataset, to_numpy: Callable[[Any], Any]) -> Iterator[Any]:
    """Each element of `dataset` as `to_numpy(element)` would give it, in order."""
    iterator = iter(dataset)
    plan = _plan(dataset.element_spec)
    read = None
    if plan is not None and tf.config.experimental.get_synchronous_execution():
        read = _flat_reader(iterator)
    if read is None or plan is None:
        for element in iterator:
            yield to_numpy(element)
        return
    while True:
        try:
            flat = read()
        except tf.errors.OutOfRangeError:
            return
        yield plan(iter(flat))


def _flat_reader(iterator: Any) -> Callable[[], list[Any]] | None:
    """A call that runs the iterator's `IteratorGetNext` op, or None when the iterator lacks what it needs."""
    # TensorFlow internals of tf.data's OwnedIterator: no public API runs its IteratorGetNext op without building
    # the nested element in Python, which is what this skips; an iterator without them is read by next().
    try:
        resource = iterator._iterator_resource  # noqa: SLF001  (TensorFlow internal: see above)
        types = iterator._flat_output_types  # noqa: SLF001  (TensorFlow internal: see above)
        shapes = iterator._flat_output_shapes  # noqa: SLF001  (TensorFlow internal: see above)
    except AttributeError:
        return None
    get_next = tf.raw_ops.IteratorGetNext

    def read() -> list[Any]:
        return get_next(iterator=resource, output_types=types, output_shapes=shapes)

    return read


def _plan(spec: Any) -> _Plan | None:
    """How to build an element of `spec` from its flat tensors (in `tf.nest.flatten` order), or None."""
    if type(spec) is tf.TensorSpec:
        return lambda flat: next(flat).numpy()
    if type(spec) is dict:
        keys = sorted(spec)  # tf.nest flattens a dict by its sorted keys
        plans = _plans([spec[k] for k in keys])
        if plans is None:
            return None
        order = list(spec)  # the element keeps the dataset's key order

        def build_dict(flat: Iterator[Any]) -> Any:
            values = {k: p(flat) for k, p in zip(keys, plans)}
            return {k: values[k] for k in order}

        return build_dict
    if type(spec) in (tuple, list):
        items = _plans(list(spec))
        if items is None:
            return None
        kind = type(spec)
        return lambda flat: kind(p(flat) for p in items)
    return None


def _plans(specs: list[Any]) -> list[_Plan] | None:
    """Each spec's plan, or None when one has none."""
    plans = [_plan(s) for s in specs]
    checked = [p for p in plans if p is not None]
    return checked if len(checked) == len(plans) else None
