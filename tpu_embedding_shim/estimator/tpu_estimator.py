"""`TPUEstimator`: runs a legacy model_fn on a CPU, its embeddings on the emulated TPU embedding engine.

One training step, as on a TPU:

1. the step's ids are looked up by the engine (`engine.forward`), and the
   tensor-core columns by the model's own variables;
2. the model_fn runs inside a `LookupScope`: its DenseFeatures /
   input_layer / SequenceFeatures calls read those activations;
3. the returned spec's `embedding_gradients` (and, with the torch bridge,
   autograd; for a TensorFlow model_fn, `tf.gradients` in its graph, see
   tf_bridge.py) give d(loss)/d(activations); the runner splits them per
   feature, and the engine applies them with the EmbeddingConfigSpec's
   optimizer (gradient multiplier, per-table learning rates, pipelining,
   sharding -- all as the spec says);
4. the tensor-core table gradients are put in `params['context']`, then
   `train_op()` updates the dense model.

The embeddings ALWAYS train with the EmbeddingConfigSpec's optimizer, with
`use_tpu=True` or `False` (TensorFlow's `use_tpu=False` instead trains them
with the model's optimizer as plain embedding columns, ignores
max_sequence_length, and refuses `partition_strategy='mod'`; here `mod`
works). See docs/runner.md for the whole contract.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import os
import sys
import tempfile
import time
import types
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..compat.embedding_config_spec import EmbeddingConfigSpec
from ..compat.feature_layers import LookupScope
from ..engine.engine import Engine
from ..engine.tf_bundle.debris import sole_writer
from .context import TensorCoreColumns, TPUContext
from .evaluation import EvalMetrics
from .export import write_export
from .inputs import BatchStream, call_input_fn, fn_args
from .model_dir import ModelState
from .model_fn import EstimatorSpec, ModeKeys, NanLossDuringTrainingError, TPUEstimatorSpec, scalar, to_numpy
from .progress import Progress, progress_enabled
from .run_config import InputPipelineConfig, RunConfig, TPURunConfig, check_positive_integer
from .state import DenseState
from .warm_start import warm_start_settings

log = logging.getLogger("tpu_embedding_shim")

_RESERVED_PARAMS_KEYS = ["batch_size", "context"]
_OWN_PARAMS_KEYS = ["dense_state"]
_MODEL_FN_ARGS = {"features", "labels", "mode", "params", "self", "config"}
_MODEL_FN_FIX = (
    "TPUEstimator calls model_fn(features, labels, mode, params[, config]): define it as "
    "`def model_fn(features, labels, mode, params):` (the examples of TensorFlow's EmbeddingConfigSpec "
    "and embedding_column pages write `def model_fn(features):`, which TensorFlow refuses too)."
)


class ExportSavedModelApiVersion:
    V1 = 1
    V2 = 2


def _check_hooks(value: Any, name: str) -> None:
    if value:
        raise ValueError(
            f"`{name}` are TensorFlow session hooks, which need a graph; this runner has none. "
            "Do the work in the model_fn or around train()/evaluate() instead."
        )


def _check_steps(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"Must specify {name} > 0, given: {value}")
    return int(value)


class TPUEstimator:
    """`tf.compat.v1.estimator.tpu.TPUEstimator` on a CPU.

    Args:
      model_fn: `model_fn(features, labels, mode, params[, config])`
        returning a TPUEstimatorSpec or EstimatorSpec. `params` holds your
        params plus 'batch_size', 'context' (a `TPUContext`) and
        'dense_state' (a `DenseState` saved with the checkpoints).
      model_dir: where checkpoints go (else `config.model_dir`, else a
        temporary directory). Both set and different: ValueError.
      config: a `tf.compat.v1.estimator.tpu.RunConfig` (required, as in
        TensorFlow; a plain RunConfig is refused).
      params: your hyper-parameters; must not use the reserved keys.
      use_tpu, eval_on_tpu: as in TensorFlow for the checks and batch
        sizes; the embedding engine runs either way (see the module doc).
      train_batch_size, eval_batch_size, predict_batch_size: passed to
        input_fn and model_fn as params['batch_size'] (the global batch: the
        CPU runs one replica). `use_tpu=True` requires train_batch_size.
      batch_axis, export_to_tpu, export_to_cpu, export_saved_model_api_version: accepted and checked.
      warm_start_from: a checkpoint path (or model_dir), or a
        `tf.estimator.WarmStartSettings`: what a fresh model_dir takes from
        another run -- this runner's, or TensorFlow's on a CPU or a TPU
        (by default the tables and dense state; slots and the step start
        fresh). See docs/checkpoints.md.
      embedding_config_spec: the `EmbeddingConfigSpec`.
    """

    def __init__(
        self,
        model_fn=None,
        model_dir=None,
        config=None,
        params=None,
        use_tpu=True,
        train_batch_size=None,
        eval_batch_size=None,
        predict_batch_size=None,
        batch_axis=None,
        eval_on_tpu=True,
        export_to_tpu=True,
        export_to_cpu=True,
        warm_start_from=None,
        embedding_config_spec=None,
        export_saved_model_api_version=ExportSavedModelApiVersion.V1,
    ):
        if config is None or not isinstance(config, TPURunConfig):
            raise ValueError("`config` must be provided with type `tpu_config.RunConfig`")
        if params is not None and not isinstance(params, dict):  # TensorFlow fails on it with Python's own text
            raise TypeError(f"Argument `params` of TPUEstimator must be a dict or None. Received: {params!r:.200}.")
        try:
            use_tpu = bool(use_tpu)
        except (TypeError, ValueError):  # an array of several values has no truth value
            raise ValueError(
                f"Argument `use_tpu` of TPUEstimator must be a bool. Received: {use_tpu!r:.200}."
            ) from None
        if embedding_config_spec is not None and not isinstance(embedding_config_spec, EmbeddingConfigSpec):
            raise TypeError(
                "embedding_config_spec must be an EmbeddingConfigSpec "
                f"(tf.estimator.tpu.experimental.EmbeddingConfigSpec). Received: {embedding_config_spec!r}."
            )
        if params is not None and any(k in params for k in _RESERVED_PARAMS_KEYS):
            raise ValueError(f"{_RESERVED_PARAMS_KEYS} are reserved keys but existed in params {params}.")
        if params is not None and any(k in params for k in _OWN_PARAMS_KEYS):
            raise ValueError(
                f"{_OWN_PARAMS_KEYS} is reserved by this runner (the dense model's state) but existed "
                f"in params {params}."
            )
        if use_tpu:
            if train_batch_size is None:
                raise ValueError("`train_batch_size` cannot be `None`")
            check_positive_integer(train_batch_size, "train_batch_size")
            if (
                config.tpu_config.per_host_input_for_training is InputPipelineConfig.PER_SHARD_V1
                and config.tpu_config.num_cores_per_replica
            ):
                raise ValueError(
                    "Model parallelism only supports per host input for training. Please adjust "
                    "TPURunconfig.per_host_input_for_training."
                )
            if eval_batch_size is not None:
                check_positive_integer(eval_batch_size, "eval_batch_size")
            if predict_batch_size is not None:
                check_positive_integer(predict_batch_size, "predict_batch_size")
            if embedding_config_spec and config.tpu_config.per_host_input_for_training not in (
                InputPipelineConfig.PER_HOST_V1,
                InputPipelineConfig.PER_HOST_V2,
            ):
                raise ValueError(
                    "Only PER_HOST_V1 and PER_HOST_V2 is supported when using TPU Embedding; got "
                    f"{config.tpu_config.per_host_input_for_training}."
                )
        else:
            for name, value in (
                ("train_batch_size", train_batch_size),
                ("eval_batch_size", eval_batch_size),
                ("predict_batch_size", predict_batch_size),
            ):
                if value is not None:
                    check_positive_integer(value, name)
        # TensorFlow raises "Mod sharding of embedding tables not supported on CPU." here when not
        # (use_tpu and eval_on_tpu); the CPU engine shards by 'mod' as well as 'div', so we don't.
        self._verify_model_fn(model_fn, params)
        if export_saved_model_api_version not in (1, 2):
            raise ValueError(f"export_saved_model_api_version should be 1 or 2; got {export_saved_model_api_version}.")

        if model_dir is not None and config.model_dir is not None and model_dir != config.model_dir:
            raise ValueError(
                "`model_dir` are set both in constructor and `RunConfig`, but with different values. "
                f"In constructor: '{model_dir}', in `RunConfig`: '{config.model_dir}' "
            )
        model_dir = model_dir or config.model_dir
        if model_dir is None:
            model_dir = tempfile.mkdtemp()
            log.warning("Using temporary folder as model directory: %s", model_dir)
        self._model_dir = os.fspath(model_dir)
        self._config = config.replace(model_dir=self._model_dir)
        self._model_fn = model_fn
        self._params = copy.deepcopy(params or {})
        self._use_tpu = bool(use_tpu)
        self._eval_on_tpu = bool(eval_on_tpu)
        self._batch_sizes = {
            ModeKeys.TRAIN: train_batch_size,
            ModeKeys.EVAL: eval_batch_size,
            ModeKeys.PREDICT: predict_batch_size,
        }
        self._batch_axis = batch_axis
        self._export_to_tpu, self._export_to_cpu = export_to_tpu, export_to_cpu
        self._warm_start_from = warm_start_from
        self._warm_start_settings = warm_start_settings(warm_start_from)
        self._embedding_config_spec = embedding_config_spec
        self._num_shards = config.tpu_config.num_shards or 1
        self._tensor_core = None
        if embedding_config_spec is not None and embedding_config_spec.tensor_core_feature_columns:
            self._tensor_core = TensorCoreColumns(embedding_config_spec.tensor_core_feature_columns)
        self._state = ModelState(
            self._model_dir,
            embedding_config_spec=embedding_config_spec,
            tensor_core=self._tensor_core,
            num_shards=self._num_shards,
            seed=config.tf_random_seed,
            warm_start_settings=self._warm_start_settings,
        )
        self._uses_engine = self._state.uses_engine
        self._announced = False
        self._warned_no_gradient: set = set()
        self.progress: bool | None = None  # default for train/evaluate/predict(progress=None)
        self._tf_model_fn: bool | None = None  # whether the model_fn is TensorFlow code (tf_bridge.py)
        self._tf_graphs: dict[str, Any] = {}  # mode -> the TensorFlow bridge's graph of the running call

    # Properties ------------------------------------------------------------------------

    @property
    def model_dir(self) -> str:
        return self._model_dir

    @property
    def config(self) -> RunConfig:
        return copy.copy(self._config)

    @property
    def params(self) -> dict:
        return copy.deepcopy(self._params)

    @property
    def model_fn(self):
        return self._model_fn

    @property
    def embedding_config_spec(self) -> EmbeddingConfigSpec | None:
        return self._embedding_config_spec

    @property
    def global_step(self) -> int:
        """The step the next training step will compute (the engine's)."""
        return self._state.global_step

    @property
    def engine(self) -> Engine | None:
        """The embedding engine (built, or restored from the latest checkpoint, on first use)."""
        self._ensure_state(ModeKeys.TRAIN)
        return self._state.engine

    @property
    def dense_state(self) -> DenseState:
        """The dense model's state (`params['dense_state']` in the model_fn), built or restored on first use."""
        self._ensure_state(ModeKeys.TRAIN)
        return self._state.dense_state

    # Construction checks ---------------------------------------------------------------

    @staticmethod
    def _verify_model_fn(model_fn: Any, params: dict | None) -> None:
        """TensorFlow's construction checks of the model_fn's arguments (`_verify_model_fn_args`).

        A model_fn without `params` is refused here only when params are
        given; otherwise, as in TensorFlow, when it is first called.
        """
        if model_fn is None or not callable(model_fn):
            raise ValueError(f"model_fn must be provided (a callable). Received: {model_fn!r}.")
        args = set(fn_args(model_fn))
        if "features" not in args:
            raise ValueError(f"model_fn ({model_fn}) must include features argument.")
        if params is not None and "params" not in args:
            raise ValueError(
                f"model_fn ({model_fn}) does not include params argument, but params ({params}) is "
                f"passed to Estimator. {_MODEL_FN_FIX}"
            )
        unexpected = sorted(args - _MODEL_FN_ARGS)
        if unexpected:
            raise ValueError(f"model_fn ({model_fn}) has following not expected args: {unexpected}")

    # State (model_dir.py) ------------------------------------------------------------------

    def _ensure_state(self, mode: str, checkpoint_path: str | None = None) -> None:
        """Makes the in-memory state the latest checkpoint's (or `checkpoint_path`'s), or a fresh one."""
        self._state.ensure(mode, checkpoint_path)

    def _tf_save_dense(self) -> None:
        """A running TensorFlow training graph's dense variables into dense_state, before they are saved or read."""
        if ModeKeys.TRAIN in self._tf_graphs:
            self._tf_graphs[ModeKeys.TRAIN].save_to(self._state.dense_state)

    def _save(self) -> str:
        self._tf_save_dense()
        return self._state.save(keep=self._config.keep_checkpoint_max or None)

    def latest_checkpoint(self) -> str | None:
        """The latest checkpoint of model_dir (`<model_dir>/model.ckpt-<step>`, or an older-format one), or None."""
        return self._state.latest_checkpoint()

    def get_variable_names(self) -> list[str]:
        """The checkpoint's variable names (TensorFlow's, see docs/checkpoints.md), sorted: tables, slots, the dense
        state, 'global_step'."""
        self._ensure_state(ModeKeys.PREDICT)
        self._tf_save_dense()
        return self._state.variable_names()

    def get_variable_value(self, name: str) -> Any:
        """The value of a variable of `get_variable_names()` in the latest checkpoint (a table full, in id order).

        The engine's names are accepted too: 'tbl_user' (a table),
        'tbl_user/accumulators' (its slot), and dense_state keys.
        """
        self._ensure_state(ModeKeys.PREDICT)
        try:
            return self._state.variable_value(name)
        except KeyError:
            raise ValueError(f"Variable {name!r} not found; variables are {self.get_variable_names()}.") from None

    # One step ------------------------------------------------------------------------------

    def _announce(self) -> None:
        if self._announced:
            return
        self._announced = True
        spec = self._embedding_config_spec
        log.info("TPUEstimator on CPU (use_tpu=%s): the TPU embedding engine is emulated with numpy.", self._use_tpu)
        if not self._uses_engine:
            self._announce_tensor_core()
            return
        optimizer = type(spec.optimization_parameters).__name__ if spec.optimization_parameters else "per table"
        note = (
            ""
            if self._use_tpu
            else (
                " even with use_tpu=False (TensorFlow's CPU path would train them with the model's optimizer instead)"
            )
        )
        log.info("Embedding tables train with the EmbeddingConfigSpec optimizer (%s)%s.", optimizer, note)
        if spec.partition_strategy == "mod" and not (self._use_tpu and self._eval_on_tpu):
            log.info(
                "partition_strategy='mod' works here; TensorFlow refuses it on CPU ('Mod sharding of embedding "
                "tables not supported on CPU.')."
            )
        self._announce_tensor_core()

    def _announce_tensor_core(self) -> None:
        if self._tensor_core is not None:
            log.info(
                "Tensor-core columns %s: their tables %s are dense variables in params['dense_state'], trained "
                "by the model's own optimizer (train_op), as on a TPU.",
                self._tensor_core.feature_names,
                sorted(self._tensor_core.tables),
            )

    def _model_params(self, mode: str, context: TPUContext) -> dict:
        params = dict(self._params)
        batch_size = self._batch_sizes[mode]
        if batch_size is not None:
            params["batch_size"] = batch_size
        params["context"] = context
        params["dense_state"] = self._state.dense_state
        return params

    def _input_params(self, mode: str) -> dict:
        params = copy.deepcopy(self._params)
        batch_size = self._batch_sizes[mode]
        if batch_size is not None:
            params["batch_size"] = batch_size
        return params

    def _call_model_fn(self, features: Any, labels: Any, mode: str, params: dict) -> Any:
        args = fn_args(self._model_fn)
        kwargs = {}
        if "labels" in args:
            kwargs["labels"] = labels
        elif labels is not None:
            raise ValueError(f"model_fn does not take labels, but input_fn returns labels. {_MODEL_FN_FIX}")
        if "mode" in args:
            kwargs["mode"] = mode
        if "params" not in args:  # TensorFlow's TPUEstimator raises here too, when it first calls the model_fn
            raise ValueError(
                f"model_fn ({self._model_fn}) does not include params argument, required by "
                f"TPUEstimator to pass batch size as params['batch_size']. {_MODEL_FN_FIX}"
            )
        kwargs["params"] = params
        if "config" in args:
            kwargs["config"] = self.config
        spec = self._model_fn(features=features, **kwargs)
        if not isinstance(spec, (EstimatorSpec, TPUEstimatorSpec)):
            raise ValueError(f"model_fn should return an EstimatorSpec or a TPUEstimatorSpec. Given: {spec!r}")
        if spec.mode != mode:
            raise ValueError(f"model_fn returned a spec for mode {spec.mode!r} while running mode {mode!r}.")
        if mode == ModeKeys.TRAIN and (spec.loss is None or spec.train_op is None):
            raise ValueError("Missing loss." if spec.loss is None else "Missing train_op.")
        if mode == ModeKeys.EVAL and spec.loss is None:
            raise ValueError("Missing loss.")
        if mode == ModeKeys.PREDICT and spec.predictions is None:
            raise ValueError("Missing predictions.")
        if isinstance(spec, TPUEstimatorSpec) and spec.scaffold_fn is not None:
            spec.scaffold_fn()
        return spec

    def _check_features(self, features: Any) -> Any:
        if (self._state.engine is not None or self._tensor_core is not None) and not isinstance(features, Mapping):
            raise ValueError(
                "With an embedding_config_spec, `features` must be a dict of feature name -> ids "
                f"(as TPUEstimator's input splitting requires). Received: {type(features).__name__}."
            )
        return features

    def _step_scope(self, features: Any, mode: str, training: bool):
        """(lookup result or None, tensor-core batches or None, scope, context) for one model_fn call."""
        result, tc_batches = None, None
        activations: dict[str, np.ndarray] = {}
        lengths: dict[str, np.ndarray] = {}
        if self._state.engine is not None:
            result = self._state.engine.forward(features, training=training)
            activations.update(result.activations)
            lengths.update(result.sequence_lengths)
        if self._tensor_core is not None:
            tc_activations, tc_batches = self._tensor_core.lookup(features, self._state.dense_state)
            activations.update(tc_activations)
        scope = LookupScope(activations, lengths, training=training, features=features)
        context = TPUContext(
            mode=mode,
            global_step=self.global_step,
            batch_size=self._batch_sizes[mode],
            dense_state=self._state.dense_state,
            tensor_core=self._tensor_core,
            engine=self._state.engine,
            scope=scope,
            use_tpu=self._use_tpu,
        )
        return result, tc_batches, scope, context

    def _train_step(self, features: Any, labels: Any) -> float:
        if self._uses_tf():
            return self._tf_train_step(features, labels)
        features = self._check_features(features)
        result, tc_batches, scope, context = self._step_scope(features, ModeKeys.TRAIN, training=True)
        with scope:
            spec = self._call_model_fn(features, labels, ModeKeys.TRAIN, self._model_params(ModeKeys.TRAIN, context))
        self._state.names.learn(scope.layer_names)
        grads = scope.split_gradients(spec.embedding_gradients)
        if hasattr(spec.loss, "backward"):
            from . import torch_bridge

            for key, grad in torch_bridge.backward(spec.loss, scope).items():
                grads[key] = grads[key] + grad if key in grads else grad
        loss = scalar(spec.loss, "The loss")
        if math.isnan(loss):
            raise NanLossDuringTrainingError()
        self._apply_engine_gradients(result, grads)
        if self._tensor_core is not None:
            context.tensor_core_gradients.update(self._tensor_core.gradients(tc_batches, grads))
        spec.train_op()
        return loss

    def _apply_engine_gradients(self, result: Any, grads: dict[str, np.ndarray]) -> None:
        """The engine applies d(loss)/d(activations) per feature (zeros, with a warning, for a missing one)."""
        if self._state.engine is not None:
            engine_grads = {}
            for feature in self._state.engine.spec.features:
                if feature.name in grads:
                    engine_grads[feature.name] = grads[feature.name]
                elif feature.name not in self._warned_no_gradient:
                    self._warned_no_gradient.add(feature.name)
                    log.warning(
                        "No gradient for feature %r (its activation was not used, or not passed back in "
                        "embedding_gradients); using zeros, as TensorFlow does.",
                        feature.name,
                    )
            self._state.engine.apply_gradients(result, engine_grads)
        else:
            self._state.step += 1

    # The TensorFlow bridge (estimator/tf_bridge.py) -------------------------------------------------

    def _uses_tf(self) -> bool:
        """Whether the model_fn is TensorFlow code: TensorFlow is imported and the model_fn reads it."""
        if self._tf_model_fn is None and "tensorflow" in sys.modules:
            from . import tf_bridge

            self._tf_model_fn = tf_bridge.uses_tensorflow(self._model_fn)
        return bool(self._tf_model_fn)

    def _tf_input(self, result: Any) -> Any:
        """input_fn's result, a tf.data.Dataset or TF tensors read as numpy batches (when TF is imported)."""
        if "tensorflow" not in sys.modules:
            return result
        from . import tf_bridge

        return tf_bridge.as_batches(result)

    def _tf_close(self, mode: str) -> None:
        """Ends the graph of `mode` (a training graph first copies its variables into dense_state)."""
        graph = self._tf_graphs.pop(mode, None)
        if graph is not None:
            if mode == ModeKeys.TRAIN:
                graph.save_to(self._state.dense_state)
            graph.close()

    def _tf_graph(self, mode: str, features: Any, labels: Any, scope: LookupScope, context: TPUContext):
        """The graph of `mode`, built by calling the model_fn at the first batch of a train / evaluate / predict."""
        graph = self._tf_graphs.get(mode)
        if graph is None:
            from . import tf_bridge

            if self._tensor_core is not None:
                raise ValueError(
                    "A TensorFlow model_fn with tensor-core columns (embedding_lookup_device="
                    f"'tpu_tensor_core': features {self._tensor_core.feature_names}) is not supported "
                    "yet: their tables would be TF variables. Look them up on the engine instead "
                    "(embedding_lookup_device='tpu_embedding_core', the default)."
                )
            params = self._model_params(mode, context)

            def call(graph_features, graph_labels, graph_scope):
                with graph_scope:
                    spec = self._call_model_fn(graph_features, graph_labels, mode, params)
                self._state.names.learn(graph_scope.layer_names)
                return spec

            graph = tf_bridge.GraphModel(mode, call, features, labels, scope, self._state.dense_state)
            self._tf_graphs[mode] = graph
        return graph

    def _tf_train_step(self, features: Any, labels: Any) -> float:
        features = self._check_features(features)
        result, _, scope, context = self._step_scope(features, ModeKeys.TRAIN, training=True)
        graph = self._tf_graph(ModeKeys.TRAIN, features, labels, scope, context)
        loss, grads = graph.train(features, labels, scope, self.global_step)
        if math.isnan(loss):
            raise NanLossDuringTrainingError()
        self._apply_engine_gradients(result, grads)
        return loss

    def _tf_infer(self, features: Any, labels: Any, mode: str):
        features = self._check_features(features)
        _, _, scope, context = self._step_scope(features, mode, training=False)
        graph = self._tf_graph(mode, features, labels, scope, context)
        if mode == ModeKeys.EVAL:
            return types.SimpleNamespace(loss=graph.evaluate(features, labels, scope, self.global_step))
        return types.SimpleNamespace(predictions=graph.predict(features, scope, self.global_step))

    def _infer(self, features: Any, labels: Any, mode: str):
        if self._uses_tf():
            return self._tf_infer(features, labels, mode)
        features = self._check_features(features)
        _, _, scope, context = self._step_scope(features, mode, training=False)
        torch = sys.modules.get("torch")
        no_grad = torch.no_grad() if torch is not None else contextlib.nullcontext()
        with scope, no_grad:
            spec = self._call_model_fn(features, labels, mode, self._model_params(mode, context))
        self._state.names.learn(scope.layer_names)
        return spec

    # train / evaluate / predict -----------------------------------------------------------------

    def train(
        self, input_fn, hooks=None, steps=None, max_steps=None, saving_listeners=None, *, progress: bool | None = None
    ) -> TPUEstimator:
        """Trains for `steps` more steps, up to global step `max_steps`, or until input_fn's batches end.

        A checkpoint is saved every `save_checkpoints_steps` (or
        `save_checkpoints_secs`) and at the end. `progress` shows a progress
        bar (None: on a terminal outside CI). Returns self.

        Raises DirectoryInUseError (a RuntimeError) when another process
        trains in (or saves checkpoints to) model_dir; evaluate, predict and
        export need no lock and run beside a training.
        """
        _check_hooks(hooks, "hooks")
        _check_hooks(saving_listeners, "saving_listeners")
        if steps is not None and max_steps is not None:
            raise ValueError("Can not provide both steps and max_steps.")
        steps = _check_steps(steps, "steps")
        max_steps = _check_steps(max_steps, "max_steps")
        with sole_writer(self._model_dir, "TPUEstimator.train"):
            return self._train(input_fn, steps, max_steps, progress)

    def _train(self, input_fn, steps, max_steps, progress) -> TPUEstimator:
        self._tf_close(ModeKeys.TRAIN)  # a graph left by an interrupted train(): its values first
        self._ensure_state(ModeKeys.TRAIN)
        self._announce()
        start = self.global_step
        if max_steps is not None and max_steps <= start:
            log.info("Skipping training since max_steps has already saved.")
            return self
        limit = steps if steps is not None else (max_steps - start if max_steps is not None else None)
        result = self._tf_input(
            call_input_fn(input_fn, ModeKeys.TRAIN, self._input_params(ModeKeys.TRAIN), self.config)
        )
        stream = BatchStream(result, ModeKeys.TRAIN, repeat=limit)
        if stream.single and limit is None:
            raise ValueError(
                "input_fn returned one batch of arrays, which TensorFlow would feed at every step "
                "forever: pass train(steps=...) or max_steps=..., or return a generator of batches."
            )
        total = limit if stream.length is None else (stream.length if limit is None else min(limit, stream.length))
        config = self._config
        every_steps, every_secs = config.save_checkpoints_steps, config.save_checkpoints_secs
        log_every = config.log_step_count_steps
        bar = Progress("train", total, enabled=progress_enabled(self.progress if progress is None else progress))
        last_save, last_log_time, last_log_step = time.monotonic(), time.monotonic(), start
        loss, done = None, 0
        try:
            for features, labels in stream:
                if limit is not None and done >= limit:
                    break
                loss = self._train_step(features, labels)
                done += 1
                bar.update(loss=loss)
                step = self.global_step
                if log_every and step % log_every == 0:
                    now = time.monotonic()
                    if now > last_log_time:
                        log.info("global_step/sec: %g", (step - last_log_step) / (now - last_log_time))
                    log.info("loss = %g, step = %d", loss, step)
                    last_log_time, last_log_step = now, step
                if (every_steps and step % every_steps == 0) or (
                    every_secs and time.monotonic() - last_save >= every_secs
                ):
                    self._save()
                    last_save = time.monotonic()
        finally:
            bar.close()
        if self._state.loaded_step != self.global_step or self.latest_checkpoint() is None:
            self._save()
        self._tf_close(ModeKeys.TRAIN)
        log.info("Loss for final step: %s.", loss)
        return self

    def evaluate(
        self, input_fn, steps=None, hooks=None, checkpoint_path=None, name=None, *, progress: bool | None = None
    ) -> dict[str, Any]:
        """Evaluates on input_fn's batches (at most `steps`); returns {'loss', 'global_step', metrics...}.

        'loss' is the mean of the per-batch losses (as TensorFlow's
        `metrics.mean(loss)`). `eval_metrics=(metric_fn, tensors)`:
        tensors concatenated over all batches, metric_fn called once.
        `eval_metric_ops` (EstimatorSpec): the mean over batches of each
        per-batch value.
        """
        _check_hooks(hooks, "hooks")
        steps = _check_steps(steps, "steps")
        if self._use_tpu and self._eval_on_tpu and self._batch_sizes[ModeKeys.EVAL] is None:
            raise ValueError(
                "eval_batch_size in TPUEstimator constructor cannot be `None` if .evaluate is running on TPU."
            )
        self._ensure_state(ModeKeys.EVAL, checkpoint_path)
        self._announce()
        result = self._tf_input(call_input_fn(input_fn, ModeKeys.EVAL, self._input_params(ModeKeys.EVAL), self.config))
        self._tf_close(ModeKeys.EVAL)
        stream = BatchStream(result, ModeKeys.EVAL, repeat=steps or 1)
        total = steps if stream.length is None else (stream.length if steps is None else min(steps, stream.length))
        bar = Progress("evaluate", total, enabled=progress_enabled(self.progress if progress is None else progress))
        collected = EvalMetrics()
        try:
            for features, labels in stream:
                if steps is not None and len(collected.losses) >= steps:
                    break
                bar.update(loss=collected.add(self._infer(features, labels, ModeKeys.EVAL)))
        finally:
            bar.close()
        graph_metrics: dict[str, Any] = {}
        if ModeKeys.EVAL in self._tf_graphs:  # tf.compat.v1.metrics: their values after all update ops
            graph_metrics.update(self._tf_graphs[ModeKeys.EVAL].metrics())
            self._tf_close(ModeKeys.EVAL)
        metrics = collected.results(graph_metrics)
        metrics["global_step"] = self.global_step
        log.info(
            "Saving dict for global step %d: %s",
            self.global_step,
            ", ".join(f"{k} = {v}" for k, v in sorted(metrics.items())),
        )
        return metrics

    def predict(
        self,
        input_fn,
        predict_keys=None,
        hooks=None,
        checkpoint_path=None,
        yield_single_examples=True,
        *,
        progress: bool | None = None,
    ) -> Iterator[Any]:
        """Yields predictions: one dict per example (or per batch with yield_single_examples=False)."""
        _check_hooks(hooks, "hooks")
        if self._use_tpu and self._batch_sizes[ModeKeys.PREDICT] is None:
            raise ValueError(
                "predict_batch_size in TPUEstimator constructor should not be `None` if .predict is running on TPU."
            )
        if isinstance(predict_keys, str):
            predict_keys = [predict_keys]
        return self._predict(input_fn, predict_keys, checkpoint_path, yield_single_examples, progress)

    def _predict(self, input_fn, predict_keys, checkpoint_path, yield_single_examples, progress):
        self._ensure_state(ModeKeys.PREDICT, checkpoint_path)
        self._announce()
        result = self._tf_input(
            call_input_fn(input_fn, ModeKeys.PREDICT, self._input_params(ModeKeys.PREDICT), self.config)
        )
        self._tf_close(ModeKeys.PREDICT)
        stream = BatchStream(result, ModeKeys.PREDICT, repeat=1)
        bar = Progress(
            "predict",
            stream.length,
            unit="batches",
            enabled=progress_enabled(self.progress if progress is None else progress),
        )
        try:
            for features, _ in stream:
                spec = self._infer(features, None, ModeKeys.PREDICT)
                predictions = spec.predictions
                bar.update()
                if isinstance(predictions, Mapping):
                    predictions = {k: np.asarray(to_numpy(v)) for k, v in predictions.items()}
                    if predict_keys is not None:
                        missing = [k for k in predict_keys if k not in predictions]
                        if missing:
                            raise ValueError(
                                f"Expected to run at least one output from {list(predictions)}, "
                                f"provided {predict_keys}."
                            )
                        predictions = {k: predictions[k] for k in predict_keys}
                else:
                    predictions = np.asarray(to_numpy(predictions))
                if not yield_single_examples:
                    yield predictions
                    continue
                if isinstance(predictions, dict):
                    sizes = {k: v.shape[0] if v.ndim else None for k, v in predictions.items()}
                    batch = next(iter(sizes.values()), 0)
                    for key, size in sizes.items():
                        if size != batch:
                            raise ValueError(
                                f"Batch length of predictions should be same. {key} has different batch "
                                "length than others."
                            )
                    for i in range(batch or 0):
                        yield {k: v[i] for k, v in predictions.items()}
                else:
                    yield from predictions
        finally:
            bar.close()
            self._tf_close(ModeKeys.PREDICT)

    # Export ------------------------------------------------------------------------------------

    def export_embeddings(self, export_dir: str, checkpoint_path: str | None = None) -> str:
        """Writes the unsharded tables, the dense state and a manifest to `export_dir` (see export.py)."""
        self._ensure_state(ModeKeys.PREDICT, checkpoint_path)
        tables, trained_by, combiners, features = {}, {}, {}, []
        if self._state.engine is not None:
            for table in self._state.engine.spec.tables:
                tables[table.name] = self._state.engine.table(table.name)
                trained_by[table.name] = "embedding engine"
                combiners[table.name] = table.combiner
            features += list(self._state.engine.spec.features)
        if self._tensor_core is not None:
            for name, table in self._tensor_core.tables.items():
                tables[name] = np.asarray(self._state.dense_state[name])
                trained_by[name] = "model (tpu_tensor_core)"
                combiners[name] = table.combiner
            features += list(self._tensor_core.features)
        path = write_export(
            export_dir,
            tables=tables,
            trained_by=trained_by,
            combiners=combiners,
            features=features,
            dense_state=self._state.dense_state,
            global_step=self.global_step,
            extra={
                "partition_strategy": getattr(self._embedding_config_spec, "partition_strategy", None),
                "num_shards": self._num_shards,
            },
        )
        log.info("Exported the model at global step %d to %s.", self.global_step, path)
        return path

    def export_saved_model(
        self,
        export_dir_base,
        serving_input_receiver_fn=None,
        assets_extra=None,
        as_text=False,
        checkpoint_path=None,
        experimental_mode=ModeKeys.PREDICT,
    ) -> bytes:
        """TensorFlow's export entry point, into a new `<export_dir_base>/<timestamp>`; returns that path as bytes.

        A TensorFlow model_fn exports a real SavedModel (tf_serving.py): its
        PREDICT graph over the serving input receiver's tensors, the tables
        as TF variables looked up with TensorFlow ops, the trained values.
        Any other model_fn has no graph to save: `export_embeddings` writes
        the tables, the dense state and a manifest, and
        `serving_input_receiver_fn` is accepted and not called.
        """
        if not self._export_to_cpu and not self._export_to_tpu:
            raise ValueError("One of export_to_cpu and export_to_tpu must be true.")
        if serving_input_receiver_fn is not None and not callable(serving_input_receiver_fn):
            raise TypeError("serving_input_receiver_fn must be callable or None.")
        base = os.fspath(export_dir_base)
        stamp = int(time.time())
        while os.path.exists(os.path.join(base, str(stamp))) or os.path.exists(os.path.join(base, f"temp-{stamp}")):
            stamp += 1
        export_dir = os.path.join(base, str(stamp))
        if self._uses_tf():
            return self._export_tf_saved_model(
                export_dir, serving_input_receiver_fn, assets_extra, as_text, checkpoint_path, experimental_mode
            ).encode()
        return self.export_embeddings(export_dir, checkpoint_path).encode()

    def _export_tf_saved_model(
        self, export_dir, serving_input_receiver_fn, assets_extra, as_text, checkpoint_path, experimental_mode
    ) -> str:
        if experimental_mode != ModeKeys.PREDICT:
            raise ValueError(
                f"experimental_mode={experimental_mode!r}: this runner exports the PREDICT graph only "
                f"(experimental_mode={ModeKeys.PREDICT!r}); a served model has no engine to train with."
            )
        if serving_input_receiver_fn is None:
            raise ValueError("An input_receiver_fn must be defined.")
        if self._tensor_core is not None:
            raise ValueError(
                "A TensorFlow model_fn with tensor-core columns cannot be exported yet (features "
                f"{self._tensor_core.feature_names}); see docs/tensorflow_estimator.md."
            )
        from . import tf_serving

        self._ensure_state(ModeKeys.PREDICT, checkpoint_path)
        tables, combiners, features = {}, {}, []
        if self._state.engine is not None:
            for table in self._state.engine.spec.tables:
                tables[table.name] = self._state.engine.table(table.name)
                combiners[table.name] = table.combiner
            features = list(self._state.engine.spec.features)

        def call(receiver_features, scope):
            context = TPUContext(
                mode=ModeKeys.PREDICT,
                global_step=self.global_step,
                batch_size=self._batch_sizes[ModeKeys.PREDICT],
                dense_state=self._state.dense_state,
                tensor_core=None,
                engine=self._state.engine,
                scope=scope,
                use_tpu=self._use_tpu,
            )
            params = self._model_params(ModeKeys.PREDICT, context)
            with scope:
                spec = self._call_model_fn(receiver_features, None, ModeKeys.PREDICT, params)
            self._state.names.learn(scope.layer_names)
            return spec

        path = tf_serving.write_saved_model(
            export_dir,
            serving_input_receiver_fn=serving_input_receiver_fn,
            call_model_fn=call,
            features=features,
            tables=tables,
            combiners=combiners,
            table_names=self._state.names.variable,
            dense_state=self._state.dense_state,
            global_step=self.global_step,
            assets_extra=assets_extra,
            as_text=as_text,
        )
        log.info("Exported a SavedModel at global step %d to %s.", self.global_step, path)
        return path
