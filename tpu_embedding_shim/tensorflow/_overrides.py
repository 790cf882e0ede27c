"""The one table of names `tpu_embedding_shim.tensorflow` takes from this project: `tf.<path>` -> object.

Every other attribute of the proxy is TensorFlow's own. The objects are the
project's TF-shaped namespaces' (`compat/v1`, `compat/v2`), except where a
TensorFlow program needs a TensorFlow-facing form:

- the mid-level classes take and return TensorFlow tensors (`_midlevel.py`);
- the TPUStrategy stand-in takes TensorFlow datasets, and `InputOptions`
  is TensorFlow's, also taking TF 2.3's argument name; the resolver's
  cluster spec is a `tf.train.ClusterSpec` (`_distribute.py`);
- the stand-in is a TensorFlow strategy, so `tf.distribute.get_strategy`
  and friends stay TensorFlow's (they return it inside its scope);
  `experimental_connect_to_cluster` is the stand-in's no-op for its
  resolver, TensorFlow's for any other;
- `CrossShardOptimizer` is TensorFlow's over one replica (`_optimizers.py`);
- the feature-column functions take `tf.DType`s (`_columns.py`).

Where TensorFlow has no `tf.estimator` (tensorflow-estimator not installed,
or TensorFlow >= 2.16), `tf.estimator.export` is this project's too: the
serving input receivers and TensorFlow core's export outputs
(`_serving_input.py`). With tensorflow-estimator it stays TensorFlow's.

Which feature columns: the categorical ones (they are what the engine looks
up) and `embedding_column`, which takes them. TensorFlow's dense columns
(`numeric_column`, `bucketized_column`, `indicator_column`,
`sequence_numeric_column`), `shared_embeddings` and `linear_model` stay
TensorFlow's; `make_parse_example_spec` reads both kinds (`_columns.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..compat import v1 as tf1
from ..compat import v2 as tf2
from ..compat.v1 import feature_column as v1_feature_column
from ..compat.v2 import feature_column as v2_feature_column
from . import _distribute, _midlevel, _serving, _v1_configs, _versions
from ._columns import make_parse_example_spec, taking_tf_dtypes
from ._optimizers import CrossShardOptimizer
from ._serving_input import EXPORT_NAMES

CATEGORICAL_COLUMNS = (
    "categorical_column_with_identity categorical_column_with_hash_bucket categorical_column_with_vocabulary_file "
    "categorical_column_with_vocabulary_list sequence_categorical_column_with_identity "
    "sequence_categorical_column_with_vocabulary_file sequence_categorical_column_with_vocabulary_list "
    "weighted_categorical_column crossed_column embedding_column"
)
EMBEDDING_CONFIGS = (
    "TableConfig FeatureConfig SGD Adagrad AdagradMomentum Adam FTRL QuantizationConfig "
    "RowIdInitializer SparseCoreEmbeddingConfig CustomOptimizer CustomCombiner"
)
V1_PARAMETERS = "AdagradParameters AdamParameters FtrlParameters StochasticGradientDescentParameters"
ALL_PARAMETERS = V1_PARAMETERS + " MomentumParameters ProximalAdagradParameters RMSPropParameters"
ESTIMATOR = "EstimatorSpec ModeKeys NanLossDuringTrainingError RunConfig WarmStartSettings"
ESTIMATOR_TPU = "InputPipelineConfig RunConfig TPUConfig TPUEstimator TPUEstimatorSpec"


def _from(namespace: str, source: Any, names: str, wrap: Callable[[Any], Any] = lambda value: value) -> dict[str, Any]:
    """`{namespace.name: source.name}` for each of the space-separated `names`."""
    return {f"{namespace}.{name}": wrap(getattr(source, name)) for name in names.split()}


_MIDLEVEL = {
    "TPUEmbedding": _midlevel.TPUEmbedding,
    "TPUEmbeddingV2": _midlevel.TPUEmbeddingV2,
    "TPUEmbeddingForServing": _serving.TPUEmbeddingForServing,
    "serving_embedding_lookup": _serving.serving_embedding_lookup,
}


def _namespaced(namespace: str, objects: dict[str, Any]) -> dict[str, Any]:
    return {f"{namespace}.{name}": value for name, value in objects.items()}


def _v1(names: str) -> dict[str, Any]:
    """The v1 parameter classes and `EmbeddingConfigSpec` that also meet TensorFlow's own v1 configs
    (`_v1_configs.py`)."""
    objects = {**_v1_configs.PARAMETER_CLASSES, "EmbeddingConfigSpec": _v1_configs.EmbeddingConfigSpec}
    return {name: objects[name] for name in names.split()}


OVERRIDES: dict[str, Any] = {
    # Feature columns and the layers that read TPU embeddings.
    **_from("feature_column", v2_feature_column, CATEGORICAL_COLUMNS, taking_tf_dtypes),
    **_from("compat.v1.feature_column", v1_feature_column, CATEGORICAL_COLUMNS + " input_layer", taking_tf_dtypes),
    "feature_column.make_parse_example_spec": make_parse_example_spec,
    "compat.v1.feature_column.make_parse_example_spec": make_parse_example_spec,
    **_from("keras.layers", tf2.keras.layers, "DenseFeatures DenseFeature"),
    **_from("keras.experimental", tf2.keras.experimental, "SequenceFeatures"),
    **_from("compat.v1.keras.layers", tf2.keras.layers, "DenseFeatures DenseFeature"),
    **_from("compat.v1.keras.experimental", tf2.keras.experimental, "SequenceFeatures"),
    # TPU embedding columns, optimizer parameters, the mid-level API, the TPU system calls.
    **_from(
        "tpu.experimental",
        tf2.tpu.experimental,
        "embedding_column shared_embedding_columns shutdown_tpu_system",
    ),
    "tpu.experimental.initialize_tpu_system": _distribute.initialize_tpu_system,
    **_namespaced("tpu.experimental", _v1(V1_PARAMETERS)),
    **_from("tpu.experimental.embedding", tf2.tpu.experimental.embedding, EMBEDDING_CONFIGS),
    **_namespaced("tpu.experimental.embedding", _MIDLEVEL),
    **_from("compat.v1.tpu.experimental", tf1.tpu.experimental, "embedding_column shared_embedding_columns"),
    **_namespaced("compat.v1.tpu.experimental", _v1(V1_PARAMETERS)),
    "compat.v1.tpu.experimental.initialize_tpu_system": _distribute.initialize_tpu_system,
    **_from("compat.v1.tpu.experimental", tf2.tpu.experimental, "shutdown_tpu_system"),
    **_from("compat.v1.tpu.experimental.embedding", tf2.tpu.experimental.embedding, EMBEDDING_CONFIGS),
    **_namespaced("compat.v1.tpu.experimental.embedding", _MIDLEVEL),
    "compat.v1.tpu.CrossShardOptimizer": CrossShardOptimizer,
    # TPUEstimator and the tf.estimator names a TPUEstimator program uses (TensorFlow's exporters stay TensorFlow's).
    **_from("estimator", tf2.estimator, ESTIMATOR),
    **_from("estimator.tpu", tf2.estimator.tpu, ESTIMATOR_TPU),
    **_namespaced("estimator.tpu.experimental", _v1("EmbeddingConfigSpec " + ALL_PARAMETERS)),
    **_from("compat.v1.estimator", tf1.estimator, ESTIMATOR),
    **_from("compat.v1.estimator.tpu", tf1.estimator.tpu, ESTIMATOR_TPU),
    **_namespaced("compat.v1.estimator.tpu.experimental", _v1("EmbeddingConfigSpec " + ALL_PARAMETERS)),
    **(
        {}
        if _versions.has_estimator()
        else {
            **_namespaced("estimator.export", EXPORT_NAMES),
            **_namespaced("compat.v1.estimator.export", EXPORT_NAMES),
        }
    ),
    # The TPUStrategy stand-in.
    "distribute.TPUStrategy": _distribute.TPUStrategy,
    "distribute.InputOptions": _distribute.InputOptions,
    "distribute.experimental.TPUStrategy": _distribute.TPUStrategy,
    "distribute.cluster_resolver.TPUClusterResolver": _distribute.TPUClusterResolver,
    "compat.v1.distribute.experimental.TPUStrategy": _distribute.TPUStrategy,
    "compat.v1.distribute.cluster_resolver.TPUClusterResolver": _distribute.TPUClusterResolver,
    "config.experimental_connect_to_cluster": _distribute.experimental_connect_to_cluster,
    "compat.v1.config.experimental_connect_to_cluster": _distribute.experimental_connect_to_cluster,
}
