"""The mid-level API through `tpu_embedding_shim.tensorflow`: TensorFlow tensors in and out, eagerly and in tf.function.

Runs where TensorFlow is installed (a separate venv):

    python -m pytest tests/tf_bridge -q
"""

import itertools
import os
import warnings

import numpy as np
import pytest
import tensorflow as real_tf

import tpu_embedding_shim as shim
import tpu_embedding_shim.tensorflow as tf

from .tf_versions import KERAS_3

E, SHIM = tf.tpu.experimental.embedding, shim.tpu.experimental.embedding


def row_ids(module, vocabulary_size=8, dim=2, combiner="mean", name=None):
    return module.TableConfig(
        vocabulary_size=vocabulary_size, dim=dim, combiner=combiner, name=name, initializer=module.RowIdInitializer()
    )


# ---------------------------------------------------------------------------------------------
# The numpy loop of docs/mid_level_api.md and the same loop in TensorFlow: the same numbers
# ---------------------------------------------------------------------------------------------

STEPS, BATCH = 40, 8


def loop_data(seed):
    rng = np.random.default_rng(seed)
    target = rng.normal(size=16)
    ids = rng.integers(0, 16, (STEPS, BATCH, 2))
    labels = target[ids].mean(axis=2)
    table = rng.normal(0.0, 0.1, (16, 4)).astype(np.float32)
    w = rng.normal(size=(4, 1)).astype(np.float32)
    return ids, labels, table, w


def numpy_loop(seed):
    """docs/mid_level_api.md's loop ('The training loop of TensorFlow's page'), y = activation @ w, by hand."""
    ids, labels, initial, w0 = loop_data(seed)
    table = SHIM.TableConfig(vocabulary_size=16, dim=4, name="video", initializer=lambda shape, dtype: initial)
    with shim.distribute.TPUStrategy().scope():
        embedding = SHIM.TPUEmbedding(
            feature_config={"watched": SHIM.FeatureConfig(table=table)}, optimizer=SHIM.Adagrad(0.5)
        )
    w, losses = w0.astype(np.float64), []
    for step in range(STEPS):
        embedding.enqueue({"watched": shim.ragged.constant(ids[step].tolist())}, training=True)
        x = embedding.dequeue()["watched"]
        error = (x @ w)[:, 0] - labels[step]
        d_out = 2 * error[:, None] / BATCH
        embedding.apply_gradients({"watched": (d_out @ w.T).astype(np.float32)})
        w = w - 0.2 * x.T @ d_out
        losses.append(np.mean(error**2))
    return np.array(losses), embedding.embedding_tables[table], w


class Linear(tf.keras.Model):
    def __init__(self, kernel):
        super().__init__()
        self.dense = tf.keras.layers.Dense(1, use_bias=False, kernel_initializer=tf.constant_initializer(kernel))

    def call(self, activations):
        return self.dense(activations["watched"])[:, 0]


def tensorflow_loop(seed, in_function, page_004_loop):
    """The same loop as TensorFlow's page writes it: Keras model, GradientTape, the model's optimizer."""
    ids, labels, initial, w0 = loop_data(seed)
    table = E.TableConfig(vocabulary_size=16, dim=4, name="video", initializer=lambda shape, dtype: initial)
    strategy = tf.distribute.TPUStrategy(tf.distribute.cluster_resolver.TPUClusterResolver(tpu=""))
    with strategy.scope():
        embedding = E.TPUEmbedding(feature_config={"watched": E.FeatureConfig(table=table)}, optimizer=E.Adagrad(0.5))
    dataset = tf.data.Dataset.from_tensor_slices(
        ({"watched": tf.ragged.constant(ids.reshape(-1, 2).tolist())}, labels.reshape(-1))
    ).batch(BATCH, True)
    dataset_iterator = iter(
        strategy.experimental_distribute_dataset(
            dataset, options=tf.distribute.InputOptions(experimental_fetch_to_device=False)
        )
    )
    model = Linear(w0)
    model.optimizer = tf.keras.optimizers.SGD(0.2)
    model({"watched": tf.zeros((BATCH, 4))})
    model.optimizer.build(model.trainable_variables)
    losses, step = tf.Variable(tf.zeros(STEPS)), tf.Variable(0)
    shapes = []

    def tpu_step(labels):
        with tf.GradientTape() as tape:
            activations = embedding.dequeue()
            tape.watch(activations)
            loss = tf.reduce_mean((model(activations) - tf.cast(labels, tf.float32)) ** 2)
        embedding_gradients, model_gradients = tape.gradient(loss, (activations, model.trainable_variables))
        embedding.apply_gradients(embedding_gradients)
        model.optimizer.apply_gradients(zip(model_gradients, model.trainable_variables))
        shapes.append((type(activations["watched"]), activations["watched"].shape.as_list()))
        losses.assign(tf.tensor_scatter_nd_update(losses, [[step]], [loss]))
        step.assign_add(1)

    training_step = page_004_loop(tf, strategy, embedding, tpu_step, training=True)
    if in_function:
        tf.function(training_step)(dataset_iterator, STEPS)
    else:
        training_step(dataset_iterator, STEPS)
    return losses.numpy(), embedding.embedding_tables[table], model.dense.kernel.numpy(), shapes


@pytest.mark.parametrize("in_function", [True, False], ids=["tf.function", "eager"])
def test_the_tensorflow_loop_gives_the_numbers_of_the_numpy_loop(in_function, page_004_loop):
    losses, table, w = numpy_loop(seed=3)
    tf_losses, tf_table, tf_w, shapes = tensorflow_loop(seed=3, in_function=in_function, page_004_loop=page_004_loop)
    assert losses[-5:].mean() < 0.2 * losses[:5].mean()  # it trains
    np.testing.assert_allclose(tf_losses, losses, rtol=2e-5, atol=1e-7)
    np.testing.assert_allclose(tf_table, table, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tf_w, w, rtol=1e-5, atol=1e-6)
    _, initial, _ = loop_data(3)[1:]
    assert not np.allclose(table, initial)
    kind, shape = shapes[0]
    assert issubclass(kind, real_tf.Tensor) and shape == [BATCH, 4]
    assert len(shapes) == (1 if in_function else STEPS)  # traced once in the loop, or run each step


# ---------------------------------------------------------------------------------------------
# Program order inside tf.function
# ---------------------------------------------------------------------------------------------


def pipelined_lookups(pipelining, unroll):
    table = row_ids(E, vocabulary_size=4, dim=1, combiner="sum")
    embedding = E.TPUEmbedding(
        feature_config=E.FeatureConfig(table=table),
        optimizer=E.SGD(1.0),
        pipeline_execution_with_tensor_core=pipelining,
    )

    @tf.function
    def three_steps():
        seen = []
        for _ in range(3) if unroll else tf.range(3):
            embedding.enqueue(tf.constant([2]))
            activation = embedding.dequeue()
            embedding.apply_gradients(tf.ones((1, 1)))  # row 2 -= 1 at each step
            seen.append(activation[0, 0]) if unroll else None
        return tf.stack(seen) if unroll else tf.constant(0.0)

    seen = three_steps()
    return (seen.numpy().tolist() if unroll else None), float(embedding.embedding_tables[table][2, 0])


@pytest.mark.parametrize("unroll", [True, False], ids=["python loop", "tf.range loop"])
def test_enqueue_dequeue_apply_run_in_program_order_inside_tf_function(unroll):
    # docs/mid_level_api.md, 'Pipelining': [2, 1, 0] without, [2, 2, 1] with; row 2 ends at -1 either way.
    seen, row = pipelined_lookups(pipelining=False, unroll=unroll)
    assert row == -1.0 and seen in (None, [2.0, 1.0, 0.0])
    seen, row = pipelined_lookups(pipelining=True, unroll=unroll)
    assert row == -1.0 and seen in (None, [2.0, 2.0, 1.0])


def test_each_bridged_op_depends_on_the_previous_one():
    table = row_ids(E, vocabulary_size=4, dim=1)
    embedding = E.TPUEmbedding(feature_config={"f": E.FeatureConfig(table=table)}, optimizer=E.SGD(1.0))

    @tf.function
    def step(ids):
        embedding.enqueue({"f": ids})
        activations = embedding.dequeue()
        embedding.apply_gradients({"f": tf.ones_like(activations["f"])})
        embedding.enqueue({"f": ids}, training=False)
        return embedding.dequeue()["f"]

    graph = step.get_concrete_function(tf.TensorSpec([2], tf.int64)).graph
    ops = [op for op in graph.get_operations() if op.type == "PyFunc"]  # the bridge's tf.numpy_function ops
    kinds = [op.name.rstrip("_0123456789").split("_")[-1] for op in ops]
    assert kinds == ["enqueue", "dequeue", "gradients", "enqueue", "dequeue"]
    for before, after in itertools.pairwise(ops):
        assert before in after.control_inputs
    assert step(tf.constant([1, 3], tf.int64)).numpy()[:, 0].tolist() == [0.0, 2.0]


def test_a_dataset_without_drop_remainder_is_tensorflows_error_when_traced():
    embedding = E.TPUEmbedding(feature_config={"f": E.FeatureConfig(table=row_ids(E))}, optimizer=E.SGD(1.0))
    dataset = tf.data.Dataset.from_tensor_slices({"f": np.arange(6)}).batch(4)  # static batch size None

    @tf.function
    def step(iterator):
        embedding.enqueue(next(iterator))
        return embedding.dequeue()["f"]

    with pytest.raises(
        ValueError,
        match=r"Input Feature f has output shape set as \[None\] which is not fully "
        "defined",
    ):
        step(iter(dataset))
    assert not embedding._embedding._built  # nothing built, nothing queued
    assert step(iter(dataset.unbatch().batch(4, drop_remainder=True))).shape.as_list() == [4, 2]


# ---------------------------------------------------------------------------------------------
# Inputs and outputs
# ---------------------------------------------------------------------------------------------


def inputs():
    return {
        "dense": tf.constant([[1], [5]]),
        "ragged": tf.ragged.constant([[2, 4], [7]]),
        "sparse": tf.SparseTensor(
            indices=[[0, 0], [0, 1], [1, 0]], values=tf.constant([1, 2, 3], tf.int64), dense_shape=[2, 2]
        ),
        "sequence": tf.ragged.constant([[1, 2, 3], [4]]),
    }


def mixed_embedding(module):
    one, two = row_ids(module), row_ids(module, vocabulary_size=4, combiner="sum")
    return module.TPUEmbedding(
        feature_config={
            "dense": module.FeatureConfig(table=one),
            "ragged": module.FeatureConfig(table=one),
            "sparse": module.FeatureConfig(table=two),
            "sequence": module.FeatureConfig(table=one, max_sequence_length=2),
        },
        optimizer=module.SGD(0.1),
    )


def numpy_inputs():
    return {
        "dense": np.array([[1], [5]]),
        "ragged": shim.ragged.constant([[2, 4], [7]]),
        "sparse": shim.SparseTensor(indices=[[0, 0], [0, 1], [1, 0]], values=[1, 2, 3], dense_shape=[2, 2]),
        "sequence": shim.ragged.constant([[1, 2, 3], [4]]),
    }


@pytest.mark.parametrize("in_function", [True, False], ids=["tf.function", "eager"])
def test_tensors_sparse_and_ragged_give_the_numpy_apis_activations_and_updates(in_function):
    bridged, plain = mixed_embedding(E), mixed_embedding(SHIM)
    plain.enqueue(numpy_inputs())
    expected = plain.dequeue()
    gradients = {name: np.full(a.shape, 0.5, np.float32) for name, a in expected.items()}
    plain.apply_gradients(gradients)

    def step(features):
        bridged.enqueue(features, training=True)
        activations = bridged.dequeue()
        bridged.apply_gradients({name: tf.fill(tf.shape(a), 0.5) for name, a in activations.items()})
        return activations

    activations = (tf.function(step) if in_function else step)(inputs())
    assert sorted(activations) == sorted(expected)
    for name, a in activations.items():
        assert isinstance(a, real_tf.Tensor) and a.dtype == real_tf.float32
        np.testing.assert_array_equal(a.numpy(), expected[name])
    assert activations["sequence"].shape.as_list() == [2, 2, 2]  # [B, max_sequence_length, dim]
    for (_table, value), (_, plain_value) in zip(bridged.embedding_tables.items(), plain.embedding_tables.items()):
        np.testing.assert_array_equal(value, plain_value)
    assert bridged.engine.global_step == 1


def test_weights_and_nested_structures_cross_as_tensors():
    table = row_ids(E, combiner="sum")
    embedding = E.TPUEmbedding(
        feature_config=[E.FeatureConfig(table=table), (E.FeatureConfig(table=table),)], optimizer=E.SGD(1.0)
    )

    @tf.function
    def lookup(ids, weights):
        embedding.enqueue([ids, (ids,)], weights=[weights, (None,)], training=False)
        return embedding.dequeue()

    ids = tf.ragged.constant([[1, 2], [3]])
    weighted, (plain,) = lookup(ids, tf.ragged.constant([[2.0, 0.5], [1.0]]))
    assert weighted.numpy()[:, 0].tolist() == [3.0, 3.0] and plain.numpy()[:, 0].tolist() == [3.0, 3.0]
    assert isinstance(plain, real_tf.Tensor)


def test_a_feature_config_kept_by_a_keras_layer_is_held_as_plain_dicts_and_lists_and_trains_the_same():
    """TFRS's layer hands its `feature_config` as TensorFlow's tracking wrappers (`_DictWrapper`, `ListWrapper`);
    the bridge holds the plain nest (each step's nests pack ~10x faster), same keys, order and numbers."""
    from tensorflow.python.trackable.data_structures import wrap_or_unwrap

    def train(config):
        with tf.distribute.TPUStrategy().scope():
            embedding = E.TPUEmbedding(feature_config=config, optimizer=E.SGD(0.5))
        ids = {"b": [tf.constant([1, 2]), tf.constant([3, 1])], "a": tf.constant([4, 5])}
        embedding.enqueue(ids, training=True)
        activations = embedding.dequeue()
        embedding.apply_gradients(tf.nest.map_structure(tf.ones_like, activations))
        return embedding, activations

    table = row_ids(E, combiner="sum", name="t")
    config = {"b": [E.FeatureConfig(table=table), E.FeatureConfig(table=table)], "a": E.FeatureConfig(table=table)}
    wrapped = wrap_or_unwrap(dict(config))
    assert type(wrapped).__name__ == "_DictWrapper" and type(wrapped["b"]).__name__ == "ListWrapper"
    embedding, activations = train(wrapped)
    plain_embedding, plain_activations = train(config)
    assert type(embedding.feature_config) is dict and type(embedding.feature_config["b"]) is list
    assert list(embedding.feature_config) == ["b", "a"] and embedding.feature_config == config
    assert type(activations) is dict and type(activations["b"]) is list
    for mine, theirs in zip(tf.nest.flatten(activations), tf.nest.flatten(plain_activations)):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    np.testing.assert_array_equal(embedding.embedding_tables[table], plain_embedding.embedding_tables[table])


def test_a_none_gradient_is_a_zero_gradient_with_tensorflows_warning():
    table = E.TableConfig(vocabulary_size=3, dim=1, initializer=tf.constant_initializer(1.0))
    embedding = E.TPUEmbedding(feature_config={"f": E.FeatureConfig(table=table)}, optimizer=E.SGD(0.1))

    @tf.function
    def step():
        embedding.enqueue({"f": tf.constant([0, 1])})
        embedding.dequeue()
        embedding.apply_gradients({"f": None})

    with pytest.warns(UserWarning, match=r"No gradient passed for feature f, sending zero gradient of shape \[2, 1\]"):
        step()
    assert embedding.embedding_tables[table][:, 0].tolist() == [1.0, 1.0, 1.0] and embedding.engine.global_step == 1


def test_tensorflow_initializers_fill_the_tables():
    table = E.TableConfig(vocabulary_size=4, dim=3, initializer=tf.constant_initializer(np.arange(12.0)))
    embedding = E.TPUEmbedding(feature_config=E.FeatureConfig(table=table), optimizer=E.SGD(0.1))

    @tf.function
    def lookup():  # the tables are made when tracing first builds the object, eagerly
        embedding.enqueue(tf.constant([3]), training=False)
        return embedding.dequeue()

    assert lookup().numpy().tolist() == [[9.0, 10.0, 11.0]]


# ---------------------------------------------------------------------------------------------
# Bad input: TensorFlow's exception types; nothing changes
# ---------------------------------------------------------------------------------------------


BAD_ENQUEUES = [
    ("a list for a dict", lambda: [tf.constant([1, 2])], TypeError, "nested structure of `feature_config`"),
    ("another key", lambda: {"g": tf.constant([1, 2])}, ValueError, r"keys \['f'\] in feature_config"),
    (
        "dense [2, 2]",
        lambda: {"f": tf.constant([[1, 2], [3, 4]])},
        ValueError,
        "Rank 2 or above dense tensor should have last dimension as 1",
    ),
    ("float ids", lambda: {"f": tf.constant([1.0, 2.0])}, TypeError, "must be integers"),
    (
        "ragged rank 3",
        lambda: {"f": tf.ragged.constant([[[1]], [[2, 3]]])},
        ValueError,
        "Only rank 2 ragged tensor is supported",
    ),
    (
        "sparse rank 1",
        lambda: {"f": tf.SparseTensor([[0]], tf.constant([1], tf.int64), [2])},
        ValueError,
        "Only rank 2 and above sparse tensor is supported",
    ),
]


@pytest.mark.parametrize("in_function", [True, False], ids=["tf.function", "eager"])
@pytest.mark.parametrize("case", BAD_ENQUEUES, ids=[c[0] for c in BAD_ENQUEUES])
def test_bad_enqueues_are_tensorflows_errors_and_change_nothing(case, in_function):
    _, make, error, message = case
    table = row_ids(E)
    embedding = E.TPUEmbedding(feature_config={"f": E.FeatureConfig(table=table)}, optimizer=E.SGD(1.0))
    embedding.enqueue({"f": tf.constant([1, 2])}, training=False)  # builds; fixes the output shape [2]
    before = embedding.embedding_tables[table]

    def enqueue():
        embedding.enqueue(make())

    with pytest.raises(error, match=message):
        (tf.function(enqueue) if in_function else enqueue)()
    np.testing.assert_array_equal(embedding.embedding_tables[table], before)
    assert embedding.dequeue()["f"].numpy()[:, 0].tolist() == [1.0, 2.0]  # the earlier batch, still the next one


def tensorflows_refusal(check):
    """The message of one of TensorFlow's own TPU shape checks, run on its `TPUEmbedding` made on the CPU (the
    checks read static shapes only, so they need no TPU)."""
    embedding = real_tf.tpu.experimental.embedding
    config = {"f": embedding.FeatureConfig(table=embedding.TableConfig(vocabulary_size=8, dim=2))}
    with pytest.raises(ValueError) as error:
        check(embedding.TPUEmbedding(config, embedding.SGD(0.1)), config["f"])
    return str(error.value)


def rank_1_sparse():
    return real_tf.SparseTensor([[0]], real_tf.constant([1], real_tf.int64), [2])


RANK_REFUSALS = [  # name, TensorFlow's check on its own object, the same input given to the project's object
    (
        "build, shape []",
        lambda tf_object, feature: tf_object._get_output_shapes_from_input_shapes([real_tf.TensorShape([])]),
        lambda embedding: embedding.build(per_replica_input_shapes={"f": real_tf.TensorShape([])}),
    ),
    (
        "enqueue, dense rank 0",
        lambda tf_object, feature: tf_object._get_input_shape_for_tensor(real_tf.constant(3), feature, True, "f"),
        lambda embedding: embedding.enqueue({"f": real_tf.constant(3)}),
    ),
    (
        "enqueue, sparse rank 1",
        lambda tf_object, feature: tf_object._get_input_shape_for_sparse_tensor(rank_1_sparse(), feature, True, "f"),
        lambda embedding: embedding.enqueue({"f": rank_1_sparse()}),
    ),
]


@pytest.mark.parametrize("case", RANK_REFUSALS, ids=[c[0] for c in RANK_REFUSALS])
def test_rank_0_dense_and_rank_1_sparse_inputs_are_refused_with_tensorflows_tpu_messages(case):
    """TensorFlow's TPUEmbedding refuses these in `build` / `enqueue` on a TPU; the project's message starts with
    TensorFlow's own (its fix follows), and nothing is built or queued."""
    _, tensorflows_check, ours = case
    expected = tensorflows_refusal(tensorflows_check)
    with tf.distribute.TPUStrategy().scope():
        embedding = E.TPUEmbedding(feature_config={"f": E.FeatureConfig(table=row_ids(E))}, optimizer=E.SGD(1.0))
    with pytest.raises(ValueError) as error:
        ours(embedding)
    assert str(error.value).startswith(expected.rstrip(".")), (str(error.value), expected)
    assert "Each input is a batch" in str(error.value) or "Give a SparseTensor of shape [B, N]" in str(error.value)
    assert embedding._embedding._engine is None and not embedding._embedding._queue  # nothing built or queued


def test_serving_refuses_rank_0_and_rank_1_sparse_inputs_as_training_does_where_tensorflows_cpu_lookup_takes_them():
    """docs/mid_level_api.md, CPU serving: TensorFlow's serving lookup gives one [dim] vector for each (the id, or
    every id of the tensor combined); serving here keeps the training path's rules."""
    tf_embedding = real_tf.tpu.experimental.embedding
    tf_table = tf_embedding.TableConfig(vocabulary_size=8, dim=2, combiner="sum")
    values = np.arange(16, dtype=np.float32).reshape(8, 2)
    rank_1 = real_tf.SparseTensor([[0], [2]], real_tf.constant([1, 5], real_tf.int64), [4])
    tensorflows = tf_embedding.serving_embedding_lookup(
        {"d": real_tf.constant(3), "s": rank_1},
        None,
        {tf_table: real_tf.Variable(values)},
        {"d": tf_embedding.FeatureConfig(table=tf_table), "s": tf_embedding.FeatureConfig(table=tf_table)},
    )
    assert tensorflows["d"].numpy().tolist() == values[3].tolist()
    assert tensorflows["s"].numpy().tolist() == (values[1] + values[5]).tolist()
    table = E.TableConfig(vocabulary_size=8, dim=2, combiner="sum")
    for inputs, message in [(real_tf.constant(3), "rank 1 and above"), (rank_1, "rank 2 and above")]:
        with pytest.raises(ValueError, match=message):
            E.serving_embedding_lookup({"f": inputs}, None, {table: values}, {"f": E.FeatureConfig(table=table)})


@pytest.mark.parametrize("in_function", [True, False], ids=["tf.function", "eager"])
def test_weights_for_a_dense_input_and_bad_gradients_are_value_errors(in_function):
    table = row_ids(E)
    embedding = E.TPUEmbedding(feature_config={"f": E.FeatureConfig(table=table)}, optimizer=E.SGD(1.0))
    wrap = tf.function if in_function else (lambda f: f)
    with pytest.raises(ValueError, match="Weight specified for dense input f"):
        wrap(lambda: embedding.enqueue({"f": tf.constant([1, 2])}, weights={"f": tf.constant([1.0, 2.0])}))()
    embedding.enqueue({"f": tf.constant([1, 2])})
    embedding.dequeue()
    with pytest.raises(ValueError, match=r"Found gradient of shape \[2, 3\] at path f. Expected shape \[2, 2\]"):
        wrap(lambda: embedding.apply_gradients({"f": tf.ones((2, 3))}))()
    with pytest.raises(ValueError, match="found non-tensor type: <class 'list'> at path f"):
        wrap(lambda: embedding.apply_gradients({"f": [[1.0, 1.0], [1.0, 1.0]]}))()
    embedding.apply_gradients({"f": tf.ones((2, 2))})  # the batch is still there to train on
    assert embedding.embedding_tables[table][[1, 2], 0].tolist() == [0.0, 1.0]


def test_a_bad_id_found_when_the_op_runs_is_an_invalid_argument_error_naming_the_projects_error():
    table = row_ids(E)
    embedding = E.TPUEmbedding(feature_config={"f": E.FeatureConfig(table=table)}, optimizer=E.SGD(1.0))
    before = embedding.embedding_tables[table]

    @tf.function
    def enqueue(ids):
        embedding.enqueue({"f": ids})

    with pytest.raises(real_tf.errors.InvalidArgumentError, match=r"ValueError: .*9"):
        enqueue(tf.constant([1, 9]))  # the table has 8 rows
    np.testing.assert_array_equal(embedding.embedding_tables[table], before)
    with pytest.raises(ValueError, match="9"):  # eagerly: the project's own exception
        embedding.enqueue({"f": tf.constant([1, 9])})


def test_dequeue_before_enqueue_is_tensorflows_runtime_error_when_traced():
    embedding = E.TPUEmbedding(feature_config={"f": E.FeatureConfig(table=row_ids(E))}, optimizer=E.SGD(1.0))
    with pytest.raises(RuntimeError, match="dequeue called on unbuilt TPUEmbedding object"):
        tf.function(embedding.dequeue)()


# ---------------------------------------------------------------------------------------------
# TPUEmbeddingV2 and TPUEmbeddingForServing
# ---------------------------------------------------------------------------------------------


def sparse_core(module, strategy):
    table = row_ids(module, combiner="sum", name="items")
    with strategy.scope():
        return table, module.TPUEmbeddingV2(
            feature_config={
                "clicked": module.FeatureConfig(table=table),
                "history": module.FeatureConfig(table=table, max_sequence_length=2),
            },
            optimizer=module.SGD(0.5),
        )


@pytest.mark.parametrize("in_function", [True, False], ids=["tf.function", "eager"])
def test_tpu_embedding_v2_lookup_and_update_match_the_numpy_api(in_function):
    table, v2 = sparse_core(E, tf.distribute.TPUStrategy())
    plain_table, plain = sparse_core(SHIM, shim.distribute.TPUStrategy())
    expected, preserved = plain(
        {"clicked": shim.ragged.constant([[1, 2], [5]]), "history": shim.ragged.constant([[3, 4, 6], [7]])}
    )
    plain.apply_gradients({name: np.ones_like(a) for name, a in expected.items()}, preserved)

    def step(features):
        activations, kept = v2(features)
        v2.apply_gradients({name: tf.ones_like(a) for name, a in activations.items()}, kept)
        return activations

    activations = (tf.function(step) if in_function else step)(
        {"clicked": tf.ragged.constant([[1, 2], [5]]), "history": tf.ragged.constant([[3, 4, 6], [7]])}
    )
    for name, a in activations.items():
        assert isinstance(a, real_tf.Tensor)
        np.testing.assert_array_equal(a.numpy(), expected[name])
    np.testing.assert_array_equal(v2.embedding_tables[table], plain.embedding_tables[plain_table])


def test_tpu_embedding_v2_preserved_outputs_apply_once():
    _table, v2 = sparse_core(E, tf.distribute.TPUStrategy())
    features = {"clicked": tf.ragged.constant([[1], [5]]), "history": tf.ragged.constant([[3], [7]])}

    @tf.function
    def lookup():
        return v2(features)

    @tf.function
    def apply(activations, kept):
        v2.apply_gradients({name: tf.ones_like(a) for name, a in activations.items()}, kept)

    activations, kept = lookup()
    assert kept.dtype == real_tf.int64 and kept.shape.rank == 0
    apply(activations, kept)
    with pytest.raises(
        real_tf.errors.UnknownError, match="RuntimeError: This lookup was made at step 0 but the engine is at step 1"
    ):
        apply(activations, kept)  # a RuntimeError in an op: TensorFlow's UnknownError
    with pytest.raises(NotImplementedError, match="embedding_lookup"):
        tf.function(lambda: v2.enqueue(features))()
    batch = v2.enqueue(features)  # eagerly: the project's preprocessed batch
    activations, preserved = v2.dequeue(batch)
    assert isinstance(activations["clicked"], real_tf.Tensor) and sorted(preserved) == ["items"]


def test_serving_lookups_are_the_training_lookups():
    table = row_ids(E, combiner="sum", name="items")
    config = {"clicked": E.FeatureConfig(table=table), "history": E.FeatureConfig(table=table, max_sequence_length=2)}
    served = E.TPUEmbeddingForServing(feature_config=config, optimizer=None)
    features = {"clicked": tf.ragged.constant([[1, 2], [5]]), "history": tf.ragged.constant([[3, 4, 6], [7]])}
    in_function = tf.function(served.embedding_lookup)(features)
    eager = served(features)
    function_lookup = E.serving_embedding_lookup(features, None, served.embedding_tables, config)
    assert in_function["history"].shape.as_list() == [2, 2, 2]
    for name in features:
        np.testing.assert_array_equal(in_function[name].numpy(), eager[name].numpy())
        np.testing.assert_array_equal(function_lookup[name].numpy(), eager[name].numpy())
    assert eager["clicked"].numpy()[:, 0].tolist() == [3.0, 5.0]
    with pytest.raises(RuntimeError, match="Serving on TPU is not yet supported"), tf.distribute.TPUStrategy().scope():
        E.TPUEmbeddingForServing(feature_config=config, optimizer=None)


# ---------------------------------------------------------------------------------------------
# TensorFlow's tf.train.Checkpoint
# ---------------------------------------------------------------------------------------------


def trained(module, optimizer, steps=3):
    table = module.TableConfig(vocabulary_size=6, dim=3, name="items")
    embedding = module.TPUEmbedding(feature_config={"f": module.FeatureConfig(table=table)}, optimizer=optimizer)
    for step in range(steps):
        embedding.enqueue({"f": np.array([step, 5 - step])})
        embedding.dequeue()
        embedding.apply_gradients({"f": np.full((2, 3), step + 1.0, np.float32)})
    return table, embedding


def test_the_real_checkpoint_saves_a_keras_model_and_the_embedding_under_tensorflows_keys(tmp_path):
    table, embedding = trained(E, E.Adam(0.1))
    model = tf.keras.Sequential([tf.keras.layers.Dense(2)])
    model.build((None, 3))
    path = tf.train.Checkpoint(model=model, embedding=embedding).save(os.path.join(str(tmp_path), "ckpt"))
    keys = dict(tf.train.list_variables(path))
    assert keys["embedding/items/.ATTRIBUTES/VARIABLE_VALUE"] == [6, 3]
    assert keys["embedding/items.Smomenta/.ATTRIBUTES/VARIABLE_VALUE"] == [6, 3]
    assert keys["embedding/items.Svelocities/.ATTRIBUTES/VARIABLE_VALUE"] == [6, 3]
    assert tf.train.load_variable(path, "embedding/.ATTRIBUTES/TPU_EMBEDDING_SHIM_global_step") == 3
    # the model's kernel under Keras's own key (Keras 2's; Keras 3 names it by its functional graph)
    kernel = "model/_functional/_operations/1/_kernel" if KERAS_3 else "model/layer_with_weights-0/kernel"
    assert keys[kernel + "/.ATTRIBUTES/VARIABLE_VALUE"] == [3, 2]
    np.testing.assert_array_equal(
        tf.train.load_variable(path, "embedding/items/.ATTRIBUTES/VARIABLE_VALUE"), embedding.embedding_tables[table]
    )

    fresh_table, fresh = trained(E, E.Adam(0.1), steps=0)
    fresh_model = tf.keras.Sequential([tf.keras.layers.Dense(2)])
    fresh_model.build((None, 3))
    tf.train.Checkpoint(model=fresh_model, embedding=fresh).restore(path).assert_consumed()
    for (_t, slots), (_, fresh_slots) in zip(embedding.variables.items(), fresh.variables.items()):
        for name in slots:
            np.testing.assert_array_equal(fresh_slots[name], slots[name])
    assert fresh.engine.global_step == 3
    np.testing.assert_array_equal(fresh_model.layers[0].kernel.numpy(), model.layers[0].kernel.numpy())
    # One more identical step on both: the same tables (Adam's bias correction reads the restored step).
    for e in (embedding, fresh):
        e.enqueue({"f": tf.constant([1, 2])})
        e.dequeue()
        e.apply_gradients({"f": tf.ones((2, 3))})
    np.testing.assert_array_equal(fresh.embedding_tables[fresh_table], embedding.embedding_tables[table])


def test_tensorflows_own_tpu_embedding_restores_the_bridges_checkpoint_and_the_bridge_restores_tensorflows(tmp_path):
    table, embedding = trained(E, E.Adagrad(0.1))
    path = tf.train.Checkpoint(embedding=embedding).save(os.path.join(str(tmp_path), "bridge"))
    real = real_tf.tpu.experimental.embedding
    real_table = real.TableConfig(vocabulary_size=6, dim=3, name="items")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = real.TPUEmbedding(
            feature_config={"f": real.FeatureConfig(table=real_table)}, optimizer=real.Adagrad(0.1)
        )
    theirs.build()  # TensorFlow's CPU object makes its variables when built
    real_tf.train.Checkpoint(embedding=theirs).restore(path).assert_consumed()
    np.testing.assert_array_equal(theirs.embedding_tables[real_table].numpy(), embedding.embedding_tables[table])

    theirs.embedding_tables[real_table].assign(np.full((6, 3), 7.0, np.float32))
    their_path = real_tf.train.Checkpoint(embedding=theirs).save(os.path.join(str(tmp_path), "tensorflow"))
    _, mine = trained(E, E.Adagrad(0.1), steps=0)
    tf.train.Checkpoint(embedding=mine).restore(their_path).assert_consumed()
    assert np.all(next(iter(mine.embedding_tables.values())) == 7.0)
    np.testing.assert_array_equal(
        next(iter(mine.variables.values()))["accumulators"], next(iter(embedding.variables.values()))["accumulators"]
    )


def test_a_checkpoint_of_other_shapes_is_refused_and_changes_nothing(tmp_path):
    _, embedding = trained(E, E.SGD(0.1))
    path = tf.train.Checkpoint(embedding=embedding).save(os.path.join(str(tmp_path), "ckpt"))
    table = E.TableConfig(vocabulary_size=7, dim=3, name="items")
    other = E.TPUEmbedding(feature_config={"f": E.FeatureConfig(table=table)}, optimizer=E.SGD(0.1))
    before = other.embedding_tables[table]
    with pytest.raises(ValueError, match=r"table 'items' has shape \[6, 3\]; this embedding's is \[7, 3\]"):
        tf.train.Checkpoint(embedding=other).restore(path)
    np.testing.assert_array_equal(other.embedding_tables[table], before)


def test_the_projects_own_checkpoint_reads_the_bridges_tables_and_the_bridge_reads_its(tmp_path):
    table, embedding = trained(E, E.Adagrad(0.1))
    path = tf.train.Checkpoint(embedding=embedding).save(os.path.join(str(tmp_path), "bridge"))
    plain_table, plain = trained(SHIM, SHIM.Adagrad(0.1), steps=0)
    shim.train.Checkpoint(embedding=plain).restore(path)
    np.testing.assert_array_equal(plain.embedding_tables[plain_table], embedding.embedding_tables[table])

    plain_path = shim.train.Checkpoint(embedding=plain).save(os.path.join(str(tmp_path), "numpy"))
    mine_table, mine = trained(E, E.Adagrad(0.1), steps=0)
    tf.train.Checkpoint(embedding=mine).restore(plain_path).assert_consumed()
    np.testing.assert_array_equal(mine.embedding_tables[mine_table], embedding.embedding_tables[table])


def test_a_bridge_checkpoint_restores_into_the_numpy_api_with_the_step(tmp_path):
    """TensorFlow's tf.train.Checkpoint through the bridge and the project's own write the engine's step under
    one key, so the numpy API restores a bridge checkpoint with its step (Adam's bias correction reads it). The
    other way the tables cross but the step does not: TensorFlow restores only what the object graph lists,
    and the numpy API writes TensorFlow's graph for TPUEmbedding, which has no step (docs/tensorflow_bridge.md)."""
    table, bridged = trained(E, E.Adam(0.1))
    path = tf.train.Checkpoint(embedding=bridged).save(os.path.join(str(tmp_path), "tf", "ckpt"))
    _, numpy_side = trained(SHIM, SHIM.Adam(0.1), steps=0)
    shim.train.Checkpoint(embedding=numpy_side).restore(path)
    assert numpy_side.engine.global_step == 3
    np.testing.assert_array_equal(
        numpy_side.embedding_tables[next(iter(numpy_side.embedding_tables))], bridged.embedding_tables[table]
    )


def test_tensorflows_global_seed_makes_the_initial_tables_reproducible():
    """As TensorFlow's own initializers: the same tables after tf.random.set_seed, fresh ones without it."""

    def tables(seed):
        if seed is not None:
            real_tf.random.set_seed(seed)
        config = tf.tpu.experimental.embedding.FeatureConfig(
            table=tf.tpu.experimental.embedding.TableConfig(vocabulary_size=16, dim=4), name="f"
        )
        embedding = tf.tpu.experimental.embedding.TPUEmbedding(config, tf.tpu.experimental.embedding.SGD(0.1))
        embedding.build(per_replica_input_shapes=real_tf.TensorShape([2]))
        return next(iter(embedding.embedding_tables.values())).copy()

    np.testing.assert_array_equal(tables(7), tables(7))
    assert not np.array_equal(tables(7), tables(8))
