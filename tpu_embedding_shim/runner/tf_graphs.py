"""A TensorFlow model_fn in TPUEstimator: one graph per running train / evaluate / predict, and its export.

A TensorFlow model_fn is one the user says is (`dense_framework=
"tensorflow"`) or, by default, one that reads TensorFlow while TensorFlow is
imported (`DENSE_FRAMEWORKS`). TPUEstimator runs it through the TensorFlow
bridge: the model_fn builds a
graph at the first batch of a call (tf_bridge.py's `GraphModel`), each
batch then runs in that graph, and the graph ends with the call (a training
graph first copies its variables into the dense state). `export` writes its
PREDICT graph as a SavedModel (tf_serving.py).

TensorFlow itself is never imported here: the bridge modules are, and only
on this path.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import sys
from collections.abc import Callable
from typing import Any

from ..api.lookup_scope import LookupScope
from .context import TensorCoreColumns
from .export import ServedTables
from .model_fn import ModeKeys

__all__ = [
    "DENSE_FRAMEWORKS",
    "check_dense_framework",
    "TFGraphs",
    "input_batches",
    "eager_when_tensorflow",
    "check_export",
    "export",
]

log = logging.getLogger("tpu_embedding_shim")

DENSE_FRAMEWORKS = {
    "auto": "TensorFlow when TensorFlow is imported and the model_fn, or a function it calls up to three calls "
    "deep, reads a TensorFlow module or function; else Python",
    "tensorflow": "the model_fn builds a TensorFlow graph once per call, and each batch runs in it",
    "python": "the model_fn runs on each batch as Python code on numpy values (numpy, PyTorch, ...)",
}


def check_dense_framework(value: Any) -> str:
    """`dense_framework` checked: one of `DENSE_FRAMEWORKS`; 'tensorflow' needs TensorFlow installed."""
    if not isinstance(value, str) or value not in DENSE_FRAMEWORKS:
        raise ValueError(f"Argument `dense_framework` must be one of {list(DENSE_FRAMEWORKS)}. Received: {value!r}.")
    if value == "tensorflow" and "tensorflow" not in sys.modules and importlib.util.find_spec("tensorflow") is None:
        raise ImportError(
            "dense_framework='tensorflow' runs the model_fn in a TensorFlow graph, and TensorFlow is not installed: "
            "pip install -e '.[tensorflow]' in the checkout (docs/tensorflow_estimator.md)."
        )
    return value


def input_batches(call_input_fn: Callable[[], Any]) -> Any:
    """`call_input_fn()`'s result, a tf.data.Dataset or TF tensors read as numpy batches (when TF is imported;
    in TensorFlow 1's graph mode too: `tf_bridge.input_batches`)."""
    if "tensorflow" not in sys.modules:
        return call_input_fn()
    from . import tf_bridge

    return tf_bridge.input_batches(call_input_fn)


def eager_when_tensorflow() -> contextlib.AbstractContextManager[Any]:
    """A context that runs its block eagerly when TensorFlow is imported and in graph mode (`tf_bridge.eagerly`)."""
    if "tensorflow" not in sys.modules:
        return contextlib.nullcontext()
    from . import tf_bridge

    return tf_bridge.eagerly()


def _refuse_tensor_core(tensor_core: TensorCoreColumns | None, what: str) -> None:
    if tensor_core is not None:
        raise ValueError(
            f"A TensorFlow model_fn with tensor-core columns (embedding_lookup_device='tpu_tensor_core': features "
            f"{tensor_core.feature_names}) {what}: their tables would be TF variables. Look them up on the engine "
            "instead (embedding_lookup_device='tpu_embedding_core', the default); see docs/tensorflow_estimator.md."
        )


class TFGraphs:
    """The graphs of a TensorFlow model_fn, by mode: one per running train / evaluate / predict call."""

    def __init__(
        self,
        dense_framework: str = "auto",
        seed: int | None = None,
        summaries: tuple[str | None, int | None] = (None, None),
    ) -> None:
        self._graphs: dict[str, Any] = {}
        self._seed = seed  # each graph's random seed: RunConfig.tf_random_seed
        self._summaries = summaries  # (model_dir, save_summary_steps): where a training graph's summaries go
        self._hooks: dict[str, list[Any]] = {}  # mode -> the running call's session hooks
        self._dense_framework = dense_framework
        self._uses_tensorflow: bool | None = None  # decided (once TensorFlow is imported, or stated)
        self._logged: bool | None = None

    def uses_tensorflow(self, model_fn: Any) -> bool:
        """Whether `model_fn` runs as TensorFlow code (`DENSE_FRAMEWORKS`), logged at INFO with the reason when
        first asked (and again if it changes: 'auto' decides once TensorFlow is imported)."""
        if self._uses_tensorflow is not None:
            return self._uses_tensorflow
        chosen, reason = self._dense_framework, f"dense_framework={self._dense_framework!r}"
        if chosen == "auto" and "tensorflow" not in sys.modules:
            chosen, reason = "python", f"{reason}: TensorFlow is not imported"
        elif chosen == "auto":
            from . import tf_bridge

            found = tf_bridge.tensorflow_read_by(model_fn)
            chosen = "python" if found is None else "tensorflow"
            reason += f": it reads TensorFlow ({found})" if found else ": it reads no TensorFlow module or function"
            self._uses_tensorflow = chosen == "tensorflow"
        else:
            self._uses_tensorflow = chosen == "tensorflow"
        uses = chosen == "tensorflow"
        if self._logged is not uses:
            self._logged = uses
            what = "a TensorFlow graph" if uses else "Python on numpy values"
            log.info("TPUEstimator: the model_fn's dense part runs as %s (%s).", what, reason)
        return uses

    def get(
        self,
        mode: str,
        features: Any,
        labels: Any,
        scope: LookupScope,
        call: Callable[[Any, Any, LookupScope], Any],
        dense_state: Any,
        tensor_core: TensorCoreColumns | None,
    ) -> Any:
        """The graph of `mode`, built at the call's first batch: `call(features, labels, scope)` runs the model_fn."""
        graph = self._graphs.get(mode)
        if graph is None:
            _refuse_tensor_core(tensor_core, "is not supported yet")
            from . import tf_bridge

            graph = tf_bridge.GraphModel(
                mode,
                call,
                features,
                labels,
                scope,
                dense_state,
                self._seed,
                hooks=self._hooks.get(mode, ()),
                summaries=self._summaries,
            )
            self._graphs[mode] = graph
        return graph

    def set_hooks(self, mode: str, hooks: Any, name: str = "hooks") -> None:
        """The session hooks of the next call in `mode` (checked: `SessionRunHook`s, TensorFlow's TypeError)."""
        hooks = list(hooks or [])
        if hooks:
            from . import tf_hooks

            hooks = tf_hooks.check_hooks(hooks, name)
        self._hooks[mode] = hooks

    def stop_requested(self, mode: str) -> bool:
        """Whether a session hook of the running `mode` graph asked to stop."""
        graph = self._graphs.get(mode)
        return graph is not None and graph.stop_requested

    def session(self, mode: str) -> Any:
        """The running `mode` graph's session (what a CheckpointSaverListener is handed), or None."""
        graph = self._graphs.get(mode)
        return None if graph is None else graph.session

    def save_dense(self, dense_state: Any) -> None:
        """A running training graph's dense variables into `dense_state`, before they are saved or read."""
        if ModeKeys.TRAIN in self._graphs:
            self._graphs[ModeKeys.TRAIN].save_to(dense_state)

    def metrics(self) -> dict[str, Any]:
        """The running evaluation graph's `tf.compat.v1.metrics`: their values after all update ops."""
        graph = self._graphs.get(ModeKeys.EVAL)
        return {} if graph is None else graph.metrics()

    def close(self, mode: str, dense_state: Any, *, completed: bool = True) -> None:
        """Ends the graph of `mode` (a training graph first copies its variables into `dense_state`). Its session
        hooks' `end()` runs only for a call that `completed`: as in TensorFlow's MonitoredSession, a call an
        error (or a closed predict generator) ended never reaches `end()`."""
        graph = self._graphs.pop(mode, None)
        if graph is not None:
            if mode == ModeKeys.TRAIN:
                graph.save_to(dense_state)
            graph.close(completed)


def check_export(experimental_mode: str, serving_input_receiver_fn: Any, tensor_core: TensorCoreColumns | None):
    """What `export` refuses, checked before the model's state is read."""
    if experimental_mode != ModeKeys.PREDICT:
        raise ValueError(
            f"experimental_mode={experimental_mode!r}: this runner exports the PREDICT graph only "
            f"(experimental_mode={ModeKeys.PREDICT!r}); a served model has no engine to train with."
        )
    if serving_input_receiver_fn is None:
        raise ValueError("An input_receiver_fn must be defined.")
    _refuse_tensor_core(tensor_core, "cannot be exported yet")


def export(
    export_dir: str,
    *,
    serving_input_receiver_fn: Any,
    call: Callable[[Any, LookupScope], Any],
    served: ServedTables,
    **saved_model: Any,
) -> str:
    """Writes the model_fn's PREDICT graph over the receiver's tensors as a SavedModel (tf_serving.py).

    `call(features, scope)` runs the model_fn; `saved_model` holds the rest of
    `tf_serving.write_saved_model`'s arguments. `check_export` first.
    """
    from . import tf_serving

    return tf_serving.write_saved_model(
        export_dir,
        serving_input_receiver_fn=serving_input_receiver_fn,
        call_model_fn=call,
        features=served.features,
        tables=served.arrays(),
        combiners=served.combiners,
        **saved_model,
    )
