"""One batch through a TPUEstimator's model: the lookup, the model_fn in a `LookupScope`, the gradients back.

A training step, as on a TPU:

1. the batch's ids are looked up by the engine (`engine.forward`), and the
   tensor-core columns in the dense state (`TensorCoreColumns.lookup`);
2. the model_fn runs inside a `LookupScope` holding those activations: its
   DenseFeatures / input_layer / SequenceFeatures calls read them;
3. the returned spec's `embedding_gradients` (and, with the torch bridge,
   autograd) give d(loss)/d(activations); the scope splits them per
   feature, the engine applies them with the EmbeddingConfigSpec's
   optimizer, and the tensor-core table gradients go to
   `params['context']`;
4. `train_op()` updates the dense model.

A TensorFlow model_fn takes the same path through a graph (tf_graphs.py):
the graph computes the loss and the gradients, the engine applies them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..api.lookup_scope import LookupScope
from . import replicated
from .context import TensorCoreColumns, TPUContext
from .model_dir import ModelState
from .model_fn import EstimatorSpec, ModeKeys, NanLossDuringTrainingError, TPUEstimatorSpec, scalar
from .tf_graphs import TFGraphs

log = logging.getLogger("tpu_embedding_shim")

__all__ = ["Steps"]


@dataclasses.dataclass
class Steps:
    """Runs the model on one batch at a time, for TPUEstimator's train / evaluate / predict / export.

    Args:
      call_model_fn: `(features, labels, mode, params) -> spec`, the estimator's model_fn called with
        TensorFlow's checks (model_fn.py's `call_model_fn`).
      state: the estimator's engine, dense state and table names.
      tensor_core: its tensor-core columns, or None.
      params: the estimator's params (the model_fn gets them plus 'batch_size', 'context', 'dense_state').
      batch_sizes: mode -> batch size (or None).
      use_tpu: the estimator's `use_tpu` (for `params['context']` and `params['use_tpu']`).
      graphs: the graphs of a TensorFlow model_fn.
      eval_on_tpu: the estimator's `eval_on_tpu` (`params['use_tpu']` in EVAL).
      activations_in_features: the model_fn reads each embedding feature's activation as `features[key]`
        (an `EmbeddingConfigSpec` of `feature_to_config_dict`: TensorFlow's TPUEstimator puts them there).
    """

    call_model_fn: Callable[[Any, Any, str, dict], EstimatorSpec | TPUEstimatorSpec]
    state: ModelState
    tensor_core: TensorCoreColumns | None
    params: dict
    batch_sizes: Mapping[str, int | None]
    use_tpu: bool
    graphs: TFGraphs
    eval_on_tpu: bool = True
    activations_in_features: bool = False
    _warned_no_gradient: set[str] = dataclasses.field(default_factory=set, init=False)

    # What the estimator calls --------------------------------------------------------------------

    def train(self, features: Any, labels: Any) -> float:
        """One training step of a numpy (or torch) model_fn; returns the loss."""
        features = self._check_features(features)
        result, tc_batches, scope, context = self._lookup(features, ModeKeys.TRAIN, training=True)
        features = self._with_activations(features, scope.activations.__getitem__)
        spec = self._run_model_fn(features, labels, ModeKeys.TRAIN, scope, context)
        grads = scope.split_gradients(spec.embedding_gradients)
        if hasattr(spec.loss, "backward"):
            from . import torch_bridge

            for key, grad in torch_bridge.backward(spec.loss, scope).items():
                grads[key] = grads[key] + grad if key in grads else grad
        loss = replicated.mean_over_replicas(scalar(spec.loss, "The loss"))  # NaN on any replica: NaN on all
        if math.isnan(loss):
            raise NanLossDuringTrainingError()
        self._apply_engine_gradients(result, grads)
        if self.tensor_core is not None:
            context.tensor_core_gradients.update(self.tensor_core.gradients(tc_batches, grads))
        spec.train_op()
        return loss

    def infer(self, features: Any, labels: Any, mode: str) -> EstimatorSpec | TPUEstimatorSpec:
        """The spec of a numpy (or torch, without autograd) model_fn on one eval or predict batch."""
        features = self._check_features(features)
        _, _, scope, context = self._lookup(features, mode, training=False)
        features = self._with_activations(features, scope.activations.__getitem__)
        torch = sys.modules.get("torch")
        with torch.no_grad() if torch is not None else contextlib.nullcontext():
            return self._run_model_fn(features, labels, mode, scope, context)

    def tf_train(self, features: Any, labels: Any) -> float:
        """One training step of a TensorFlow model_fn, in the TRAIN graph; returns the loss."""
        features = self._check_features(features)
        result, _, scope, context = self._lookup(features, ModeKeys.TRAIN, training=True)
        graph = self._graph(ModeKeys.TRAIN, features, labels, scope, context)
        loss, grads = graph.train(features, labels, scope, self.state.global_step)
        if math.isnan(loss):
            raise NanLossDuringTrainingError()
        self._apply_engine_gradients(result, grads)
        return loss

    def tf_infer(self, features: Any, labels: Any, mode: str) -> Any:
        """A TensorFlow model_fn's loss (EVAL) or predictions (PREDICT) on one batch, as a spec-like namespace."""
        features = self._check_features(features)
        _, _, scope, context = self._lookup(features, mode, training=False)
        graph = self._graph(mode, features, labels, scope, context)
        if mode == ModeKeys.EVAL:
            return types.SimpleNamespace(loss=graph.evaluate(features, labels, scope, self.state.global_step))
        return types.SimpleNamespace(predictions=graph.predict(features, scope, self.state.global_step))

    def input_context(self, mode: str) -> TPUContext:
        """`params['context']` of input_fn: which replica reads (`current_input_fn_deployment()`), no step yet."""
        return self._context(mode, None, None, from_input_fn=True)

    def serve(self, features: Any, scope: LookupScope) -> EstimatorSpec | TPUEstimatorSpec:
        """The PREDICT spec over a serving graph's `features`, its layers reading `scope` (the SavedModel export)."""
        context = self._context(ModeKeys.PREDICT, scope, None)
        return self._run_model_fn(features, None, ModeKeys.PREDICT, scope, context, exporting=True)

    # One model_fn call ---------------------------------------------------------------------------

    def _check_features(self, features: Any) -> Any:
        if (self.state.engine is not None or self.tensor_core is not None) and not isinstance(features, Mapping):
            raise ValueError(
                "With an embedding_config_spec, `features` must be a dict of feature name -> ids "
                f"(as TPUEstimator's input splitting requires). Received: {type(features).__name__}."
            )
        return features

    def _lookup(self, features: Any, mode: str, training: bool):
        """(lookup result or None, tensor-core batches or None, scope, context) for one model_fn call."""
        result, tc_batches = None, None
        activations: dict[str, np.ndarray] = {}
        lengths: dict[str, np.ndarray] = {}
        if self.state.engine is not None:
            result = self.state.engine.forward(features, training=training)
            activations.update(result.activations)
            lengths.update(result.sequence_lengths)
        if self.tensor_core is not None:
            tc_activations, tc_batches = self.tensor_core.lookup(features, self.state.dense_state)
            activations.update(tc_activations)
        scope = LookupScope(activations, lengths, training=training, features=features)
        return result, tc_batches, scope, self._context(mode, scope, self.tensor_core)

    def _context(
        self, mode: str, scope: LookupScope | None, tensor_core: TensorCoreColumns | None, from_input_fn: bool = False
    ) -> TPUContext:
        """`params['context']` of one model_fn call (of an input_fn call: no scope)."""
        return TPUContext(
            mode=mode,
            global_step=self.state.global_step,
            batch_size=replicated.per_replica(self.batch_sizes[mode]),
            dense_state=self.state.dense_state,
            tensor_core=tensor_core,
            engine=self.state.engine,
            scope=scope,
            use_tpu=self.use_tpu,
            from_input_fn=from_input_fn,
        )

    def _model_params(self, mode: str, context: TPUContext, exporting: bool = False) -> dict:
        """The model_fn's params: the estimator's plus TensorFlow's keys ('batch_size', 'use_tpu', 'context')
        and this runner's 'dense_state'. 'use_tpu' is TensorFlow's value: False in an export and in EVAL with
        `eval_on_tpu=False`, else the estimator's `use_tpu`."""
        params = dict(self.params)
        batch_size = replicated.per_replica(self.batch_sizes[mode])
        if batch_size is not None and not exporting:  # an export has no batch size, as in TensorFlow
            params["batch_size"] = batch_size
        on_tpu = self.use_tpu and not exporting and (mode != ModeKeys.EVAL or self.eval_on_tpu)
        params["use_tpu"] = on_tpu
        params["context"] = context
        params["dense_state"] = self.state.dense_state
        return params

    def _run_model_fn(
        self, features: Any, labels: Any, mode: str, scope: LookupScope, context: TPUContext, exporting: bool = False
    ) -> EstimatorSpec | TPUEstimatorSpec:
        """The model_fn's spec, called inside `scope` (its layers read it); the tables' layer names learnt from it."""
        with scope:
            spec = self.call_model_fn(features, labels, mode, self._model_params(mode, context, exporting))
        self.state.names.learn(scope.layer_names)
        return spec

    def _with_activations(self, features: Any, activation: Callable[[str], Any]) -> Any:
        """`features` with `activation(key)` in place of each embedding feature's ids, when the model_fn reads
        them there (`activations_in_features`), as TensorFlow's TPUEstimator hands them; else `features`."""
        if not self.activations_in_features or self.state.engine is None:
            return features
        return {**features, **{f.name: activation(f.name) for f in self.state.engine.spec.features}}

    def _graph(self, mode: str, features: Any, labels: Any, scope: LookupScope, context: TPUContext) -> Any:
        """The TensorFlow graph of `mode`, built by calling the model_fn at the first batch of a call."""

        def call(graph_features: Any, graph_labels: Any, graph_scope: Any) -> Any:
            graph_features = self._with_activations(graph_features, graph_scope.feature_activation)
            return self._run_model_fn(graph_features, graph_labels, mode, graph_scope, context)

        return self.graphs.get(mode, features, labels, scope, call, self.state.dense_state, self.tensor_core)

    def _apply_engine_gradients(self, result: Any, grads: dict[str, np.ndarray]) -> None:
        """The engine applies d(loss)/d(activations) per feature (zeros, with a warning, for a missing one)."""
        if self.state.engine is None:
            self.state.step += 1
            return
        engine_grads = {}
        for feature in self.state.engine.spec.features:
            if feature.name in grads:
                engine_grads[feature.name] = grads[feature.name]
            elif feature.name not in self._warned_no_gradient:
                self._warned_no_gradient.add(feature.name)
                log.warning(
                    "No gradient for feature %r (its activation was not used, or not passed back in "
                    "embedding_gradients); using zeros, as TensorFlow does.",
                    feature.name,
                )
        self.state.engine.apply_gradients(result, engine_grads)
