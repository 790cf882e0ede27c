"""`session.run` of one fixed set of fetches and feeds, without `Session.run`'s per-call Python.

A training step through the TF bridge runs the same fetches (train_op, the
step, the loss, d loss / d activations) with the same placeholders fed,
step after step. `Session.run` works all of that out again on every call:
it flattens the feed dict, builds TensorShape objects to check each feed's
shape, and builds a fetch handler for the nested fetches. On the
migration program of docs/benchmarks.md (B = 64) that was 0.27 ms of a
1.8 ms step, more than half of TensorFlow's own run of the graph (0.42 ms).

`FixedRun` does that work once, when it is made, and then per call only
what `Session.run` does to each value: `np.asarray(value, dtype=the
placeholder's)` and the check of its shape against the placeholder's,
with `Session.run`'s ValueError; a placeholder that no fetch depends on
(the id features, which only the feature layers read) is checked so but
not handed to TensorFlow, which converts every feed it is given.
TensorFlow's errors from the run itself are its own (the same
`tf.errors.OpError` subclasses; `Session.run` adds the failing op's
Python traceback to the message).

It calls `Session._call_tf_sessionrun` and the tensors' `_as_tf_output`,
TensorFlow's own entry points below `Session.run` (the same in 2.15 and
2.21). `FixedRun.for_session` returns None when they are missing or when a
fetch or feed is not a plain tensor or op, and the caller then uses
`Session.run`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

__all__ = ["FixedRun"]


class FixedRun:
    """`session.run(fetches, dict(zip(placeholders, values)))` as `run(values)`: the fetched values, in order.

    `fetches` are tensors (their values are returned) or operations (run,
    None returned in their place)."""

    def __init__(self, session: Any, fetches: Sequence[Any], placeholders: Sequence[Any]):
        self._session = session
        self._fetched = [i for i, f in enumerate(fetches) if not isinstance(f, tf.Operation)]
        self._size = len(fetches)
        # TensorFlow internals below Session.run (module docstring): no public API runs a graph without
        # Session.run's per-call work.
        self._fetches = [fetches[i]._as_tf_output() for i in self._fetched]  # noqa: SLF001  (see above)
        self._targets = [f._c_op for f in fetches if isinstance(f, tf.Operation)]  # noqa: SLF001  (see above)
        # A placeholder no fetch depends on (a feature only the feature layers read) is checked as Session.run
        # checks it, but not handed to TensorFlow: a run converts every feed it is given, used or not.
        read = _ops_read_by([f if isinstance(f, tf.Operation) else f.op for f in fetches])
        self._feeds = []
        for p in placeholders:
            shape = p.shape
            dims = None if shape.rank is None else tuple(shape.as_list())
            output = p._as_tf_output() if p.op in read else None  # noqa: SLF001  (TensorFlow internal, as above)
            self._feeds.append((output, p.dtype.as_numpy_dtype, dims, p.name, str(shape)))
        self._extended = False  # the session has the graph as it will stay (a finalized graph, extended once)

    @classmethod
    def for_session(cls, session: Any, fetches: Sequence[Any], placeholders: Sequence[Any]) -> FixedRun | None:
        """A `FixedRun`, or None when this TensorFlow or these fetches and feeds need `Session.run`."""
        if not hasattr(session, "_call_tf_sessionrun") or not hasattr(session, "_extend_graph"):
            return None
        graph = session.graph
        if not all(isinstance(f, (tf.Operation, tf.Tensor)) and f.graph is graph for f in fetches):
            return None
        if not all(isinstance(p, tf.Tensor) and p.graph is graph and graph.is_feedable(p) for p in placeholders):
            return None
        if not all(hasattr(t, "_as_tf_output") for t in [*fetches, *placeholders] if isinstance(t, tf.Tensor)):
            return None
        return cls(session, fetches, placeholders)

    def __call__(self, values: Sequence[Any]) -> list[Any]:
        feed = {}
        for (output, dtype, dims, name, shape), value in zip(self._feeds, values, strict=True):
            array = np.asarray(value, dtype=dtype)
            if dims is not None and not _fits(dims, array.shape):
                raise ValueError(f"Cannot feed value of shape {array.shape} for Tensor {name}, which has shape {shape}")
            if output is not None:
                feed[output] = array
        # As Session.run, through TensorFlow internals below it (module docstring): the runtime sees the graph as
        # it is (once a finalized graph is extended, it never changes), then runs it.
        if not self._extended:
            self._session._extend_graph()  # noqa: SLF001  (TensorFlow internal, see above)
            self._extended = self._session.graph.finalized
        results = self._session._call_tf_sessionrun(None, feed, self._fetches, self._targets, None)  # noqa: SLF001
        out: list[Any] = [None] * self._size
        for i, value in zip(self._fetched, results):
            out[i] = value
        return out


def _ops_read_by(ops: Sequence[Any]) -> set[Any]:
    """`ops` and every op they depend on, through inputs and control inputs."""
    seen = set(ops)
    stack = list(ops)
    while stack:
        op = stack.pop()
        for before in [t.op for t in op.inputs] + list(op.control_inputs):
            if before not in seen:
                seen.add(before)
                stack.append(before)
    return seen


def _fits(dims: tuple[int | None, ...], shape: tuple[int, ...]) -> bool:
    """True when `shape` is compatible with the static `dims` (None: any size)."""
    return len(dims) == len(shape) and all(d is None or d == s for d, s in zip(dims, shape))
