"""The TensorFlow bridge of the runner: a TensorFlow model_fn's dense part runs in a TF graph.

Imported by `TPUEstimator` only when the model_fn runs as TensorFlow code
(`tf_graphs.TFGraphs.uses_tensorflow`: `dense_framework='tensorflow'`, or
TensorFlow imported and read by the model_fn). As TensorFlow's TPUEstimator
does on a TPU, the model_fn builds a `tf.compat.v1` graph in
which every feature-layer output over TPU columns is a tensor fed from the
engine's activations:

- graph: built once per `train` / `evaluate` / `predict` call, at its first
  batch. The features and labels are placeholders (arrays of numbers; any
  other value, e.g. sparse ids, is passed to the model_fn as it is and read
  only by the feature layers). `DenseFeatures` / `input_layer` /
  `SequenceFeatures` return placeholders (one per feature they read;
  numeric columns are read from the feature placeholders), and the bridge
  adds `tf.gradients(loss, those placeholders)`.
- each training step: one `session.run` of `train_op`, the loss and those
  gradients, fed with the step's activations, features and labels; the
  runner hands the gradients to the engine, which applies them with the
  EmbeddingConfigSpec's optimizer. The model's optimizer trains the dense
  variables only (the embeddings are placeholders, not variables).
- `global_step` is the graph's `tf.compat.v1.train.get_or_create_global_step()`,
  loaded with the engine's step before each step.
- the dense variables live in the session; their values are copied into
  `params['dense_state']` under their TF names (`dense/kernel`,
  `dense/kernel/Adagrad`) when the runner saves a checkpoint, and loaded
  from it when a graph is built, so the model_dir's TF checkpoint holds
  them and the engine's tables together.

See docs/tensorflow_estimator.md.
"""

from __future__ import annotations

import contextlib
import inspect
import operator
import sys
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context as eager_context  # eager_mode(): eager inside graph mode

from ..api import replicas
from ..api.feature_columns import NumericColumn
from ..api.lookup_scope import LookupScope
from ..api.tensors import RaggedTensor, SparseTensor
from .tf_data import numpy_elements
from .tf_run import FixedRun

__all__ = [
    "tensorflow_read_by",
    "as_batches",
    "input_batches",
    "GraphLayers",
    "GraphScope",
    "GraphModel",
]

_TF_MODULES = ("tensorflow", "tf_keras", "keras", "tpu_embedding_shim.tensorflow")


# Is the model_fn TensorFlow code? ----------------------------------------------------------------


def _is_tf_module(value: Any) -> bool:
    name = getattr(value, "__name__", "") if isinstance(value, types.ModuleType) else ""
    return any(name == m or name.startswith(m + ".") for m in _TF_MODULES)


def _is_tf_object(value: Any) -> bool:
    module = getattr(value, "__module__", None) or getattr(type(value), "__module__", "") or ""
    return any(module == m or module.startswith(m + ".") for m in _TF_MODULES)


def tensorflow_read_by(fn: Any, depth: int = 3) -> str | None:
    """Where `fn` (or a function it names, `depth` calls deep) reads a TensorFlow module or function, as
    "`name` in function" (the first found); None when it reads none."""
    seen = set()

    def visit(f: Any, level: int) -> str | None:
        f = inspect.unwrap(getattr(f, "func", f))  # functools.partial, decorators
        if not hasattr(f, "__code__") and callable(f):
            f = f.__call__  # a callable object: its __call__ method
        code = getattr(f, "__code__", None)
        if code is None or id(code) in seen:
            return None
        seen.add(id(code))
        names = set(code.co_names)
        for const in code.co_consts:  # nested functions (metric_fn inside model_fn)
            if inspect.iscode(const):
                names |= set(const.co_names)
        scope = dict(getattr(f, "__globals__", {}))
        for cell_name, cell in zip(code.co_freevars, getattr(f, "__closure__", None) or ()):
            try:
                scope[cell_name] = cell.cell_contents
            except ValueError:
                continue
            names.add(cell_name)
        for name in sorted(names):
            value = scope.get(name)
            if value is None:
                continue
            if _is_tf_module(value) or (callable(value) and _is_tf_object(value)):
                return f"`{name}` in {getattr(f, '__qualname__', code.co_name)}"
            if level < depth and inspect.isfunction(value):
                found = visit(value, level + 1)
                if found is not None:
                    return found
        return None

    return visit(fn, 0)


# input_fn results --------------------------------------------------------------------------------


def to_numpy(value: Any) -> Any:
    """A TF value (and dicts / tuples / lists of them) as the engine's numpy values."""
    if isinstance(value, tf.SparseTensor):
        return SparseTensor(value.indices.numpy(), value.values.numpy(), value.dense_shape.numpy())
    if isinstance(value, tf.RaggedTensor):
        if value.ragged_rank != 1:
            raise ValueError(f"Only ragged tensors of ragged_rank 1 can be ids. Received shape {value.shape}.")
        return RaggedTensor(value.values.numpy(), value.row_splits.numpy())
    if tf.is_tensor(value) and hasattr(value, "numpy"):
        return value.numpy()
    if isinstance(value, Mapping):
        return {k: to_numpy(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(to_numpy(v) for v in value)
    if isinstance(value, list):
        return [to_numpy(v) for v in value]
    return value


def as_batches(result: Any) -> Any:
    """What input_fn returned, with a `tf.data.Dataset` (or TF tensors, or a generator of them) as numpy batches,
    iterated eagerly."""
    if isinstance(result, tf.data.Dataset):
        return numpy_elements(result, to_numpy)
    if isinstance(result, Iterator):  # a generator of batches: each read as numpy when it is reached
        return (to_numpy(element) for element in result)
    return to_numpy(result)


def eagerly() -> contextlib.AbstractContextManager[Any]:
    """A context in which TensorFlow executes eagerly, also in a TensorFlow 1 program (graph mode): where the
    engine builds its tables, a TensorFlow initializer gives values, not graph tensors."""
    if tf.executing_eagerly():
        return contextlib.nullcontext()
    return eager_context.eager_mode()


def input_batches(call_input_fn: Callable[[], Any]) -> Any:
    """`call_input_fn()`'s result as numpy batches, in eager mode and in graph mode alike.

    Eagerly (TensorFlow 2's default) the input_fn runs as it is and its
    dataset is iterated eagerly (`as_batches`). In graph mode (a TensorFlow 1
    program that called `tf.compat.v1.disable_v2_behavior()` or
    `disable_eager_execution()`, or a call inside `with graph.as_default()`)
    the input_fn builds its pipeline in a graph of its own, as TensorFlow's
    Estimator does, and a session reads it one batch at a time: a dataset
    through an initializable iterator, tensors that read an input (an
    iterator's `get_next()`, a queue) at every run until `OutOfRangeError`,
    other tensors once (the same batch at every step, as TensorFlow feeds it).
    """
    if tf.executing_eagerly():
        return as_batches(call_input_fn())
    graph = tf.Graph()
    with graph.as_default():
        result = call_input_fn()
        streaming = True
        if isinstance(result, tf.data.Dataset):
            iterator = tf.compat.v1.data.make_initializable_iterator(result)
            init = [iterator.initializer]
            result = iterator.get_next()
        else:
            init = []
            streaming = any(_reads_input(op) for op in graph.get_operations())
        flat = tf.nest.flatten(result)
        tensors = [i for i, value in enumerate(flat) if _is_graph_value(value)]
        if not tensors:  # numpy batches or a generator: read as in eager mode
            return as_batches(result)
        init.append(tf.compat.v1.tables_initializer())
        init.append(tf.compat.v1.local_variables_initializer())
        init.append(tf.compat.v1.global_variables_initializer())
    session = tf.compat.v1.Session(graph=graph)
    session.run(init)

    def read() -> Any:
        values = list(flat)
        for i, value in zip(tensors, session.run([flat[i] for i in tensors])):
            values[i] = _graph_value_to_numpy(value)
        return tf.nest.pack_sequence_as(result, values)

    if not streaming:
        try:
            return read()
        finally:
            session.close()

    def stream() -> Iterator[Any]:
        try:
            while True:
                try:
                    batch = read()
                except tf.errors.OutOfRangeError:
                    return
                yield batch
        finally:
            session.close()

    return stream()


_INPUT_OP_TYPES = ("IteratorGetNext", "IteratorGetNextSync", "ReaderRead", "QueueDequeue")


def _reads_input(op: Any) -> bool:
    """Whether a graph op reads the next input (so each run of the pipeline gives another batch)."""
    return any(op.type.startswith(kind) for kind in _INPUT_OP_TYPES)


def _is_graph_value(value: Any) -> bool:
    return isinstance(value, (tf.Tensor, tf.SparseTensor, tf.RaggedTensor, tf.Variable))


def _graph_value_to_numpy(value: Any) -> Any:
    """A value `Session.run` returned (an array, a `SparseTensorValue`, a `RaggedTensorValue`) as the engine's."""
    if isinstance(value, tf.compat.v1.SparseTensorValue):
        return SparseTensor(value.indices, value.values, value.dense_shape)
    if isinstance(value, tf.compat.v1.ragged.RaggedTensorValue):
        if value.ragged_rank != 1:
            raise ValueError(f"Only ragged tensors of ragged_rank 1 can be ids. Received shape {value.shape}.")
        return RaggedTensor(np.asarray(value.values), np.asarray(value.row_splits))
    return value


# The feature layers' outputs in the graph --------------------------------------------------------


class GraphLayers(LookupScope):
    """A scope whose feature layers return graph tensors: one per column, concatenated in the given (name) order.

    Subclasses say how one column's tensor is made: `_pooled` and `_sequence`.
    """

    builds_graph = True

    def _pooled(self, column: Any, features: Mapping[str, Any], owner: str) -> Any:
        raise NotImplementedError

    def _sequence(self, column: Any, owner: str, with_lengths: bool) -> tuple[Any, Any]:
        raise NotImplementedError

    def dense_output(self, columns: Sequence[Any], features: Mapping[str, Any], owner: str, layer: str) -> Any:
        """DenseFeatures / input_layer: [B, sum D]; TensorFlow's numeric columns are read from the features."""
        pieces = []
        for column in columns:
            if isinstance(column, NumericColumn):
                pieces.append(numeric_tensor(column, features, owner))
                continue
            self.layer_names.setdefault(column.get_feature_key_name(), layer)
            pieces.append(self._pooled(column, features, owner))
        return _layer_output(pieces, layer)

    def sequence_output(self, columns: Sequence[Any], owner: str, layer: str) -> tuple[Any, Any]:
        """SequenceFeatures: ([B, L, sum D] tensor, [B] int64 lengths of the first column)."""
        pieces, lengths = [], None
        for column in columns:
            self.layer_names.setdefault(column.get_feature_key_name(), layer)
            piece, column_lengths = self._sequence(column, owner, with_lengths=lengths is None)
            pieces.append(piece)
            lengths = column_lengths if lengths is None else lengths
        return _layer_output(pieces, layer), lengths


def _layer_output(pieces: list[Any], layer: str) -> Any:
    return tf.concat(pieces, axis=-1, name=layer) if len(pieces) > 1 else tf.identity(pieces[0], name=layer)


class GraphScope(GraphLayers):
    """The scope the feature layers read while a model_fn builds its graph: outputs are fed placeholders.

    `fed` lists what each step feeds: ('activation' or 'length', feature key,
    placeholder).
    """

    def __init__(self, scope: LookupScope):
        super().__init__(scope.activations, scope.sequence_lengths, training=scope.training, features=scope.features)
        self.fed: list[tuple[str, str, Any]] = []

    def _placeholder(self, kind: str, key: str, array: np.ndarray, dtype: Any) -> Any:
        name = f"{key}_{'embedding_activations' if kind == 'activation' else 'sequence_length'}"
        placeholder = tf.compat.v1.placeholder(dtype, [None, *np.shape(array)[1:]], name=name)
        self.fed.append((kind, key, placeholder))
        return placeholder

    def feature_activation(self, key: str) -> Any:
        """A placeholder fed with feature `key`'s activation each step: what a model_fn of an
        `EmbeddingConfigSpec(feature_to_config_dict=...)` reads as `features[key]`."""
        return self._placeholder("activation", key, np.asarray(self.activations[key]), tf.float32)

    def _pooled(self, column: Any, features: Mapping[str, Any], owner: str) -> Any:
        key = column.get_feature_key_name()
        return self._placeholder("activation", key, self.activation(column, owner), tf.float32)

    def _sequence(self, column: Any, owner: str, with_lengths: bool) -> tuple[Any, Any]:
        key = column.get_feature_key_name()
        activation = self._placeholder("activation", key, self.activation(column, owner), tf.float32)
        lengths = (
            self._placeholder("length", key, np.asarray(self.sequence_lengths[key]), tf.int64) if with_lengths else None
        )
        return activation, lengths


def numeric_tensor(column: NumericColumn, features: Mapping[str, Any], owner: str) -> Any:
    if column.key not in features:
        raise ValueError(
            f"{owner}: numeric column {column.key!r} is missing from the features. Received keys: {sorted(features)}."
        )
    value = features[column.key]
    if column.normalizer_fn is not None:
        value = column.normalizer_fn(value)
    width = int(np.prod(column.shape))
    return tf.reshape(tf.cast(value, tf.float32), [-1, width])


# One mode's graph ---------------------------------------------------------------------------------


_UNSERVED = (
    "TPU ops in the graph ({ops}): tf.compat.v1.tpu.rewrite / tpu.replicate / tpu.shard (and "
    "outside_compilation inside them) compile for a TPU, which this runner does not have. Build the dense "
    "part directly in the model_fn."
)


def _placeholder_for(value: Any, name: str) -> Any:
    """A placeholder for an array of numbers or strings, else None (the value is passed as it is)."""
    if isinstance(value, (SparseTensor, RaggedTensor)) or value is None:
        return None
    try:
        array = np.asarray(value)
    except (TypeError, ValueError):
        return None
    if array.dtype.kind not in "biufUSO" or (
        array.dtype.kind == "O" and not all(isinstance(v, (bytes, str)) for v in array.ravel())
    ):
        return None
    dtype = tf.string if array.dtype.kind in "USO" else tf.as_dtype(array.dtype)
    # Floats keep their per-example shape (dense inputs of layers); ids and strings may change width per batch.
    if array.dtype.kind == "f":
        shape = [None, *array.shape[1:]] if array.ndim else []
    else:
        shape = [None] * array.ndim
    return tf.compat.v1.placeholder(dtype, shape, name=name)


def _graph_inputs(value: Any, prefix: str) -> tuple[Any, dict[Any, Callable[[Any], Any]]]:
    """(what the model_fn gets, {placeholder: how to read its value from a step's batch})."""
    feeds: dict[Any, Callable[[Any], Any]] = {}
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            placeholder = _placeholder_for(item, f"{prefix}_{key}")
            out[key] = item if placeholder is None else placeholder
            if placeholder is not None:
                feeds[placeholder] = operator.itemgetter(key)
        return out, feeds
    placeholder = _placeholder_for(value, prefix)
    if placeholder is None:
        return value, feeds
    feeds[placeholder] = lambda batch: batch
    return placeholder, feeds


def refuse_keras_3(next_creator: Callable[..., Any], **kwargs: Any) -> Any:
    """The model_fn graph's variable creator: a Keras 3 layer's variable is a ValueError naming the fix.

    Keras 3 (`tf.keras` on TensorFlow >= 2.16 by default) does not build
    `tf.compat.v1` graphs: it names layers once per process (`dense_19`), so
    each mode's graph would name its variables anew and none would find its
    trained value. Keras 2 (tf_keras) names them per graph, as the Estimator
    needs. Keras 2.15's modules are `keras.src` too, hence the version test.
    """
    version = str(getattr(sys.modules.get("keras"), "__version__", "2"))
    if version.split(".")[0] not in ("0", "1", "2"):
        frame: types.FrameType | None = inspect.currentframe()
        frame = None if frame is None else frame.f_back
        while frame is not None and not frame.f_globals.get("__name__", "").startswith("keras.src."):
            frame = frame.f_back
        if frame is not None:
            raise ValueError(
                f"The TensorFlow model_fn built a Keras {version} layer (variable {kwargs.get('name')!r}) "
                "in its tf.compat.v1 graph. Keras 3, which tf.keras is on TensorFlow >= 2.16, does not build "
                "tf.compat.v1 graphs (it names layers per process, so no graph would find its trained weights). "
                "A TPUEstimator program needs Keras 2: pip install tf_keras and set TF_USE_LEGACY_KERAS=1 before "
                'TensorFlow is imported (docs/tensorflow_bridge.md, "Which TensorFlow").'
            )
    return next_creator(**kwargs)


CROSS_REPLICA_OP = "cross_replica_sum"
"""The name of the graph op in which `tpu_embedding_shim.tensorflow`'s CrossShardOptimizer sums the
gradients over the processes (under mpiexec)."""


def _joined_over_replicas(tensors: Any) -> Any:
    """`eval_metrics` tensors, each joined along its first axis over the replicas in ONE graph op (the same
    collective call on every replica, whatever order the session runs ops in)."""
    named = isinstance(tensors, Mapping)
    keys = list(tensors) if named else list(range(len(tensors)))
    values = [tf.convert_to_tensor(tensors[k]) for k in keys]
    if not values:
        return tensors

    def gather(*arrays: np.ndarray) -> list[np.ndarray]:
        return [np.asarray(a) for a in replicas.all_gather([np.atleast_1d(a) for a in arrays])]

    outputs = tf.numpy_function(gather, values, [v.dtype for v in values], name="cross_replica_gather")
    for out, value in zip(outputs, values):
        out.set_shape(tf.TensorShape([None]).concatenate(value.shape[1:]) if value.shape.rank else [None])
    joined = dict(zip(keys, outputs))
    return joined if named else [joined[k] for k in keys]


# Batches up to this many examples run their graph in the calling thread (`_session_config`).
CALLER_THREAD_EXAMPLES = 1024


def _session_config(scope: LookupScope) -> Any:
    """The session of a graph whose batches are small (at most `CALLER_THREAD_EXAMPLES` activations): every
    op of a run in the calling thread (`inter_op_parallelism_threads=-1`); else TensorFlow's default.

    Such a step's graph is the dense part of a small batch, run once a step
    between the engine's lookup and update: handing its ops to TensorFlow's
    inter-op threads costs more than the ops (the B = 64 migration program
    of docs/benchmarks.md: 0.28-0.29 ms a run against 0.41-0.46). A large
    batch's independent ops gain from running side by side (the B = 4096
    Criteo-like program ran 5-18% slower in the calling thread). Each op's
    kernel uses the intra-op threads either way, so the values are the same.
    """
    sizes = [np.shape(a)[0] for a in scope.activations.values() if np.ndim(a)]
    if not sizes or max(sizes) > CALLER_THREAD_EXAMPLES:
        return None
    return tf.compat.v1.ConfigProto(inter_op_parallelism_threads=-1)


def _is_tensor_like(value: Any) -> bool:
    return isinstance(value, (tf.Tensor, tf.Variable, tf.Operation, tf.SparseTensor))


class GraphModel:
    """The graph of one mode: the model_fn's spec as tensors, a session, and the feeds of each step.

    Args:
      mode: 'train', 'eval' or 'infer'.
      call_model_fn: `(features, labels, scope) -> spec`; the runner's checked
        call of the user's model_fn inside `scope`.
      features: the first step's (shapes, feature keys).
      labels: the first step's.
      scope: the first step's `LookupScope`.
      dense_state: where the variables' values come from and go to.
      seed: the graph's random seed (`RunConfig.tf_random_seed`), as
        TensorFlow's Estimator sets it on each graph it builds: the dense
        variables' initial values are then the same on every run.
    """

    def __init__(
        self,
        mode: str,
        call_model_fn: Callable[[Any, Any, LookupScope], Any],
        features: Any,
        labels: Any,
        scope: LookupScope,
        dense_state: Any,
        seed: int | None = None,
        hooks: Sequence[Any] = (),
        summaries: tuple[str | None, int | None] = (None, None),
    ):
        self.mode = mode
        self.graph = tf.Graph()
        self._metric_values: dict[str, Any] = {}
        self._metric_updates: list[Any] = []
        with self.graph.as_default():
            tf.compat.v1.random.set_random_seed(seed)
            self.global_step = tf.compat.v1.train.get_or_create_global_step()
            graph_features, self._feature_feeds = _graph_inputs(features, "features")
            graph_labels, self._label_feeds = _graph_inputs(labels, "labels")
            self.scope = GraphScope(scope)
            with tf.variable_creator_scope(refuse_keras_3):
                spec = call_model_fn(graph_features, graph_labels, self.scope)
            self.spec = spec
            self._check_served(spec)
            self.loss = None if spec.loss is None else tf.convert_to_tensor(spec.loss)
            self.train_op = spec.train_op
            self.gradients: list[tuple[str, Any]] = []
            if mode == "train":
                fed = [(key, p) for kind, key, p in self.scope.fed if kind == "activation"]
                grads = tf.gradients(self.loss, [p for _, p in fed]) if fed else []
                self.gradients = [(key, tf.convert_to_tensor(g)) for (key, _), g in zip(fed, grads) if g is not None]
            if mode == "eval":
                self._build_metrics(spec)
            self.predictions = spec.predictions if mode == "infer" else None
            self._hooked = _hooked_runs(mode, spec, hooks, summaries)
            # The graph's step once train_op has run, fetched in the same run: when train_op increments it (as
            # optimizer.minimize(loss, global_step) does) the next step needs no run of its own to load it.
            self._step_after_train = None
            if mode == "train":
                with tf.control_dependencies([getattr(self.train_op, "op", self.train_op)]):
                    self._step_after_train = tf.identity(self.global_step.read_value())
            self._graph_step: int | None = None  # the graph's global_step, when known without a run
            self.variables = [v for v in tf.compat.v1.global_variables() if v.op.name != self.global_step.op.name]
            self._assigns = {}  # variable name -> (placeholder, assign op): values in from dense_state / the step
            for variable in [self.global_step, *self.variables]:
                value = tf.compat.v1.placeholder(variable.dtype.base_dtype, variable.shape)
                self._assigns[variable.op.name] = (value, variable.assign(value, read_value=False))
            init = [
                tf.compat.v1.global_variables_initializer(),
                tf.compat.v1.local_variables_initializer(),
                tf.compat.v1.tables_initializer(),
            ]
            self.graph.finalize()
        self.session = tf.compat.v1.Session(graph=self.graph, config=_session_config(scope))
        self.session.run(init)
        self.load_from(dense_state)
        self._hooked.start(self.session)
        self._placeholders = [*self._feature_feeds, *self._label_feeds, *(p for _, _, p in self.scope.fed)]
        # A training step's fetches, the same every step: worked out once (tf_run.py); None: Session.run each step.
        self._train_fetches: list[Any] = []
        self._train_run: FixedRun | None = None
        if mode == "train":
            self._train_fetches = [self.train_op, self._step_after_train, self.loss, *(g for _, g in self.gradients)]
            if not self._hooked.active:
                self._train_run = FixedRun.for_session(self.session, self._train_fetches, self._placeholders)

    @property
    def stop_requested(self) -> bool:
        """Whether a session hook asked the loop to stop (`run_context.request_stop()`, as StopAtStepHook does)."""
        return self._hooked.stop_requested

    def _run(self, fetches: Any, feed_dict: dict[Any, Any]) -> Any:
        """One step's `session.run`, through the session hooks and host_call when there are any."""
        if self._hooked.active:
            return self._hooked.run(fetches, feed_dict)
        return self.session.run(fetches, feed_dict)

    def _check_served(self, spec: Any) -> None:
        types_ = {op.type for op in self.graph.get_operations()}
        if "CrossReplicaSum" in types_:
            raise ValueError(
                "TensorFlow's own tf.compat.v1.tpu.CrossShardOptimizer (or tpu.cross_replica_sum) put "
                "a CrossReplicaSum op in the graph, which runs only on a TPU. Use "
                "`import tpu_embedding_shim.tensorflow as tf` (its CrossShardOptimizer is TensorFlow's "
                "over one replica) or the wrapped optimizer itself."
            )
        tpu_ops = sorted(t for t in types_ if t.startswith("TPU"))
        if tpu_ops:
            raise ValueError(_UNSERVED.format(ops=", ".join(tpu_ops)))
        if not _is_tensor_like(spec.loss) and spec.loss is not None:
            raise TypeError(
                f"The TensorFlow model_fn's loss must be a tf.Tensor. Received: {type(spec.loss).__name__}."
            )
        if self.mode == "train" and not isinstance(spec.train_op, (tf.Operation, tf.Tensor, tf.Variable)):
            raise TypeError(
                "The TensorFlow model_fn's train_op must be a tf.Operation (e.g. optimizer.minimize(loss, "
                f"global_step)). Received: {type(spec.train_op).__name__}."
            )
        summed = any(op.type == "PyFunc" and op.name.endswith(CROSS_REPLICA_OP) for op in self.graph.get_operations())
        if self.mode == "train" and replicas.num_replicas() > 1 and not summed:
            raise ValueError(
                f"Under mpiexec -n {replicas.num_replicas()} each process is a replica with a copy of the dense "
                "model: wrap the model_fn's optimizer in tf.compat.v1.tpu.CrossShardOptimizer (of "
                "`import tpu_embedding_shim.tensorflow as tf`), as a TPU program does, so its gradients are "
                "summed over the replicas. Without it the replicas' dense models would drift apart."
            )

    def _build_metrics(self, spec: Any) -> None:
        metric_ops: dict[str, Any] = {}
        eval_metrics = getattr(spec, "eval_metrics", None)
        if eval_metrics is not None:
            metric_fn, tensors = eval_metrics
            if replicas.num_replicas() > 1:  # every replica's examples, as TPUEstimator joins the shards'
                tensors = _joined_over_replicas(tensors)
            out = metric_fn(**tensors) if isinstance(tensors, Mapping) else metric_fn(*tensors)
            if not isinstance(out, Mapping):
                raise TypeError(
                    f"metric_fn must return a dict {{name: (value, update_op)}}. Received: {type(out).__name__}."
                )
            metric_ops.update(out)
        metric_ops.update(getattr(spec, "eval_metric_ops", None) or {})
        for name, op in metric_ops.items():
            if isinstance(op, tuple) and len(op) == 2:
                value, update = op
                self._metric_updates.append(update)
            else:
                value = op
            self._metric_values[name] = value

    # Variables <-> dense_state -------------------------------------------------------------------

    def load_from(self, dense_state: Any) -> None:
        """Each variable takes its value from dense_state (set or restored); a new one is added to it.

        Under mpiexec a new variable takes replica 0's initial value on every
        replica: the dense model is a copy, and starts as one.
        """
        current = self.session.run(self.variables) if self.variables else []
        if replicas.num_replicas() > 1:
            current = replicas.world().bcast_object(current)
        for variable, initial in zip(self.variables, current):
            value = dense_state.setdefault(variable.op.name, initial)
            if np.shape(value) != np.shape(initial):
                raise ValueError(
                    f"The checkpoint's {variable.op.name!r} has shape {list(np.shape(value))}; the "
                    f"model_fn's variable has shape {list(np.shape(initial))}."
                )
            self._load(variable, np.asarray(value, dtype=initial.dtype))

    def _load(self, variable: Any, value: Any) -> None:
        placeholder, assign = self._assigns[variable.op.name]
        self.session.run(assign, {placeholder: value})

    def _load_step(self, step: int) -> None:
        """The graph's global_step set to the runner's `step` (no run when it holds it already)."""
        if self._graph_step != step:
            self._load(self.global_step, step)
            self._graph_step = step

    def save_to(self, dense_state: Any) -> None:
        """Copies every variable's value into dense_state under its TF name."""
        for variable, value in zip(self.variables, self.session.run(self.variables)):
            dense_state[variable.op.name] = value

    # Steps ------------------------------------------------------------------------------------

    def _feed_values(self, features: Any, labels: Any, scope: LookupScope) -> list[Any]:
        """The step's value of each placeholder of `self._placeholders`, in order."""
        values = [read(features) for read in self._feature_feeds.values()]
        values.extend(read(labels) for read in self._label_feeds.values())
        for kind, key, _ in self.scope.fed:
            source = scope.activations if kind == "activation" else scope.sequence_lengths
            values.append(source[key])
        return values

    def _feed(self, features: Any, labels: Any, scope: LookupScope) -> dict[Any, Any]:
        return dict(zip(self._placeholders, self._feed_values(features, labels, scope)))

    def train(self, features: Any, labels: Any, scope: LookupScope, step: int) -> tuple[float, dict[str, np.ndarray]]:
        """One step: train_op, loss and d loss / d activations in one run; returns (loss, per-feature gradients)."""
        self._load_step(step)
        self._graph_step = None  # unknown until the run returns (it may fail half way)
        values = self._feed_values(features, labels, scope)
        if self._train_run is not None:
            out = self._train_run(values)
        else:
            out = self._run(self._train_fetches, dict(zip(self._placeholders, values)))
        self._graph_step = int(out[1])
        grads: dict[str, np.ndarray] = {}
        for (key, _), grad in zip(self.gradients, out[3:]):
            grads[key] = grads[key] + grad if key in grads else np.asarray(grad, np.float32)
        return float(out[2]), grads

    def evaluate(self, features: Any, labels: Any, scope: LookupScope, step: int) -> float:
        """One eval batch: the loss, and every metric's update op."""
        self._load_step(step)
        out = self._run({"loss": self.loss, "updates": self._metric_updates}, self._feed(features, labels, scope))
        return float(out["loss"])

    def metrics(self) -> dict[str, Any]:
        """The metrics' values after the eval batches."""
        values = self.session.run(self._metric_values) if self._metric_values else {}
        return {
            k: float(v) if np.size(v) == 1 and np.asarray(v).dtype.kind in "biuf" else np.asarray(v)
            for k, v in values.items()
        }

    def predict(self, features: Any, scope: LookupScope, step: int) -> Any:
        self._load_step(step)
        return self._run(self.predictions, self._feed(features, None, scope))

    def close(self, completed: bool = True) -> None:
        """Ends the call: for a call that completed, each session hook's `end(session)` and the host_call's
        summaries flushed; then the session."""
        try:
            if completed:
                self._hooked.end()
        finally:
            self.session.close()


_SPEC_HOOKS = {
    "train": ("training_chief_hooks", "training_hooks"),
    "eval": ("evaluation_hooks",),
    "infer": ("prediction_hooks",),
}


def _hooked_runs(mode: str, spec: Any, hooks: Sequence[Any], summaries: tuple[str | None, int | None]) -> Any:
    """The session hooks of a graph of `mode` (the call's and the spec's), its host_call's ops (TRAIN and EVAL,
    as in TensorFlow) and, in TRAIN, a SummarySaverHook for the graph's `tf.compat.v1.summary` ops."""
    from . import tf_hooks

    every = list(hooks)
    for field in _SPEC_HOOKS[mode]:
        every += tf_hooks.check_hooks(getattr(spec, field, None), f"{type(spec).__name__}.{field}")
    host_ops = tf_hooks.host_call_ops(getattr(spec, "host_call", None)) if mode != "infer" else []
    summary = tf_hooks.summary_hook(*summaries) if mode == "train" else None
    return tf_hooks.HookedRuns(every, host_ops, summary)
