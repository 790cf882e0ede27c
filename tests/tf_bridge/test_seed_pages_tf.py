"""Seed pages 000-003 (../shared/seeds) run with TensorFlow: only the import changed.

The programs of tests/docs/test_seed_pages.py, with `import
tpu_embedding_shim.tensorflow as tf` (was `import tensorflow as tf`):
TensorFlow keeps the dense part (Keras layers, the loss, a
`tf.compat.v1.train` optimizer's `train_op`, `tf.GradientTape`), the input
is a `tf.data.Dataset`, and this project takes the TPU-embedding names.

- 000 `EmbeddingConfigSpec` (TF 2.4), 001 `embedding_column` (TF 2.4), 002
  `EmbeddingConfigSpec` (later rendering): as printed, `def model_fn(features)`
  fails when `train` first calls it, with TensorFlow's ValueError; the fixed
  program trains. TensorFlow 2.15's own TPUEstimator (use_tpu=False) is the
  oracle: the same refusal, and one step gives its dense update, while the
  tables take its gradient through the EmbeddingConfigSpec's optimizer. The
  layer's output has TensorFlow's width; only the width is compared: its
  batch axis is None here (the runner's placeholders take any batch size),
  16 in TensorFlow's graph.
- 003 `TPUEmbeddingV2`: made in the TPUStrategy stand-in's scope, a
  `tf.function` training loop over its lookups and `apply_gradients`, and the
  errors its page lists.

Runs where TensorFlow is installed (a separate venv):

    python -m pytest tests/tf_bridge/test_seed_pages_tf.py -q
"""

import re
import warnings

import numpy as np
import pytest
import tensorflow as real_tf

import tpu_embedding_shim.tensorflow as tf  # the one changed line: was `import tensorflow as tf`

from .tf_versions import needs_estimator, needs_keras_2

B, V = 16, 20  # train_batch_size, every categorical column's vocabulary
_rng = np.random.default_rng(0)
TABLE = (_rng.normal(size=(V, 10)) * 0.3).astype(np.float32)  # the oracle comparison's initial tables
KERNEL = (_rng.normal(size=(30, 1)) * 0.3).astype(np.float32)  # the dense layer's initial kernel
PAGE_KEYS = {"000": ("a", "b", "c"), "001": ("movie",), "002": ("a", "b", "c")}  # each page's features


# What fills the pages' `...` ---------------------------------------------------------------------


def examples(keys, n=8 * B, seed=1):
    """n examples of one id per key (from 1: a dense id 0 is padding on a TPU); the label sums a per-id target."""
    rng = np.random.default_rng(seed)
    target = rng.normal(size=(len(keys), V)).astype(np.float32)
    ids = rng.integers(1, V, (len(keys), n, 1))
    labels = sum(target[k, ids[k, :, 0]] for k in range(len(keys)))
    return {key: ids[k] for k, key in enumerate(keys)}, labels


def make_input_fn(features, labels=None, repeat=False):
    """The input_fn: a `tf.data.Dataset` of `params['batch_size']` batches (of features only without labels)."""

    def input_fn(params):
        dataset = real_tf.data.Dataset.from_tensor_slices(features if labels is None else (features, labels))
        return (dataset.repeat() if repeat else dataset).batch(params["batch_size"], drop_remainder=True)

    return input_fn


def dense_part(tf, embedded_feature, labels, mode, shapes):
    """The model_fn's `...` after the lookup, over module `tf`: a linear regression trained with plain SGD."""
    shapes.append(embedded_feature.shape.as_list())
    width = embedded_feature.shape[-1]
    layer = tf.keras.layers.Dense(1, kernel_initializer=tf.constant_initializer(KERNEL[:width]))
    prediction = tf.squeeze(layer(embedded_feature), -1)
    loss = tf.reduce_mean(tf.square(prediction - labels))
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.05).minimize(loss, tf.compat.v1.train.get_global_step())
    return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, train_op=train_op)


def run_config(model_dir):
    return tf.estimator.tpu.RunConfig(model_dir=str(model_dir), tf_random_seed=0)


def page_model_fn_as_printed(layer):
    """The pages' `def model_fn(features)`; `layer()` is the page's feature layer."""
    called = []

    def model_fn(features):
        dense_features = layer()
        embedded_feature = dense_features(features)
        called.append(embedded_feature)

    return model_fn, called


LABELS_MESSAGE = "model_fn does not take labels, but input_fn returns labels."
PARAMS_MESSAGE = (
    r"model_fn \(<function .*model_fn.*\) does not include params argument, required by TPUEstimator "
    r"to pass batch size as params\['batch_size'\]"
)
FIX = r".*def model_fn\(features, labels, mode, params\):"


def assert_refused_as_tensorflow_refuses(estimator, called, keys):
    """`train` with the page's model_fn: TensorFlow's two ValueErrors (labels, then params), nothing trained."""
    features, labels = examples(keys)
    with pytest.raises(ValueError, match="^" + re.escape(LABELS_MESSAGE) + FIX):
        estimator.train(make_input_fn(features, labels), steps=3)
    with pytest.raises(ValueError, match="^" + PARAMS_MESSAGE + FIX):
        estimator.train(make_input_fn(features), steps=3)
    assert called == [] and estimator.latest_checkpoint() is None


def train_and_check(estimator, keys, shapes, width, tables):
    """Trains; evaluation loss falls, every table moved; the page's layer gave [batch, width]."""
    features, labels = examples(keys)
    estimator.train(make_input_fn(features, labels, repeat=True), steps=1)
    first = {name: estimator.get_variable_value(name) for name in tables}
    before = estimator.evaluate(make_input_fn(features, labels))
    estimator.train(make_input_fn(features, labels, repeat=True), max_steps=150)
    after = estimator.evaluate(make_input_fn(features, labels))
    assert before["global_step"] == 1 and after["global_step"] == 150
    assert np.isfinite(after["loss"]) and after["loss"] < 0.25 * before["loss"]
    assert {tuple(shape[1:]) for shape in shapes} == {(width,)}  # TensorFlow's [16, width]: see the oracle test
    assert all(len(shape) == 2 for shape in shapes)
    for name in tables:
        moved = estimator.get_variable_value(name)
        assert moved.shape == first[name].shape and not np.allclose(moved, first[name]), name
    return estimator


# 000: EmbeddingConfigSpec (TF 2.4) ----------------------------------------------------------------


def misspelled_layer(columns):
    """The pages' feature layer, made when the model_fn calls it: `tf.keras.layers.DenseFeature(columns)` (sic)."""

    def layer():
        with pytest.warns(UserWarning, match="DenseFeature is not a TensorFlow name"):  # the pages' typo
            return tf.keras.layers.DenseFeature(columns)

    return layer


def misspelled_estimator(model_fn, model_dir, columns, optimization_parameters):
    """Pages 000 and 001's TPUEstimator: its EmbeddingConfigSpec(column=...) (sic) is read as feature_columns."""
    with pytest.warns(UserWarning, match="`column=` is not an argument"):  # the pages' typo
        return tf.estimator.tpu.TPUEstimator(
            model_fn=model_fn,
            config=run_config(model_dir),
            train_batch_size=B,
            eval_batch_size=B,
            embedding_config_spec=tf.estimator.tpu.experimental.EmbeddingConfigSpec(
                column=columns, optimization_parameters=optimization_parameters
            ),
        )


def page_000(model_fn_for, model_dir, tpu_columns):
    """Page 000 as printed (`...` filled): its columns `tpu_columns`, then TPUEstimator with its EmbeddingConfigSpec.

    `model_fn_for(layer)` gives the model_fn and what it records; returns the estimator and that record.
    """
    model_fn, record = model_fn_for(misspelled_layer(tpu_columns))
    parameters = tf.estimator.tpu.experimental.AdagradParameters(0.1)
    return misspelled_estimator(model_fn, model_dir, tpu_columns, parameters), record


def fixed_model_fn(layer):
    """The fixed model_fn (`def model_fn(features, labels, mode, params)`), and the shapes its layer gave."""
    shapes = []

    def model_fn(features, labels, mode, params):
        dense_features = layer()
        embedded_feature = dense_features(features)
        return dense_part(tf, embedded_feature, labels, mode, shapes)

    return model_fn, shapes


SHARED_TABLE, C_TABLE = "a_b_shared_embedding", "dense_features/c_embedding/embedding_weights"


@needs_keras_2
def test_page_000_fixed_trains_its_tables_with_the_specs_adagrad(tmp_path, page_tpu_columns):
    estimator, shapes = page_000(fixed_model_fn, tmp_path, page_tpu_columns(tf, V))
    train_and_check(estimator, ("a", "b", "c"), shapes, 30, [SHARED_TABLE, C_TABLE])
    assert sorted(estimator.get_variable_names()) == sorted(  # a and b share one table; Adagrad's slots
        [
            SHARED_TABLE,
            f"{SHARED_TABLE}/Adagrad",
            C_TABLE,
            f"{C_TABLE}/Adagrad",
            "dense/kernel",
            "dense/bias",
            "global_step",
        ]
    )
    for table in (SHARED_TABLE, C_TABLE):  # Adagrad's initial 0.1, then grown: the spec's optimizer ran
        accumulators = estimator.get_variable_value(f"{table}/Adagrad")
        assert accumulators.min() >= 0.1 and accumulators.max() > 0.1


# 001: embedding_column (TF 2.4) -------------------------------------------------------------------


def page_001(model_fn_for, model_dir):
    """Page 001 as printed (`...` filled): one column, passed to the layer alone (not in a list)."""
    column = tf.feature_column.categorical_column_with_identity("movie", V)
    tpu_column = tf.tpu.experimental.embedding_column(column, 10)
    model_fn, record = model_fn_for(misspelled_layer(tpu_column))
    parameters = tf.tpu.experimental.StochasticGradientDescentParameters(0.5)
    return misspelled_estimator(model_fn, model_dir, [tpu_column], parameters), record


MOVIE_TABLE = "dense_features/movie_embedding/embedding_weights"


@needs_keras_2
def test_page_001_fixed_trains_its_table_with_the_specs_sgd(tmp_path):
    estimator, shapes = page_001(fixed_model_fn, tmp_path)
    train_and_check(estimator, ("movie",), shapes, 10, [MOVIE_TABLE])
    assert sorted(estimator.get_variable_names()) == sorted(  # SGD has no slots
        [MOVIE_TABLE, "dense/kernel", "dense/bias", "global_step"]
    )


# 002: EmbeddingConfigSpec, the later rendering (its example stops at `TPUEstimator(`) ------------


def page_002(model_fn_for, model_dir, tpu_columns):
    """Page 002's columns (`tpu_columns`) and model_fn as printed, the TPUEstimator call filled in from its Args
    table with the compat.v1 names its migration note points at, and an optimizer it lists (Adam)."""
    model_fn, record = model_fn_for(misspelled_layer(tpu_columns))
    estimator = tf.compat.v1.estimator.tpu.TPUEstimator(
        model_fn=model_fn,
        config=tf.compat.v1.estimator.tpu.RunConfig(model_dir=str(model_dir), tf_random_seed=0),
        train_batch_size=B,
        eval_batch_size=B,
        embedding_config_spec=tf.compat.v1.estimator.tpu.experimental.EmbeddingConfigSpec(
            feature_columns=tpu_columns, optimization_parameters=tf.compat.v1.tpu.experimental.AdamParameters(0.05)
        ),
    )
    return estimator, record


@needs_keras_2
def test_page_002_fixed_trains_its_tables_with_the_specs_adam(tmp_path, page_tpu_columns):
    estimator, shapes = page_002(fixed_model_fn, tmp_path, page_tpu_columns(tf, V))
    train_and_check(estimator, ("a", "b", "c"), shapes, 30, [SHARED_TABLE, C_TABLE])
    for table in (SHARED_TABLE, C_TABLE):  # Adam's slots, under TensorFlow's names: the spec's optimizer ran
        assert np.abs(estimator.get_variable_value(f"{table}/Adam/m")).max() > 0
        assert estimator.get_variable_value(f"{table}/Adam/v").max() > 0


# The pages as printed ----------------------------------------------------------------------------


def page_program(page, model_fn_for, model_dir, page_tpu_columns):
    """Page `page`'s program (000, 001, 002 above) around `model_fn_for`'s model_fn: (estimator, its record)."""
    if page == "001":
        return page_001(model_fn_for, model_dir)
    return (page_000 if page == "000" else page_002)(model_fn_for, model_dir, page_tpu_columns(tf, V))


@pytest.mark.parametrize("page", sorted(PAGE_KEYS))
def test_each_page_as_printed_fails_as_tensorflows_when_train_calls_the_model_fn(tmp_path, page, page_tpu_columns):
    estimator, called = page_program(page, page_model_fn_as_printed, tmp_path, page_tpu_columns)
    assert_refused_as_tensorflow_refuses(estimator, called, PAGE_KEYS[page])


# TensorFlow 2.15's own TPUEstimator on the pages' programs (use_tpu=False) -------------------------


def tensorflows_spelling(tf, page, model_dir, model_fn=None, use_tpu=True):
    """Page `page`'s program as TensorFlow 2.15 runs it, over module `tf`.

    The pages are TF1 pages: TensorFlow 2.15 has their names under
    `tf.compat.v1` only, no `DenseFeature` and no `column=` (see the test
    below). So: compat.v1 names, `DenseFeatures`, `feature_columns=`; every
    table starts at TABLE.
    """
    v1 = tf.compat.v1
    init = v1.constant_initializer(TABLE)
    if page == "001":
        column = v1.feature_column.categorical_column_with_identity("movie", V)
        tpu_column = v1.tpu.experimental.embedding_column(column, 10, initializer=init)
        tpu_columns, layer_columns = [tpu_column], tpu_column
        parameters = v1.tpu.experimental.StochasticGradientDescentParameters(0.5)
    else:
        column_a, column_b, column_c = (v1.feature_column.categorical_column_with_identity(key, V) for key in "abc")
        tpu_shared_columns = v1.tpu.experimental.shared_embedding_columns([column_a, column_b], 10, initializer=init)
        tpu_non_shared_column = v1.tpu.experimental.embedding_column(column_c, 10, initializer=init)
        tpu_columns = layer_columns = [tpu_non_shared_column] + tpu_shared_columns
        parameters = (
            v1.tpu.experimental.AdagradParameters(0.1) if page == "000" else v1.tpu.experimental.AdamParameters(0.05)
        )
    shapes = []
    if model_fn is None:  # the fixed model_fn, over this `tf`

        def model_fn(features, labels, mode, params):
            return dense_part(tf, tf.keras.layers.DenseFeatures(layer_columns)(features), labels, mode, shapes)

    estimator = v1.estimator.tpu.TPUEstimator(
        model_fn=model_fn,
        config=v1.estimator.tpu.RunConfig(model_dir=str(model_dir)),
        train_batch_size=B,
        use_tpu=use_tpu,
        embedding_config_spec=v1.estimator.tpu.experimental.EmbeddingConfigSpec(
            feature_columns=tpu_columns, optimization_parameters=parameters
        ),
    )
    return estimator, shapes


@needs_estimator
def test_tensorflow_2_15_refuses_the_pages_spellings_which_the_bridge_takes():
    for path in (
        "tpu.experimental.embedding_column",
        "tpu.experimental.shared_embedding_columns",
        "estimator.tpu",
        "keras.layers.DenseFeature",
    ):
        module = real_tf
        with pytest.raises(AttributeError):
            for part in path.split("."):
                module = getattr(module, part)
    v1 = real_tf.compat.v1
    column = v1.tpu.experimental.embedding_column(v1.feature_column.categorical_column_with_identity("c", V), 10)
    with pytest.raises(TypeError, match="column"):
        v1.estimator.tpu.experimental.EmbeddingConfigSpec(
            column=[column], optimization_parameters=v1.tpu.experimental.AdagradParameters(0.1)
        )
    # the bridge: the names (TF1's, under tf.), and the two typos with a warning (docs/faq.md)
    assert tf.tpu.experimental.embedding_column is tf.compat.v1.tpu.experimental.embedding_column
    with pytest.warns(UserWarning, match="DenseFeature is not a TensorFlow name"):
        tf.keras.layers.DenseFeature(
            [tf.tpu.experimental.embedding_column(tf.feature_column.categorical_column_with_identity("c", V), 10)]
        )


@needs_estimator
@pytest.mark.parametrize("page", sorted(PAGE_KEYS))
def test_the_pages_model_fn_as_printed_gets_tensorflows_own_errors(tmp_path, page):
    model_fn, called = page_model_fn_as_printed(lambda: None)
    theirs, _ = tensorflows_spelling(real_tf, page, tmp_path / "tf", model_fn, use_tpu=False)
    ours, _ = tensorflows_spelling(tf, page, tmp_path / "ours", model_fn)
    features, labels = examples(PAGE_KEYS[page])
    for input_fn in (make_input_fn(features, labels), make_input_fn(features)):
        with pytest.raises(ValueError) as expected:
            theirs.train(input_fn, steps=1)
        with pytest.raises(ValueError) as got:
            ours.train(input_fn, steps=1)
        assert str(got.value).startswith(str(expected.value))  # then: how to fix it
    assert called == []


def expected_table(page, table, grad):
    """One step of the page's EmbeddingConfigSpec optimizer on TABLE with gradient `grad` (TPU semantics)."""
    if page == "001":  # SGD(0.5)
        return table - 0.5 * grad
    if page == "000":  # Adagrad(0.1), initial accumulator 0.1
        return table - 0.1 * grad / np.sqrt(0.1 + grad * grad)
    # Adam(0.05) as a TPU runs it: no bias correction, epsilon inside the square root (rows without ids: g = 0)
    m, v = 0.1 * grad, 0.001 * grad * grad
    return table - 0.05 * m / np.sqrt(v + 1e-8**2)


@needs_estimator
@needs_keras_2
@pytest.mark.parametrize("page", sorted(PAGE_KEYS))
def test_one_step_dense_update_is_tensorflows_and_tables_take_its_gradient_through_the_spec(tmp_path, page):
    features, labels = examples(PAGE_KEYS[page], n=B)
    theirs, their_shapes = tensorflows_spelling(real_tf, page, tmp_path / "tf", use_tpu=False)
    ours, our_shapes = tensorflows_spelling(tf, page, tmp_path / "ours")
    theirs.train(make_input_fn(features, labels), steps=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # the correctly spelled program warns about nothing
        ours.train(make_input_fn(features, labels), steps=1)

    assert [s[1:] for s in our_shapes] == [s[1:] for s in their_shapes] == [[10 if page == "001" else 30]]
    tables = [MOVIE_TABLE] if page == "001" else [SHARED_TABLE, C_TABLE]
    assert set(theirs.get_variable_names()) == set(tables + ["dense/kernel", "dense/bias", "global_step"])
    assert set(theirs.get_variable_names()) <= set(ours.get_variable_names())
    for name in ("dense/kernel", "dense/bias"):  # the dense update is TensorFlow's
        np.testing.assert_allclose(ours.get_variable_value(name), theirs.get_variable_value(name), rtol=1e-5, atol=1e-6)
    # TensorFlow's CPU path trains a table with the model's SGD(0.05): its step gives d loss / d table. Ours
    # applies that gradient with the EmbeddingConfigSpec's optimizer (a and b's gradients summed in one table).
    for name in tables:
        grad = (TABLE - theirs.get_variable_value(name)) / 0.05
        assert np.abs(grad).max() > 1e-3
        np.testing.assert_allclose(
            ours.get_variable_value(name), expected_table(page, TABLE, grad), rtol=1e-4, atol=1e-6
        )


# 003: TPUEmbeddingV2 (SparseCore) --------------------------------------------------------------


E = tf.tpu.experimental.embedding


def sparse_core_examples(n, seed=0):
    """n examples: two clicked items, a history of 1-4 items, a user; the label is the clicked items' mean taste."""
    rng = np.random.default_rng(seed)
    taste = rng.normal(size=40).astype(np.float32)
    clicked = rng.integers(0, 40, (n, 2))
    history = [list(rng.integers(0, 40, rng.integers(1, 5))) for _ in range(n)]
    features = {
        "clicked": tf.ragged.constant(clicked.tolist()),
        "history": tf.ragged.constant(history),
        "user": tf.constant(rng.integers(0, 16, n)),
    }
    return features, taste[clicked].mean(axis=1)


def test_page_003_raises_runtime_error_unless_created_under_tpu_strategy_and_value_error_for_bad_optimizers(
    sparse_core_feature_config,
):
    feature_config, table, _ = sparse_core_feature_config(tf)
    # "RuntimeError: If not created under TPUStrategy" -- whatever the optimizer, and under TensorFlow's own
    # (non-TPU) strategies too.
    for optimizer in (E.Adagrad(0.5), None):
        with pytest.raises(RuntimeError, match=r"^TPUEmbeddingV2 should be created under TPUStrategy but found"):
            E.TPUEmbeddingV2(feature_config=feature_config, optimizer=optimizer)
        with tf.distribute.OneDeviceStrategy("/cpu:0").scope(), pytest.raises(RuntimeError, match="under TPUStrategy"):
            E.TPUEmbeddingV2(feature_config=feature_config, optimizer=optimizer)
    assert tf.distribute.OneDeviceStrategy is real_tf.distribute.OneDeviceStrategy
    # "ValueError: If optimizer is not one of (SGD, Adam or Adagrad) or None when created under a TPUStrategy"
    strategy = tf.distribute.TPUStrategy()
    for optimizer in (None, "sgd", tf.keras.optimizers.SGD(0.1)):
        with strategy.scope(), pytest.raises(ValueError, match="is an unsupported optimizer class"):
            E.TPUEmbeddingV2(feature_config=feature_config, optimizer=optimizer)
    assert table.optimizer is None  # the failed calls changed nothing


@pytest.mark.skipif(
    not hasattr(real_tf.tpu.experimental.embedding, "TPUEmbeddingV2"),
    reason=f"TensorFlow {real_tf.__version__} has no TPUEmbeddingV2, the oracle here (CI runs this "
    "test in the newest TensorFlow's venv)",
)
def test_page_003_tensorflows_own_class_raises_the_same_without_a_tpu():
    theirs = real_tf.tpu.experimental.embedding
    config = {"clicked": theirs.FeatureConfig(table=theirs.TableConfig(vocabulary_size=40, dim=4, name="items"))}
    ours = {"clicked": E.FeatureConfig(table=E.TableConfig(vocabulary_size=40, dim=4, name="items"))}
    for module, feature_config in ((theirs, config), (E, ours)):
        with pytest.raises(RuntimeError, match=r"^TPUEmbeddingV2 should be created under TPUStrategy but found"):
            module.TPUEmbeddingV2(feature_config=feature_config, optimizer=module.Adagrad(0.5))
        with pytest.raises(
            ValueError,
            match=r"^<class 'str'> is an unsupported optimizer class\. Please pass an "
            r"instance of one of the optimizer classes under "
            r"tf\.tpu\.experimental\.embedding\.",
        ):
            module.TPUEmbeddingV2(feature_config=feature_config, optimizer="sgd")  # checked first, in both


def test_page_003_a_tf_function_training_loop_over_its_lookups_and_apply_gradients(sparse_core_feature_config):
    feature_config, table, user_table = sparse_core_feature_config(tf)
    strategy = tf.distribute.TPUStrategy()
    with strategy.scope():
        embedding = E.TPUEmbeddingV2(feature_config=feature_config, optimizer=E.Adagrad(0.5))
    embedding.build()  # "Create variables and slots variables"
    assert {t.name: v.shape for t, v in embedding.embedding_tables.items()} == {"items": (40, 4), "users": (16, 4)}
    assert sorted(embedding.variables[table]) == ["accumulators", "parameters"]
    assert [s.shape for s in embedding.embedding_table_shards[table]] == [(10, 4)] * 4
    before = {t: v.copy() for t, v in embedding.embedding_tables.items()}

    features, labels = sparse_core_examples(100 * B)
    dataset = real_tf.data.Dataset.from_tensor_slices((features, labels)).batch(B, drop_remainder=True)
    dataset_iterator = iter(strategy.experimental_distribute_dataset(dataset))
    with strategy.scope():  # Keras variables under the strategy that runs the step, as on a TPU
        model = tf.keras.Sequential([tf.keras.layers.Dense(1, kernel_initializer=tf.constant_initializer(0.3))])
        model.build((None, 12))
        optimizer = tf.keras.optimizers.SGD(0.1)
    losses, step, seen = tf.Variable(tf.zeros(100)), tf.Variable(0), []

    @tf.function
    def training_step(dataset_iterator, num_steps):
        def tpu_step(features, labels):
            with tf.GradientTape(persistent=True) as tape:
                activations, preserved_outputs = embedding(features)  # __call__: the embedding lookup
                tape.watch(activations)
                x = tf.concat(
                    [activations["clicked"], tf.reduce_mean(activations["history"], 1), activations["user"]], 1
                )
                loss = tf.reduce_mean((model(x)[:, 0] - tf.cast(labels, tf.float32)) ** 2)
            seen.append((activations, preserved_outputs))
            embedding.apply_gradients(tape.gradient(loss, activations), preserved_outputs)
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            losses.assign(tf.tensor_scatter_nd_update(losses, [[step]], [loss]))
            step.assign_add(1)

        for _ in tf.range(num_steps):
            features, labels = next(dataset_iterator)
            strategy.run(tpu_step, args=(features, labels))

    training_step(dataset_iterator, 100)
    assert seen  # what the step saw while traced: graph tensors of TensorFlow's static shapes
    for activations, preserved_outputs in seen:
        assert {name: a.shape.as_list() for name, a in activations.items()} == {
            "clicked": [B, 4],
            "history": [B, 3, 4],
            "user": [B, 4],
        }  # history: [B, max_sequence_length, dim]
        assert all(isinstance(a, real_tf.Tensor) and a.dtype == real_tf.float32 for a in activations.values())
        assert preserved_outputs.dtype == real_tf.int64 and preserved_outputs.shape.rank == 0
    losses = losses.numpy()
    assert int(step.numpy()) == 100 == embedding.engine.global_step and np.all(np.isfinite(losses))
    assert np.mean(losses[-10:]) < 0.1 * np.mean(losses[:10])
    for t in (table, user_table):
        assert not np.allclose(embedding.embedding_tables[t], before[t]), t.name
        assert embedding.variables[t]["accumulators"].max() > 0.1  # the mid-level Adagrad ran


def test_page_003_enqueue_dequeue_and_preprocess_features_give_the_lookup_eagerly(sparse_core_feature_config):
    feature_config, table, _ = sparse_core_feature_config(tf)
    with tf.distribute.TPUStrategy().scope():
        embedding = E.TPUEmbeddingV2(feature_config=feature_config, optimizer=E.SGD(0.5))
    features, _ = sparse_core_examples(B)
    direct, preserved = embedding(features)
    queued, queued_preserved = embedding.dequeue(embedding.enqueue(features))  # "Preprocessing the features on host"
    again, _ = embedding.dequeue(embedding.preprocess_features(features))
    for name, activation in direct.items():
        assert isinstance(queued[name], real_tf.Tensor)
        np.testing.assert_array_equal(queued[name].numpy(), activation.numpy())
        np.testing.assert_array_equal(again[name].numpy(), activation.numpy())
    assert sorted(preserved) == sorted(queued_preserved) == ["items", "users"]  # "dicts of PartitionedCsrFormatTensor"
    assert queued_preserved["items"].sample_count == B + B * 3  # clicked: B samples, history: B * L

    before = embedding.embedding_tables[table].copy()
    embedding.apply_gradients({name: tf.ones_like(a) for name, a in queued.items()}, queued_preserved)
    assert embedding.engine.global_step == 1 and not np.array_equal(embedding.embedding_tables[table], before)


def bad_gradient_cases(activations):
    ones = {name: tf.ones_like(a) for name, a in activations.items()}
    return [
        (ValueError, "found non-tensor type: <class 'list'> at path clicked", {**ones, "clicked": [[1.0] * 4] * B}),
        (
            ValueError,
            r"Found gradient of shape \[16, 5\] at path clicked\. Expected shape \[16, 4\]",
            {**ones, "clicked": tf.ones((B, 5))},
        ),
        (
            ValueError,
            r"Found gradient of shape \[16, 4\] at path history\. Expected shape \[16, 3, 4\]",
            {**ones, "history": tf.ones((B, 4))},
        ),
        (TypeError, "nested structure of `feature_config`", tuple(ones[name] for name in sorted(ones))),
    ]


@pytest.mark.parametrize("in_function", [True, False], ids=["tf.function", "eager"])
def test_page_003_the_errors_its_page_lists_change_nothing(in_function, sparse_core_feature_config):
    feature_config, table, _ = sparse_core_feature_config(tf)
    with tf.distribute.TPUStrategy().scope():
        embedding = E.TPUEmbeddingV2(feature_config=feature_config, optimizer=E.Adagrad(0.5))
    features, _ = sparse_core_examples(B)
    wrap = tf.function if in_function else (lambda f: f)
    # apply_gradients: "RuntimeError: if not built"
    with pytest.raises(RuntimeError, match="apply_gradients called on unbuilt TPUEmbeddingV2 object"):
        embedding.apply_gradients({name: None for name in feature_config}, None)
    # embedding_lookup: "TypeError: If the type of any sequence in features does not match ... feature_config";
    # "ValueError: If the input feature is not one of the Tensor, SparseTensor or RaggedTensor type"
    with pytest.raises(TypeError, match="nested structure of `feature_config`"):
        wrap(lambda: embedding(tuple(features[name] for name in sorted(features))))()
    with pytest.raises(ValueError, match=r"Input clicked is of unknown type <class 'dict'>"):
        wrap(lambda: embedding({**features, "clicked": {"ids": features["clicked"]}}))()
    embedding.build()
    before = {t: v.copy() for t, v in embedding.embedding_tables.items()}

    for error, message, gradients in bad_gradient_cases(embedding(features)[0]):

        def step(features, gradients=gradients):
            _, preserved_outputs = embedding(features)
            embedding.apply_gradients(gradients, preserved_outputs)

        with pytest.raises(error, match=message):
            wrap(step)(features)
        for t, value in embedding.embedding_tables.items():
            np.testing.assert_array_equal(value, before[t])
    assert embedding.engine.global_step == 0

    # "If a gradient of None is passed ..., a gradient update with a zero gradient is applied for that feature.
    # For optimizers like SGD or Adagrad, this is the same as applying no update at all."
    def step_without_clicked(features):
        activations, preserved_outputs = embedding(features)
        embedding.apply_gradients(
            {
                "clicked": None,
                "history": tf.zeros_like(activations["history"]),
                "user": tf.ones_like(activations["user"]),
            },
            preserved_outputs,
        )

    with pytest.warns(UserWarning, match="No gradient passed for feature clicked, sending zero gradient"):
        wrap(step_without_clicked)(features)
    users = next(t for t in before if t.name == "users")
    np.testing.assert_array_equal(embedding.embedding_tables[table], before[table])
    assert not np.array_equal(embedding.embedding_tables[users], before[users])
    assert embedding.engine.global_step == 1
