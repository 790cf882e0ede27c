"""What `import tpu_embedding_shim.tensorflow as tf` gives on each TensorFlow CI covers.

- With tensorflow-estimator (TensorFlow 2.15.1 + tensorflow-estimator 2.15):
  `tf.estimator.export` is TensorFlow's.
- Without it (TensorFlow 2.15.1 alone, or TensorFlow >= 2.16, which has no
  `tf.estimator`): the names a TPUEstimator program uses are still there;
  `tf.estimator.export` is the project's receivers and TensorFlow core's
  export outputs. The receivers behave as tensorflow-estimator's: where it
  is installed, each case below runs on both and must agree.
- Keras: the feature layers are the project's whichever Keras `tf.keras`
  is; a TensorFlow model_fn with Keras layers needs Keras 2 (a Keras 3
  layer in its graph is refused, naming the fix); the mid-level loop runs
  on either (test_seed_004.py, run by CI with Keras 3 and with Keras 2).

Runs in each TensorFlow venv (docs/tensorflow_bridge.md, "Which TensorFlow").
"""

import numpy as np
import pytest
import tensorflow

import tpu_embedding_shim as shim
import tpu_embedding_shim.tensorflow as tf
from tpu_embedding_shim.tensorflow import _serving_input
from tpu_embedding_shim.tensorflow._overrides import OVERRIDES

from .programs import adagrad_estimator, linear_model_fn
from .tf_versions import HAS_ESTIMATOR, KERAS_3, VERSION

if HAS_ESTIMATOR:  # the oracle of the receivers
    from tensorflow_estimator.python.estimator.export import export as tf_export
else:
    tf_export = None

EXPORT_NAMES = sorted(
    [
        "ClassificationOutput",
        "EvalOutput",
        "ExportOutput",
        "PredictOutput",
        "RegressionOutput",
        "ServingInputReceiver",
        "TensorServingInputReceiver",
        "build_parsing_serving_input_receiver_fn",
        "build_raw_serving_input_receiver_fn",
    ]
)
PROGRAM_NAMES = [
    "ModeKeys",
    "EstimatorSpec",
    "RunConfig",
    "WarmStartSettings",
    "NanLossDuringTrainingError",
    "tpu.TPUEstimator",
    "tpu.TPUEstimatorSpec",
    "tpu.RunConfig",
    "tpu.TPUConfig",
    "tpu.InputPipelineConfig",
    "tpu.experimental.EmbeddingConfigSpec",
    "tpu.experimental.AdagradParameters",
]


def resolve(root, path):
    for part in path.split("."):
        root = getattr(root, part)
    return root


# tf.estimator with and without tensorflow-estimator ----------------------------------------------------------


def test_this_venv_is_one_ci_covers():
    assert VERSION == (2, 15) or (VERSION >= (2, 16) and not HAS_ESTIMATOR)
    assert tensorflow.__version__ == tf.__version__


@pytest.mark.parametrize("prefix", ["estimator", "compat.v1.estimator"])
def test_a_tpu_estimator_program_finds_its_estimator_names_either_way(prefix):
    for name in PROGRAM_NAMES:
        ours, projects = resolve(tf, f"{prefix}.{name}"), resolve(shim, f"{prefix}.{name}")
        if name.startswith("tpu.experimental."):  # the project's class, also taking TensorFlow's v1 configs
            assert issubclass(ours, projects), name
        else:
            assert ours is projects, name
    export = resolve(tf, f"{prefix}.export")
    assert sorted(n for n in dir(export) if not n.startswith("_")) == EXPORT_NAMES
    from tensorflow.python.saved_model.model_utils import export_output  # TensorFlow core's, in every version

    for name in ("ClassificationOutput", "EvalOutput", "ExportOutput", "PredictOutput", "RegressionOutput"):
        assert getattr(export, name) is getattr(export_output, name)
    if HAS_ESTIMATOR:  # TensorFlow's own, not in the table
        assert export.ServingInputReceiver is tf_export.ServingInputReceiver
        assert export.build_raw_serving_input_receiver_fn is tf_export.build_raw_serving_input_receiver_fn
        assert not any(path.startswith(f"{prefix}.export") for path in OVERRIDES)
        assert resolve(tf, prefix).LatestExporter is resolve(tensorflow, prefix).LatestExporter
    else:
        for name in (
            "ServingInputReceiver",
            "TensorServingInputReceiver",
            "build_parsing_serving_input_receiver_fn",
            "build_raw_serving_input_receiver_fn",
        ):
            assert getattr(export, name) is getattr(_serving_input, name)


@pytest.mark.parametrize("prefix", ["estimator", "compat.v1.estimator"])
def test_other_estimator_names_are_tensorflows_or_attribute_errors_saying_why(prefix):
    namespace = resolve(tf, prefix)
    if HAS_ESTIMATOR:
        assert namespace.Estimator is resolve(tensorflow, prefix).Estimator
        return
    why = (
        "TensorFlow 2.16 removed it"
        if VERSION >= (2, 16)
        else "has no tf.estimator without tensorflow-estimator, which is not installed"
    )
    with pytest.raises(
        AttributeError,
        match=rf"module 'tensorflow.{prefix}' has no attribute 'Estimator': "
        rf"TensorFlow .*{why}",
    ):
        namespace.Estimator


# The receivers: each case as tensorflow-estimator 2.15 has it ------------------------------------------------


class LabeledTensor:
    """TensorFlow's carve-out: a value with a `.tensor` that converts to a Tensor."""

    def __init__(self, tensor):
        self.tensor = tensor


tensorflow.register_tensor_conversion_function(LabeledTensor, lambda value, *args, **kwargs: value.tensor)

T, S, R = "tensor", "sparse", "ragged"
NOT_A_TENSOR = " must be a Tensor, SparseTensor, or RaggedTensor."
ERRORS = [  # (receiver class, features, receiver_tensors, alternatives) -> TensorFlow's message, the type we add
    ("ServingInputReceiver", None, {"a": T}, None, "features must be defined.", None),
    ("ServingInputReceiver", {42.2: T}, {"a": T}, None, "feature keys must be strings or ints: 42.2.", None),
    ("ServingInputReceiver", {"feature1": [1]}, {"a": T}, None, "feature feature1" + NOT_A_TENSOR, "list"),
    ("ServingInputReceiver", {0: [1]}, {"a": T}, None, "feature" + NOT_A_TENSOR, "list"),  # a falsy key is not named
    ("ServingInputReceiver", "not a tensor", T, None, "feature feature" + NOT_A_TENSOR, "str"),
    ("ServingInputReceiver", {"a": T}, None, None, "receiver_tensors must be defined.", None),
    ("ServingInputReceiver", {"a": T}, {1: T}, None, "receiver_tensor keys must be strings: 1.", None),
    ("ServingInputReceiver", {"a": T}, {"example1": [1]}, None, "receiver_tensor example1" + NOT_A_TENSOR, "list"),
    ("ServingInputReceiver", T, T, "alt", "receiver_tensors_alternatives must be a dict: alt.", None),
    ("ServingInputReceiver", T, T, {"alt": [1]}, "receiver_tensors_alternative input" + NOT_A_TENSOR, "list"),
    ("TensorServingInputReceiver", None, T, None, "features must be defined.", None),
    ("TensorServingInputReceiver", {"1": T}, T, None, "feature" + NOT_A_TENSOR, "dict"),
    ("TensorServingInputReceiver", T, {1: T}, None, "receiver_tensor keys must be strings: 1.", None),
]


def make(value):
    """The case's placeholders as tensors of the current graph (`T`, `S`, `R`), in dicts and labeled as written."""
    if isinstance(value, dict):
        return {key: make(item) for key, item in value.items()}
    if value == T:
        return tensorflow.constant([1], name="t")
    if value == S:
        return tensorflow.sparse.SparseTensor(indices=[[0, 0]], values=[1], dense_shape=[1, 1])
    if value == R:
        return tensorflow.ragged.constant([[1, 2], [3]])
    return value


def implementations():
    return [_serving_input] + ([tf_export] if HAS_ESTIMATOR else [])


@pytest.mark.parametrize("cls, features, receivers, alternatives, message, received", ERRORS)
def test_bad_receivers_are_tensorflows_value_errors(cls, features, receivers, alternatives, message, received):
    for module in implementations():
        with tensorflow.Graph().as_default(), pytest.raises(ValueError) as error:
            getattr(module, cls)(make(features), make(receivers), make(alternatives))
        ours = module is _serving_input and received is not None
        assert str(error.value) == (f"{message} Received: {received}." if ours else message), module.__name__


def keys_and_types(receiver):
    def describe(value):
        if isinstance(value, dict):
            return {key: type(item).__name__ for key, item in value.items()}
        return type(value).__name__

    return (
        type(receiver).__name__,
        describe(receiver.features),
        describe(receiver.receiver_tensors),
        None
        if receiver.receiver_tensors_alternatives is None
        else {k: describe(v) for k, v in receiver.receiver_tensors_alternatives.items()},
    )


GOOD = [  # (receiver class, features, receiver_tensors, alternatives) -> fields' keys and types
    (
        "ServingInputReceiver",
        {"f0": T, "f1": S, "f2": R, 42: T},
        {"example0": T},
        None,
        (
            "ServingInputReceiver",
            {"f0": "EagerTensor", "f1": "SparseTensor", "f2": "RaggedTensor", 42: "EagerTensor"},
            {"example0": "EagerTensor"},
            None,
        ),
    ),
    (
        "ServingInputReceiver",
        T,
        T,
        {"raw": {"a": T, "b": S}, "one": T},
        (
            "ServingInputReceiver",
            {"feature": "EagerTensor"},
            {"input": "EagerTensor"},
            {"raw": {"a": "EagerTensor", "b": "SparseTensor"}, "one": {"input": "EagerTensor"}},
        ),
    ),
    (
        "ServingInputReceiver",
        {"labeled": LabeledTensor(tensorflow.constant([1]))},
        T,
        None,
        ("ServingInputReceiver", {"labeled": "LabeledTensor"}, {"input": "EagerTensor"}, None),
    ),
    (
        "TensorServingInputReceiver",
        S,
        {"a": T},
        None,
        ("TensorServingInputReceiver", "SparseTensor", {"a": "EagerTensor"}, None),
    ),
    (
        "TensorServingInputReceiver",
        T,
        T,
        None,
        ("TensorServingInputReceiver", "EagerTensor", {"input": "EagerTensor"}, None),
    ),
]


@pytest.mark.parametrize("cls, features, receivers, alternatives, expected", GOOD)
def test_receivers_wrap_lone_tensors_under_tensorflows_keys(cls, features, receivers, alternatives, expected):
    for module in implementations():
        given = make(alternatives)
        receiver = getattr(module, cls)(make(features), make(receivers), given)
        assert keys_and_types(receiver) == expected, module.__name__
        assert isinstance(receiver, tuple) and receiver._fields == (
            "features",
            "receiver_tensors",
            "receiver_tensors_alternatives",
        )
    if alternatives is not None:  # ours leaves the caller's dict as it was (TensorFlow's rewrites it in place)
        given = make(alternatives)
        before = dict(given)
        getattr(_serving_input, cls)(make(features), make(receivers), given)
        assert given == before


def graph_signature(receiver):
    """The receiver tensors' (name, dtype, shape) and the features' types: what a SavedModel signature reads."""
    return (
        {key: (t.name, t.dtype.name, str(t.shape)) for key, t in receiver.receiver_tensors.items()},
        {key: type(value).__name__ for key, value in receiver.features.items()},
    )


@pytest.mark.parametrize("batch", [None, 3])
def test_the_parsing_builder_parses_serialized_examples(batch):
    spec = {
        "ids": tensorflow.io.VarLenFeature(tensorflow.int64),
        "price": tensorflow.io.FixedLenFeature([1], tensorflow.float32, default_value=[0.0]),
    }
    example = tensorflow.train.Example(
        features=tensorflow.train.Features(
            feature={
                "ids": tensorflow.train.Feature(int64_list=tensorflow.train.Int64List(value=[21, 2, 5])),
                "price": tensorflow.train.Feature(float_list=tensorflow.train.FloatList(value=[525.25])),
            }
        )
    )
    signatures = []
    for module in implementations():
        with tensorflow.Graph().as_default():
            receiver = module.build_parsing_serving_input_receiver_fn(spec, default_batch_size=batch)()
            signatures.append(graph_signature(receiver))
            with tensorflow.compat.v1.Session() as session:
                out = session.run(
                    receiver.features,
                    {receiver.receiver_tensors["examples"]: [example.SerializeToString()] * (batch or 1)},
                )
        assert out["ids"].indices[:3].tolist() == [[0, 0], [0, 1], [0, 2]] and out["ids"].values[:3].tolist() == [
            21,
            2,
            5,
        ]
        np.testing.assert_array_equal(out["price"], [[525.25]] * (batch or 1))
    assert signatures[0] == (
        {"examples": ("input_example_tensor:0", "string", f"({batch},)")},
        {"ids": "SparseTensor", "price": "SymbolicTensor"},
    )
    assert all(s == signatures[0] for s in signatures)


@pytest.mark.parametrize("batch", [None, 4])
def test_the_raw_builder_makes_one_placeholder_per_feature_named_and_shaped_as_it(batch):
    signatures = []
    for module in implementations():
        with tensorflow.Graph().as_default():
            features = {
                "x": tensorflow.constant([[1.0, 2.0]], name="x"),
                "words": tensorflow.constant([["a"]]),
                "unknown": tensorflow.compat.v1.placeholder(tensorflow.int32),
            }
            receiver = module.build_raw_serving_input_receiver_fn(features, default_batch_size=batch)()
            assert receiver.features == receiver.receiver_tensors
            signatures.append(graph_signature(receiver)[0])
    batch_dim = "None" if batch is None else str(batch)
    assert signatures[0] == {
        "x": ("x_1:0", "float32", f"({batch_dim}, 2)"),
        "words": ("Const_1:0", "string", f"({batch_dim}, 1)"),
        "unknown": ("Placeholder_1:0", "int32", "<unknown>"),
    }
    assert all(s == signatures[0] for s in signatures)


@pytest.mark.parametrize(
    "features, message",
    [
        ([1], "features must be a dict of string to Tensor. Received: list."),
        ({"a": 3}, "feature a must be a Tensor, SparseTensor, or RaggedTensor. Received: int."),
        ({1: "t"}, "receiver_tensor keys must be strings: 1."),
    ],
)
def test_the_raw_builder_refuses_what_is_not_a_dict_of_tensors(features, message):
    with tensorflow.Graph().as_default():
        features = (
            {k: tensorflow.constant([1]) if v == "t" else v for k, v in features.items()}
            if isinstance(features, dict)
            else features
        )
        receiver_fn = _serving_input.build_raw_serving_input_receiver_fn(features)  # checked when called, as TF's
        with pytest.raises(ValueError) as error:
            receiver_fn()
    assert str(error.value) == message


# Keras ----------------------------------------------------------------------------------------------------------


def test_the_feature_layers_are_the_projects_whichever_keras_tf_keras_is():
    assert tf.keras.layers.DenseFeatures is shim.keras.layers.DenseFeatures
    assert tf.keras.experimental.SequenceFeatures is shim.keras.experimental.SequenceFeatures
    assert tf.keras.layers.Dense is tensorflow.keras.layers.Dense
    expected = "keras.src." if (KERAS_3 or VERSION < (2, 16)) else "tf_keras.src."
    assert tensorflow.keras.layers.Dense.__module__.startswith(expected)
    if KERAS_3:  # Keras 3 has no tf.keras.experimental: the proxy's holds the project's name only
        with pytest.raises(
            AttributeError, match="tf.keras is Keras 3, which has no tf.keras.experimental .*TF_USE_LEGACY_KERAS=1"
        ):
            tf.keras.experimental.LinearModel
    else:
        assert tf.keras.experimental.LinearModel is tensorflow.keras.experimental.LinearModel


def test_a_tensorflow_model_fn_with_keras_layers_trains_with_keras_2_and_is_refused_with_keras_3(tmp_path):
    column = tf.tpu.experimental.embedding_column(tf.feature_column.categorical_column_with_identity("user", 10), 4)

    estimator = adagrad_estimator(linear_model_fn(column), [column], tmp_path, 4)

    def input_fn(params):
        return tf.data.Dataset.from_tensor_slices(({"user": [[1], [2], [3], [4]]}, [1.0, 0.0, 1.0, 0.0])).batch(4)

    if KERAS_3:
        with pytest.raises(
            ValueError,
            match=r"Keras 3\.\d+\.\d+ layer \(variable 'kernel'\).*pip install tf_keras "
            r"and set TF_USE_LEGACY_KERAS=1",
        ):
            estimator.train(input_fn, steps=1)
        assert estimator.latest_checkpoint() is None  # nothing trained, nothing saved
    else:
        estimator.train(input_fn, steps=1)
        assert estimator.get_variable_value("global_step") == 1
        assert estimator.get_variable_value("dense/kernel").shape == (4, 1)  # Keras 2 names the layer per graph
