"""`TPUEstimator.export_saved_model` of a TensorFlow model_fn: a real SavedModel whose outputs equal `predict`.

The program reads every kind of TPU column the engine looks up: an identity
column (mean), a weighted vocabulary column with OOV buckets (sqrtn), a
vocabulary file column with a default value (sum), a shared table read as a
pooled and a sequence feature, and a numeric column beside them. After a few
training steps, the export is loaded by TensorFlow (`tf.saved_model.load`,
the TF1 loader, `saved_model_cli`) and fed the predict batch, as sparse
tensors and as serialized tf.Examples.

Runs where TensorFlow is installed (a separate venv):

    python -m pytest tests/tf_bridge/test_saved_model_export.py -q
"""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as real_tf

import tpu_embedding_shim.tensorflow as tf  # the program's one changed import

V, D, L, B = 30, 4, 3, 8
WORDS = ["a", "b", "c", "d", "e", "f"]


def make_columns(tmp_path):
    vocabulary_file = tmp_path / "colors.txt"
    vocabulary_file.write_text("red\ngreen\nblue\n")
    user = tf.feature_column.categorical_column_with_identity("user", V)
    word = tf.feature_column.weighted_categorical_column(
        tf.feature_column.categorical_column_with_vocabulary_list("word", WORDS, num_oov_buckets=2), "word_weight"
    )
    color = tf.feature_column.categorical_column_with_vocabulary_file("color", str(vocabulary_file), default_value=0)
    item = tf.feature_column.categorical_column_with_identity("item", V)
    history = tf.feature_column.sequence_categorical_column_with_identity("history", V)
    tpu = tf.compat.v1.tpu.experimental
    columns = [
        tpu.embedding_column(user, D, combiner="mean"),
        tpu.embedding_column(word, D, combiner="sqrtn"),
        tpu.embedding_column(color, D, combiner="sum"),
    ]
    item_col, history_col = tpu.shared_embedding_columns([item, history], D, max_sequence_lengths=[0, L])
    return columns + [item_col], history_col, tf.feature_column.numeric_column("age")


def make_estimator(tmp_path):
    pooled, sequence, age = make_columns(tmp_path)

    def model_fn(features, labels, mode, params):
        net = tf.keras.layers.DenseFeatures(pooled + [age])(features)
        seq, lengths = tf.keras.experimental.SequenceFeatures([sequence])(features)
        mask = tf.sequence_mask(lengths, L, dtype=tf.float32)[:, :, None]
        summary = tf.reduce_sum(seq * mask, 1)
        inputs = tf.concat([net, summary], 1)
        kernel = tf.compat.v1.get_variable("dense/kernel", [inputs.shape[1], 1], initializer=tf.zeros_initializer())
        bias = tf.compat.v1.get_variable("dense/bias", [1], initializer=tf.zeros_initializer())
        logits = tf.squeeze(tf.matmul(inputs, kernel) + bias, -1)  # tf.compat.v1 variables: any Keras
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
                mode, predictions={"probability": tf.sigmoid(logits), "lengths": lengths, "features": net}
            )
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
        train_op = tf.compat.v1.train.AdagradOptimizer(0.5).minimize(loss, tf.compat.v1.train.get_global_step())
        return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)

    spec = tf.compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=pooled + [sequence],
        optimization_parameters=tf.compat.v1.tpu.experimental.AdagradParameters(0.5),
    )
    config = tf.compat.v1.estimator.tpu.RunConfig(model_dir=str(tmp_path / "model"))
    return tf.compat.v1.estimator.tpu.TPUEstimator(
        model_fn=model_fn, config=config, train_batch_size=B, predict_batch_size=B, embedding_config_spec=spec
    )


def sparse(rows):
    """A tf.compat.v1.SparseTensorValue of ragged rows (ints or strings)."""
    indices = [[b, p] for b, row in enumerate(rows) for p in range(len(row))]
    values = [v for row in rows for v in row]
    width = max([len(r) for r in rows] + [1])
    dtype = object if values and isinstance(values[0], str) else np.int64
    return real_tf.compat.v1.SparseTensorValue(
        np.array(indices, np.int64).reshape(-1, 2), np.array(values, dtype), np.array([len(rows), width], np.int64)
    )


def batch(seed):
    """B examples: empty rows, unknown words (OOV buckets), weights <= 0 (pruned under sqrtn), an unknown color
    (the default value), histories longer than L (truncated) and empty."""
    rng = np.random.default_rng(seed)
    user = [list(rng.integers(0, V, rng.integers(0, 3))) for _ in range(B)]
    word = [list(rng.choice(WORDS + ["zz", "yy"], rng.integers(0, 4))) for _ in range(B)]
    word_weight = [list(rng.choice([-1.0, 0.0, 0.5, 2.0], len(row))) for row in word]
    color = [list(rng.choice(["red", "green", "blue", "pink"], rng.integers(1, 3))) for _ in range(B)]
    item = [[int(rng.integers(0, V))] for _ in range(B)]
    history = [list(rng.integers(0, V, rng.integers(0, L + 2))) for _ in range(B)]
    age = rng.normal(size=(B, 1)).astype(np.float32)
    return {
        "user": sparse(user),
        "word": sparse(word),
        "word_weight": sparse(word_weight),
        "color": sparse(color),
        "item": sparse(item),
        "history": sparse(history),
        "age": age,
    }


def to_tf(features):
    return {
        k: real_tf.SparseTensor(*v) if isinstance(v, real_tf.compat.v1.SparseTensorValue) else real_tf.constant(v)
        for k, v in features.items()
    }


def input_fn_of(seeds, labels=True):
    def input_fn(params):
        for seed in seeds:
            features = to_tf(batch(seed))
            yield (features, real_tf.constant((np.arange(B) % 2).astype(np.float32))) if labels else features

    return input_fn


STRING_FEATURES = ("word", "color")


def raw_receiver_fn():
    placeholders = {
        name: real_tf.compat.v1.sparse_placeholder(
            real_tf.string
            if name in STRING_FEATURES
            else (real_tf.float32 if name == "word_weight" else real_tf.int64),
            name=name,
        )
        for name in ("user", "word", "word_weight", "color", "item", "history")
    }
    placeholders["age"] = real_tf.compat.v1.placeholder(real_tf.float32, [None, 1], name="age")
    return tf.estimator.export.ServingInputReceiver(dict(placeholders), dict(placeholders))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("export")
    estimator = make_estimator(tmp_path)
    estimator.train(input_fn_of(range(1, 6)), steps=5)
    predictions = next(estimator.predict(input_fn_of([100], labels=False), yield_single_examples=False))
    export_dir = estimator.export_saved_model(str(tmp_path / "exports"), raw_receiver_fn).decode()
    return estimator, predictions, export_dir, tmp_path


def test_the_export_is_a_saved_model_written_whole(trained):
    _, _, export_dir, tmp_path = trained
    assert sorted(os.listdir(export_dir)) == ["assets", "saved_model.pb", "variables"] or sorted(
        os.listdir(export_dir)
    ) == ["saved_model.pb", "variables"]
    assert os.path.basename(os.path.dirname(export_dir)) == "exports"
    assert not [n for n in os.listdir(tmp_path / "exports") if n.startswith("temp-")]


def serve_with_tf1_loader(export_dir, features):
    """The serving signature's outputs for `features` (sparse inputs fed as their three tensors), read with the
    TF1 loader (TensorFlow 2's `tf.saved_model.load` cannot call a TF1 signature with sparse inputs: TF's own
    limitation); also the graph's variable names and global step."""
    graph = real_tf.Graph()
    with real_tf.compat.v1.Session(graph=graph) as session:
        meta = real_tf.compat.v1.saved_model.loader.load(session, ["serve"], export_dir)
        signature = meta.signature_def["serving_default"]
        feed = {}
        for name, value in features.items():
            info = signature.inputs[name]
            if info.WhichOneof("encoding") == "coo_sparse":
                coo = info.coo_sparse
                feed.update(
                    {
                        coo.indices_tensor_name: value.indices,
                        coo.values_tensor_name: value.values,
                        coo.dense_shape_tensor_name: value.dense_shape,
                    }
                )
            else:
                feed[info.name] = value
        out = session.run({k: v.name for k, v in signature.outputs.items()}, feed)
        variables = {v.op.name: v for v in real_tf.compat.v1.global_variables()}
        step = session.run(variables["global_step"])
        names = set(variables)
    return out, names, step


def test_the_tf1_loader_serves_the_predictions_and_the_tables_have_their_checkpoint_names(trained):
    estimator, predictions, export_dir, _ = trained
    out, names, step = serve_with_tf1_loader(export_dir, batch(100))
    assert sorted(out) == ["features", "lengths", "probability"]
    for key in out:
        np.testing.assert_array_equal(out[key], predictions[key], err_msg=key)
    checkpoint = {name for name, _ in real_tf.train.list_variables(estimator.model_dir)}
    assert "dense_features/user_embedding/embedding_weights" in names
    assert names <= checkpoint, "the export's variables have the model_dir checkpoint's names"
    assert len(names) == 3 + 4  # dense kernel and bias, global_step; 4 tables (item and history share one)
    assert step == estimator.global_step == 5


def test_a_parsing_receiver_serves_tf_examples(trained):
    estimator, predictions, _, tmp_path = trained
    pooled, sequence, age = make_columns(tmp_path)
    feature_spec = tf.feature_column.make_parse_example_spec(pooled + [sequence, age])
    receiver_fn = tf.estimator.export.build_parsing_serving_input_receiver_fn(feature_spec)
    export_dir = estimator.export_saved_model(str(tmp_path / "parsing"), receiver_fn).decode()
    examples = []
    features = batch(100)
    for b in range(B):
        feature = {}
        for name, value in features.items():
            if name == "age":
                feature[name] = real_tf.train.Feature(float_list=real_tf.train.FloatList(value=value[b]))
                continue
            row = [v for (r, _), v in zip(value.indices, value.values) if r == b]
            if name in STRING_FEATURES:
                feature[name] = real_tf.train.Feature(
                    bytes_list=real_tf.train.BytesList(value=[v.encode() for v in row])
                )
            elif name == "word_weight":
                feature[name] = real_tf.train.Feature(float_list=real_tf.train.FloatList(value=row))
            else:
                feature[name] = real_tf.train.Feature(int64_list=real_tf.train.Int64List(value=row))
        examples.append(real_tf.train.Example(features=real_tf.train.Features(feature=feature)).SerializeToString())
    served = real_tf.saved_model.load(export_dir).signatures["serving_default"](examples=real_tf.constant(examples))
    for key in predictions:
        np.testing.assert_array_equal(served[key].numpy(), predictions[key], err_msg=key)


def test_saved_model_cli_shows_the_signature(trained):
    _, _, export_dir, _ = trained
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    if not os.path.exists(cli):
        pytest.skip("saved_model_cli is not installed beside this Python (TensorFlow installs it)")
    out = subprocess.run(
        [cli, "show", "--dir", export_dir, "--tag_set", "serve", "--signature_def", "serving_default"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "outputs['probability']" in out and "inputs['user']" in out


def test_serving_checks_the_ids_at_run_time(trained):
    _, _, export_dir, _ = trained
    features = batch(100)
    features["user"] = sparse([[V]] + [[1]] * (B - 1))
    with pytest.raises(real_tf.errors.InvalidArgumentError, match="num_buckets=30"):
        serve_with_tf1_loader(export_dir, features)


def test_export_errors_change_nothing(trained):
    estimator, _, _, tmp_path = trained
    base = tmp_path / "failed"
    with pytest.raises(ValueError, match="input_receiver_fn must be defined"):
        estimator.export_saved_model(str(base))
    with pytest.raises(ValueError, match="experimental_mode='train'"):
        estimator.export_saved_model(str(base), raw_receiver_fn, experimental_mode=tf.estimator.ModeKeys.TRAIN)

    def broken_receiver_fn():
        receiver = raw_receiver_fn()
        del receiver.features["user"]
        return receiver

    with pytest.raises(ValueError, match="feature 'user' is missing from the serving input"):
        estimator.export_saved_model(str(base), broken_receiver_fn)
    assert not base.exists() or os.listdir(base) == []


def test_assets_extra_and_text_format(trained):
    estimator, _, _, tmp_path = trained
    note = tmp_path / "note.txt"
    note.write_text("served by TF")
    export_dir = estimator.export_saved_model(
        str(tmp_path / "text"), raw_receiver_fn, as_text=True, assets_extra={"notes/note.txt": str(note)}
    ).decode()
    assert os.path.exists(os.path.join(export_dir, "saved_model.pbtxt"))
    with open(os.path.join(export_dir, "assets.extra", "notes", "note.txt")) as handle:
        assert handle.read() == "served by TF"


def dense_batch(seed):
    """The same kinds of features as dense arrays: ids padded with -1 (ints) or '' (strings); item of shape [B]."""
    rng = np.random.default_rng(seed)
    user = rng.integers(-1, V, (B, 2))
    word = rng.choice(WORDS + ["zz", ""], (B, 3))
    word_weight = rng.choice([-1.0, 0.0, 0.5, 2.0], (B, 3)).astype(np.float32)
    color = rng.choice(["red", "blue", "pink", ""], (B, 2))
    item = rng.integers(0, V, B)
    history = rng.integers(-1, V, (B, L + 1))
    return {
        "user": user,
        "word": word.astype(object),
        "word_weight": word_weight,
        "color": color.astype(object),
        "item": item,
        "history": history,
        "age": rng.normal(size=(B, 1)).astype(np.float32),
    }


def test_dense_inputs_are_served_as_predict_reads_them(trained):
    estimator, _, _, tmp_path = trained
    features = dense_batch(200)

    def input_fn(params):
        yield {k: real_tf.constant(v) for k, v in features.items()}

    predictions = next(estimator.predict(input_fn, yield_single_examples=False))

    def receiver_fn():
        placeholders = {
            name: real_tf.compat.v1.placeholder(
                real_tf.as_dtype(value.dtype) if value.dtype != object else real_tf.string,
                [None] * value.ndim,
                name=name,
            )
            for name, value in features.items()
        }
        return tf.estimator.export.ServingInputReceiver(placeholders, placeholders)

    export_dir = estimator.export_saved_model(str(tmp_path / "dense"), receiver_fn).decode()
    served = real_tf.saved_model.load(export_dir).signatures["serving_default"](
        **{k: real_tf.constant(v) for k, v in features.items()}
    )
    for key in predictions:
        np.testing.assert_array_equal(served[key].numpy(), predictions[key], err_msg=key)


def test_ragged_features_are_served_as_predict_reads_them(trained):
    estimator, _, _, tmp_path = trained
    features = batch(300)
    ragged = {
        "user": ([5, 7, 29, 0, 3], [0, 2, 2, 3, 3, 3, 4, 5, 5]),
        "history": ([1, 2, 3, 4, 5, 6, 7], [0, 4, 4, 5, 5, 6, 6, 7, 7]),
    }

    def input_fn(params):
        eager = to_tf(features)
        eager.update(
            {
                k: real_tf.RaggedTensor.from_row_splits(np.array(v, np.int64), np.array(s, np.int64))
                for k, (v, s) in ragged.items()
            }
        )
        yield eager

    predictions = next(estimator.predict(input_fn, yield_single_examples=False))

    def receiver_fn():
        receiver = raw_receiver_fn()
        for name in ragged:
            values = real_tf.compat.v1.placeholder(real_tf.int64, [None], name=f"{name}_values")
            splits = real_tf.compat.v1.placeholder(real_tf.int64, [None], name=f"{name}_row_splits")
            receiver.features[name] = real_tf.RaggedTensor.from_row_splits(values, splits)
            receiver.receiver_tensors.pop(name)
            receiver.receiver_tensors.update({f"{name}_values": values, f"{name}_row_splits": splits})
        return receiver

    export_dir = estimator.export_saved_model(str(tmp_path / "ragged"), receiver_fn).decode()
    served = {k: v for k, v in features.items() if k not in ragged}
    for name, (values, splits) in ragged.items():
        served[f"{name}_values"], served[f"{name}_row_splits"] = np.array(values), np.array(splits)
    out, _, _ = serve_with_tf1_loader(export_dir, served)
    for key in predictions:
        np.testing.assert_array_equal(out[key], predictions[key], err_msg=key)


def test_export_outputs_follow_tensorflows_rule(trained, tmp_path):
    """The spec's export_outputs become the signatures; several without a default are TensorFlow's ValueError."""
    estimator, _, _, _ = trained
    original = estimator._model_fn
    PredictOutput = tf.estimator.export.PredictOutput

    def with_outputs(outputs):
        def model_fn(features, labels, mode, params):
            spec = original(features, labels, mode, params)
            if mode != tf.estimator.ModeKeys.PREDICT:
                return spec
            p = spec.predictions
            return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(
                mode, predictions=p, export_outputs={k: PredictOutput({k: p[k]}) for k in outputs}
            )

        return model_fn

    estimator._model_fn = with_outputs(["probability"])
    try:
        export_dir = estimator.export_saved_model(str(tmp_path / "one"), raw_receiver_fn).decode()
        signatures = real_tf.saved_model.load(export_dir).signatures
        assert sorted(signatures) == ["probability", "serving_default"]
        estimator._model_fn = with_outputs(["probability", "lengths"])
        with pytest.raises(ValueError, match="none of them are specified as the default"):
            estimator.export_saved_model(str(tmp_path / "two"), raw_receiver_fn)
        assert not (tmp_path / "two").exists() or os.listdir(tmp_path / "two") == []
    finally:
        estimator._model_fn = original


def test_an_untrained_model_is_not_exported(tmp_path):
    estimator = make_estimator(tmp_path)
    with pytest.raises(ValueError, match="Could not find trained model in model_dir"):
        estimator.export_saved_model(str(tmp_path / "exports"), raw_receiver_fn)
    assert not (tmp_path / "exports").exists() or os.listdir(tmp_path / "exports") == []
