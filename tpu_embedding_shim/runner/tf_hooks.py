"""Session hooks and `host_call` around a TensorFlow model_fn's graph, as TensorFlow's MonitoredSession runs them.

A TensorFlow model_fn's graph (tf_bridge.py's `GraphModel`) runs its steps
through `HookedRuns`, which keeps TensorFlow's `SessionRunHook` protocol:
`begin()` while the graph can still grow, `after_create_session(session,
coord)`, `before_run` / `after_run` around each step's run (their fetches
and feeds added to it), `run_context.request_stop()` ending the loop, and
`end(session)` when the call ends. The hooks are those passed to
`train` / `evaluate` / `predict` and the spec's `training_hooks` (with
`training_chief_hooks`) / `evaluation_hooks` / `prediction_hooks`.

`TPUEstimatorSpec(host_call=(fn, tensors))` runs `fn` on the step's tensors
in the graph (one replica: the tensors as they are, where a TPU concatenates
the shards' along their first axis); its ops run with each step, and the
summary writers it makes are initialised and flushed as TensorFlow's
TPUEstimator does. A `tf.compat.v1.summary` op in a training graph is written
to model_dir every `save_summary_steps`, as TensorFlow's Estimator writes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf
from tensorflow.python.ops import summary_ops_v2  # the writers' init ops, as TensorFlow's TPUEstimator reads them

__all__ = ["check_hooks", "check_listeners", "host_call_ops", "HookedRuns"]

SessionRunHook = tf.compat.v1.train.SessionRunHook
CheckpointSaverListener = tf.compat.v1.train.CheckpointSaverListener


def check_hooks(hooks: Any, name: str) -> list[Any]:
    """`hooks` as a list; each must be a `SessionRunHook` (TensorFlow's TypeError and words)."""
    hooks = list(hooks or [])
    for hook in hooks:
        if not isinstance(hook, SessionRunHook):
            raise TypeError(f"All hooks must be SessionRunHook instances, given: {hook} (in `{name}`)")
    return hooks


def check_listeners(listeners: Any) -> list[Any]:
    """`saving_listeners` as a list; each must be a `CheckpointSaverListener` (TensorFlow's TypeError)."""
    listeners = list(listeners or [])
    for listener in listeners:
        if not isinstance(listener, CheckpointSaverListener):
            raise TypeError(
                f"saving_listeners must be a list of CheckpointSaverListener, given: {listener} (a "
                f"{type(listener).__name__})"
            )
    return listeners


def host_call_ops(host_call: Any) -> list[Any]:
    """The graph ops of `host_call=(fn, tensors)`: `fn(*tensors)` or `fn(**tensors)`, flattened (checked as
    TensorFlow's TPUEstimatorSpec checks it)."""
    if host_call is None:
        return []
    if not isinstance(host_call, (tuple, list)) or len(host_call) != 2:
        raise ValueError(f"host_call should be a tuple or list of two elements (fn, tensors). Received: {host_call!r}")
    fn, tensors = host_call
    if not callable(fn):
        raise TypeError(f"host_call[0] should be callable. Received: {fn!r}")
    if not isinstance(tensors, (tuple, list, Mapping)):
        raise ValueError(
            f"host_call[1] should be a list/tuple or a dict of tensors. Received: {type(tensors).__name__}."
        )
    out = fn(**tensors) if isinstance(tensors, Mapping) else fn(*tensors)
    return [op for op in tf.nest.flatten(out) if op is not None]


class HookedRuns:
    """Runs a graph's steps with session hooks and host_call ops around them.

    Made while the graph is not finalized (it calls each hook's `begin()`
    and adds the summary writers' init and flush ops); `start(session)` once
    the session exists; `run(fetches, feed)` for each step; `end()` when the
    call ends.
    """

    def __init__(self, hooks: Sequence[Any], host_ops: Sequence[Any], summary: Any = None):
        self.hooks = list(hooks)
        if summary is not None:
            self.hooks.append(summary)
        self.host_ops = list(host_ops)
        for hook in self.hooks:
            hook.begin()
        self._init_ops = list(summary_ops_v2.summary_writer_initializer_op()) if self.host_ops else []
        self._flush_ops = [summary_ops_v2.legacy_raw_flush(writer=op.inputs[0]) for op in self._init_ops]
        self.session: Any = None
        self.stop_requested = False

    @property
    def active(self) -> bool:
        """Whether steps need this wrapper (else the graph's own fast run serves)."""
        return bool(self.hooks or self.host_ops)

    def start(self, session: Any) -> None:
        self.session = session
        if self._init_ops:
            session.run(self._init_ops)
        coord = tf.compat.v1.train.Coordinator()
        for hook in self.hooks:
            hook.after_create_session(session, coord)

    def run(self, fetches: Any, feed_dict: dict[Any, Any]) -> Any:
        """`session.run(fetches, feed_dict)` with the hooks' `before_run` fetches and feeds and the host_call ops;
        returns what `fetches` gives."""
        context = tf.compat.v1.train.SessionRunContext(
            tf.compat.v1.train.SessionRunArgs(fetches, feed_dict), self.session
        )
        extra = [hook.before_run(context) for hook in self.hooks]
        feed = dict(feed_dict)
        for args in extra:
            if args is not None and args.feed_dict:
                feed.update(args.feed_dict)
        hook_fetches = {i: a.fetches for i, a in enumerate(extra) if a is not None and a.fetches is not None}
        out = self.session.run({"fetches": fetches, "hooks": hook_fetches, "host": self.host_ops}, feed)
        for i, (hook, args) in enumerate(zip(self.hooks, extra)):
            results = out["hooks"].get(i)
            options = None if args is None else args.options
            hook.after_run(context, tf.compat.v1.train.SessionRunValues(results, options, None))
        self.stop_requested = self.stop_requested or context.stop_requested
        return out["fetches"]

    def end(self) -> None:
        if self.session is None:
            return
        for hook in self.hooks:
            hook.end(self.session)
        if self._flush_ops:
            self.session.run(self._flush_ops)
        self.session = None


def summary_hook(model_dir: str | None, save_summary_steps: int | None) -> Any:
    """TensorFlow's Estimator's `SummarySaverHook` for the graph's `tf.compat.v1.summary` ops, or None when it has
    none (or summaries are off)."""
    if not model_dir or not save_summary_steps:
        return None
    if not tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SUMMARIES):
        return None
    return tf.compat.v1.train.SummarySaverHook(
        save_steps=save_summary_steps, output_dir=model_dir, summary_op=tf.compat.v1.summary.merge_all()
    )
