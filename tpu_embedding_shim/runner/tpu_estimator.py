"""`TPUEstimator`: runs a legacy model_fn on a CPU, its embeddings on the emulated TPU embedding engine.

This module is the estimator's loops: `train` (checkpoints every
`save_checkpoints_steps` / `_secs` and at the end), `evaluate` (the metrics
of evaluation.py), `predict` (predictions.py) and the exports (export.py,
or a SavedModel for a TensorFlow model_fn, tf_graphs.py). One batch
through the model -- the engine's lookup, the model_fn inside a
`LookupScope`, the gradients back to the engine -- is steps.py; the model
directory's state and checkpoints are model_dir.py; the argument checks,
in TensorFlow's words, arguments.py and model_fn.py.

The embeddings ALWAYS train with the EmbeddingConfigSpec's optimizer, with
`use_tpu=True` or `False` (TensorFlow's `use_tpu=False` instead trains them
with the model's optimizer as plain embedding columns, ignores
max_sequence_length, and refuses `partition_strategy='mod'`; here `mod`
works). See docs/runner.md for the whole contract.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Iterator
from typing import Any

from ..api import replicas
from ..api.embedding_config_spec import EmbeddingConfigSpec
from ..api.warm_start import warm_start_settings
from ..checkpoints.state import DenseState
from ..engine import EmbeddingEngine
from ..progress import Progress, progress_enabled
from . import predictions as prediction_batches
from . import replicated, tf_graphs
from .announce import announce
from .arguments import check_constructor, check_hooks, check_steps, model_dir_of
from .context import TensorCoreColumns
from .evaluation import EvalMetrics
from .export import drain_streams, served_tables, timestamped_dir, write_export
from .inputs import BatchStream, call_input_fn, fn_args
from .model_dir import ModelState
from .model_fn import EstimatorSpec, ModeKeys, TPUEstimatorSpec, call_model_fn
from .run_config import RunConfig, num_shards_of
from .steps import Steps

log = logging.getLogger("tpu_embedding_shim")


class ExportSavedModelApiVersion:
    V1 = 1
    V2 = 2


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
      use_tpu: as in TensorFlow for the checks and batch sizes (True
        requires `train_batch_size`). The embeddings train on the engine,
        with the EmbeddingConfigSpec's optimizer, either way (TensorFlow's
        `use_tpu=False` trains them with the model's optimizer instead).
      train_batch_size: the global batch of `train`, passed to input_fn and
        model_fn as params['batch_size'] (the CPU runs one replica).
      eval_batch_size: the same for `evaluate`; required there when
        `use_tpu` and `eval_on_tpu`.
      predict_batch_size: the same for `predict`; required there when
        `use_tpu`.
      batch_axis: accepted and kept; the CPU has no shards to split a batch
        over.
      eval_on_tpu: as in TensorFlow for the checks of `evaluate`.
      export_to_tpu: with `export_to_cpu`: `export_saved_model` needs one of
        them True.
      export_to_cpu: see `export_to_tpu`.
      warm_start_from: a checkpoint path (or model_dir), or a
        `tf.estimator.WarmStartSettings`: what a fresh model_dir takes from
        another run -- this runner's, or TensorFlow's on a CPU or a TPU
        (by default the tables and dense state; slots and the step start
        fresh). See docs/checkpoints.md.
      embedding_config_spec: the `EmbeddingConfigSpec`.
      export_saved_model_api_version: 1 or 2 (checked, as in TensorFlow).
      dense_framework: how the model_fn's dense part runs (not in
        TensorFlow, whose TPUEstimator runs TensorFlow code only): 'auto'
        (the default) runs it as a TensorFlow graph when TensorFlow is
        imported and the model_fn reads it (up to three calls deep), else as
        Python; 'tensorflow' or 'python' say which. The choice and its reason
        are logged at INFO at the first batch. See
        docs/tensorflow_estimator.md.
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
        *,
        dense_framework="auto",
    ):
        dense_framework = tf_graphs.check_dense_framework(dense_framework)
        batch_sizes = (train_batch_size, eval_batch_size, predict_batch_size)
        use_tpu = check_constructor(
            model_fn, config, params, use_tpu, batch_sizes, embedding_config_spec, export_saved_model_api_version
        )
        self._num_shards = num_shards_of(config.tpu_config)
        replicated.check_batch_sizes(
            {"train": train_batch_size, "eval": eval_batch_size, "predict": predict_batch_size}, self._num_shards
        )
        self._model_dir = model_dir_of(model_dir, config)
        self._config = config.replace(model_dir=self._model_dir)
        self._model_fn = model_fn
        self._model_fn_args = fn_args(model_fn)  # read once: a step does not inspect the signature again
        self._params = copy.deepcopy(params or {})
        self._use_tpu = use_tpu
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
        self.progress: bool | None = None  # default for train/evaluate/predict(progress=None)
        self._tf = tf_graphs.TFGraphs(  # a TF model_fn's graphs; its summaries go to model_dir
            dense_framework, config.tf_random_seed, summaries=(self._model_dir, config.save_summary_steps)
        )
        self._steps = Steps(  # one batch through the model (steps.py)
            self._call_model_fn,
            self._state,
            self._tensor_core,
            self._params,
            self._batch_sizes,
            use_tpu,
            self._tf,
            eval_on_tpu=self._eval_on_tpu,
            activations_in_features=(
                embedding_config_spec is not None and embedding_config_spec.table_to_config_dict is not None
            ),
        )

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
    def engine(self) -> EmbeddingEngine | None:
        """The embedding engine (built, or restored from the latest checkpoint, on first use)."""
        self._ensure_state(ModeKeys.TRAIN)
        return self._state.engine

    @property
    def dense_state(self) -> DenseState:
        """The dense model's state (`params['dense_state']` in the model_fn), built or restored on first use."""
        self._ensure_state(ModeKeys.TRAIN)
        return self._state.dense_state

    # State (model_dir.py) ------------------------------------------------------------------

    def _ensure_state(self, mode: str, checkpoint_path: str | None = None) -> None:
        """Makes the in-memory state the latest checkpoint's (or `checkpoint_path`'s), or a fresh one (built
        eagerly in a TensorFlow 1 program: its TensorFlow initializers give values)."""
        with tf_graphs.eager_when_tensorflow():
            self._state.ensure(mode, checkpoint_path)

    def _save(self) -> str:
        self._tf.save_dense(self._state.dense_state)
        return self._state.save(keep=self._config.keep_checkpoint_max or None)

    def latest_checkpoint(self) -> str | None:
        """The latest checkpoint of model_dir (`<model_dir>/model.ckpt-<step>`), or None."""
        return self._state.latest_checkpoint()

    def get_variable_names(self) -> list[str]:
        """The checkpoint's variable names (TensorFlow's, see docs/checkpoints.md), sorted: tables, slots, the dense
        state, 'global_step'."""
        self._ensure_state(ModeKeys.PREDICT)
        self._tf.save_dense(self._state.dense_state)
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

    # What the loops share ----------------------------------------------------------------------

    def _announce(self) -> None:
        if not self._announced:
            self._announced = True
            announce(
                self._embedding_config_spec,
                use_tpu=self._use_tpu,
                eval_on_tpu=self._eval_on_tpu,
                uses_engine=self._uses_engine,
                tensor_core=self._tensor_core,
            )

    def _input(self, input_fn: Any, mode: str) -> Any:
        """What input_fn returns for `mode` (TensorFlow datasets and tensors read as numpy batches)."""
        params = copy.deepcopy(self._params)
        if self._batch_sizes[mode] is not None:
            params["batch_size"] = replicated.per_replica(self._batch_sizes[mode])  # the global one in one process
        params["context"] = self._steps.input_context(mode)
        return tf_graphs.input_batches(lambda: call_input_fn(input_fn, mode, params, self.config))

    def _progress(self, what: str, total: int | None, progress: bool | None, unit: str = "steps") -> Progress:
        """A progress bar for `what`, shown if `progress` (None: the estimator's `progress`, None: on a terminal)."""
        return Progress(
            what, total, unit=unit, enabled=progress_enabled(self.progress if progress is None else progress)
        )

    # One batch (steps.py) ---------------------------------------------------------------------

    def _call_model_fn(self, features: Any, labels: Any, mode: str, params: dict) -> EstimatorSpec | TPUEstimatorSpec:
        args = self._model_fn_args
        config = self.config if "config" in args else None  # a copy: only for a model_fn that takes it
        return call_model_fn(self._model_fn, features, labels, mode, params, config, args)

    def _uses_tf(self) -> bool:
        """Whether the model_fn runs as TensorFlow code (`dense_framework`)."""
        return self._tf.uses_tensorflow(self._model_fn)

    def _train_step(self, features: Any, labels: Any) -> float:
        if self._uses_tf():
            return self._steps.tf_train(features, labels)
        return self._steps.train(features, labels)

    def _infer(self, features: Any, labels: Any, mode: str) -> Any:
        if self._uses_tf():
            return self._steps.tf_infer(features, labels, mode)
        return self._steps.infer(features, labels, mode)

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
        listeners = self._check_hooks(ModeKeys.TRAIN, hooks, saving_listeners)
        if steps is not None and max_steps is not None:
            raise ValueError("Can not provide both steps and max_steps.")
        steps = check_steps(steps, "steps")
        max_steps = check_steps(max_steps, "max_steps")
        with replicated.chief_writer(self._model_dir, "TPUEstimator.train"):
            return self._train(input_fn, steps, max_steps, progress, listeners)

    def _check_hooks(self, mode: str, hooks: Any, saving_listeners: Any = None) -> list[Any]:
        """The call's session hooks (and, in train, its saving listeners, returned): a TensorFlow model_fn runs
        them around its graph's steps (tf_hooks.py); any other model_fn has no graph and refuses them."""
        if not self._uses_tf():
            check_hooks(hooks, "hooks")
            check_hooks(saving_listeners, "saving_listeners")
            return []
        from . import tf_hooks

        listeners = tf_hooks.check_listeners(saving_listeners)
        self._tf.set_hooks(mode, hooks)
        return listeners

    def _save_with(self, listeners: list[Any]) -> bool:
        """A checkpoint, with each CheckpointSaverListener's before_save / after_save around it; True when an
        after_save asks training to stop (returns True), as in TensorFlow."""
        session, step = self._tf.session(ModeKeys.TRAIN), self.global_step
        for listener in listeners:
            listener.before_save(session, step)
        self._save()
        return any([bool(listener.after_save(session, step)) for listener in listeners])

    def _train(self, input_fn, steps, max_steps, progress, listeners=()) -> TPUEstimator:
        # A graph an interrupted train() left: its values are kept, its hooks' end() never runs (TensorFlow's).
        self._tf.close(ModeKeys.TRAIN, self._state.dense_state, completed=False)
        self._ensure_state(ModeKeys.TRAIN)
        self._announce()
        start = self.global_step
        if max_steps is not None and max_steps <= start:
            log.info("Skipping training since max_steps has already saved.")
            return self
        limit = steps if steps is not None else (max_steps - start if max_steps is not None else None)
        result = self._input(input_fn, ModeKeys.TRAIN)
        stream = BatchStream(result, ModeKeys.TRAIN, repeat=limit)
        if stream.single and limit is None:
            raise ValueError(
                "input_fn returned one batch of arrays, which TensorFlow would feed at every step "
                "forever: pass train(steps=...) or max_steps=..., or return a generator of batches."
            )
        total = limit if stream.length is None else (stream.length if limit is None else min(limit, stream.length))
        for listener in listeners:
            listener.begin()
        config = self._config
        every_steps, every_secs = config.save_checkpoints_steps, config.save_checkpoints_secs
        log_every = config.log_step_count_steps
        bar = self._progress("train", total, progress)
        last_save, last_log_time, last_log_step = time.monotonic(), time.monotonic(), start
        loss, done = None, 0
        try:
            for features, labels in replicated.while_every_replica_has(stream):
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
                stop = self._tf.stop_requested(ModeKeys.TRAIN)  # a session hook's request_stop()
                if (every_steps and step % every_steps == 0) or (
                    every_secs and time.monotonic() - last_save >= every_secs
                ):
                    stop = self._save_with(listeners) or stop
                    last_save = time.monotonic()
                if stop:
                    break
        finally:
            bar.close()
        if self._state.loaded_step != self.global_step or self.latest_checkpoint() is None:
            self._save_with(listeners)
        session = self._tf.session(ModeKeys.TRAIN)
        for listener in listeners:
            listener.end(session, self.global_step)
        self._tf.close(ModeKeys.TRAIN, self._state.dense_state)
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
        steps = check_steps(steps, "steps")
        if self._use_tpu and self._eval_on_tpu and self._batch_sizes[ModeKeys.EVAL] is None:
            raise ValueError(
                "eval_batch_size in TPUEstimator constructor cannot be `None` if .evaluate is running on TPU."
            )
        self._check_hooks(ModeKeys.EVAL, hooks)
        self._ensure_state(ModeKeys.EVAL, checkpoint_path)
        self._announce()
        result = self._input(input_fn, ModeKeys.EVAL)
        self._tf.close(ModeKeys.EVAL, self._state.dense_state, completed=False)  # what an interrupted call left
        stream = BatchStream(result, ModeKeys.EVAL, repeat=steps or 1)
        total = steps if stream.length is None else (stream.length if steps is None else min(steps, stream.length))
        bar = self._progress("evaluate", total, progress)
        collected = EvalMetrics()
        try:
            for features, labels in replicated.while_every_replica_has(stream):
                if steps is not None and len(collected.losses) >= steps:
                    break
                bar.update(loss=collected.add(self._infer(features, labels, ModeKeys.EVAL)))
                if self._tf.stop_requested(ModeKeys.EVAL):
                    break
        finally:
            bar.close()
        graph_metrics = self._tf.metrics()  # a TensorFlow model_fn's tf.compat.v1.metrics
        self._tf.close(ModeKeys.EVAL, self._state.dense_state)
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
        if self._use_tpu and self._batch_sizes[ModeKeys.PREDICT] is None:
            raise ValueError(
                "predict_batch_size in TPUEstimator constructor should not be `None` if .predict is running on TPU."
            )
        if isinstance(predict_keys, str):
            predict_keys = [predict_keys]
        self._check_hooks(ModeKeys.PREDICT, hooks)
        return self._predict(input_fn, predict_keys, checkpoint_path, yield_single_examples, progress)

    def _predict(self, input_fn, predict_keys, checkpoint_path, yield_single_examples, progress):
        self._ensure_state(ModeKeys.PREDICT, checkpoint_path)
        self._announce()
        result = self._input(input_fn, ModeKeys.PREDICT)
        self._tf.close(ModeKeys.PREDICT, self._state.dense_state, completed=False)
        stream = BatchStream(result, ModeKeys.PREDICT, repeat=1)
        bar = self._progress("predict", stream.length, progress, unit="batches")
        completed = False  # a generator closed early, or an error, never reaches the hooks' end() (TensorFlow's)
        try:
            for features, _ in replicated.while_every_replica_has(stream):
                predictions = prediction_batches.as_arrays(
                    self._infer(features, None, ModeKeys.PREDICT).predictions, predict_keys
                )
                bar.update()
                if yield_single_examples:
                    yield from prediction_batches.examples(predictions)
                else:
                    yield predictions
            completed = True
        finally:
            bar.close()
            self._tf.close(ModeKeys.PREDICT, self._state.dense_state, completed=completed)

    # Export ------------------------------------------------------------------------------------

    def export_embeddings(self, export_dir: str, checkpoint_path: str | None = None) -> str:
        """Writes the unsharded tables, the dense state and a manifest to `export_dir` (see export.py)."""
        self._ensure_state(ModeKeys.PREDICT, checkpoint_path)
        engine = self._state.engine
        streamed = getattr(engine, "world_size", 1) > 1  # under mpiexec: rows stream to replica 0 as it writes
        served = served_tables(engine, self._tensor_core, self._state.dense_state, streamed=streamed)
        extra = {
            "partition_strategy": getattr(self._embedding_config_spec, "partition_strategy", None),
            "num_shards": self._num_shards,
        }
        path = replicas.on_chief(  # under mpiexec: replica 0 writes the tables, each block as it arrives
            lambda: write_export(
                export_dir, served, dense_state=self._state.dense_state, global_step=self.global_step, extra=extra
            ),
            "TPUEstimator: export",
            meanwhile=lambda: drain_streams(served),
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
        export_dir = replicas.on_chief(lambda: timestamped_dir(export_dir_base), "TPUEstimator: export directory")
        if self._uses_tf():
            return self._export_tf_saved_model(
                export_dir, serving_input_receiver_fn, assets_extra, as_text, checkpoint_path, experimental_mode
            ).encode()
        return self.export_embeddings(export_dir, checkpoint_path).encode()

    def _export_tf_saved_model(
        self, export_dir, serving_input_receiver_fn, assets_extra, as_text, checkpoint_path, experimental_mode
    ) -> str:
        tf_graphs.check_export(experimental_mode, serving_input_receiver_fn, self._tensor_core)
        self._ensure_state(ModeKeys.PREDICT, checkpoint_path)
        served = served_tables(self._state.engine)  # collective under mpiexec; replica 0 writes the SavedModel
        path = replicas.on_chief(
            lambda: tf_graphs.export(
                export_dir,
                serving_input_receiver_fn=serving_input_receiver_fn,
                call=self._steps.serve,
                served=served,
                table_names=self._state.names.variable,
                dense_state=self._state.dense_state,
                global_step=self.global_step,
                assets_extra=assets_extra,
                as_text=as_text,
            ),
            "TPUEstimator: export a SavedModel",
        )
        log.info("Exported a SavedModel at global step %d to %s.", self.global_step, path)
        return path
