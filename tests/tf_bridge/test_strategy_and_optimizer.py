"""The TPUStrategy stand-in with TensorFlow datasets and `tf.function`; `CrossShardOptimizer` over one replica.

Runs where TensorFlow is installed (a separate venv):

    python -m pytest tests/tf_bridge -q
"""

import numpy as np
import pytest
import tensorflow

import tpu_embedding_shim as shim
import tpu_embedding_shim.tensorflow as tf


@pytest.fixture
def strategy():
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
    assert tf.config.experimental_connect_to_cluster(resolver) is None  # the stand-in's no-op
    topology = tf.tpu.experimental.initialize_tpu_system(resolver)  # TensorFlow's type, as TensorFlow returns
    assert isinstance(topology, tensorflow.tpu.experimental.Topology) and topology.num_tasks == 1
    return tf.distribute.TPUStrategy(resolver)


def test_a_tf_data_dataset_is_distributed_as_it_is_and_iterates_inside_tf_function(strategy):
    dataset = tf.data.Dataset.range(10).batch(4, drop_remainder=True)
    distributed = strategy.experimental_distribute_dataset(dataset)
    assert distributed is dataset
    contexts = []

    def dataset_fn(input_context):
        contexts.append(input_context)
        return dataset.map(lambda x: x * input_context.get_per_replica_batch_size(2))

    from_function = strategy.distribute_datasets_from_function(
        dataset_fn, options=tf.distribute.InputOptions(experimental_prefetch_to_device=False)
    )
    assert isinstance(contexts[0], tensorflow.distribute.InputContext) and contexts[0].num_replicas_in_sync == 1

    @tf.function
    def total(dataset):
        result = tf.constant(0, tf.int64)
        for batch in dataset:
            result += strategy.run(lambda x: tf.reduce_sum(x), args=(batch,))
        return result

    assert int(total(distributed)) == sum(range(8)) and int(total(from_function)) == 2 * sum(range(8))
    assert next(iter(strategy.experimental_distribute_dataset([[1, 2], [3]]))) == [1, 2]  # any iterable, as before


def test_input_options_are_tensorflows_and_take_the_tf_2_3_name():
    options = tf.distribute.InputOptions(experimental_prefetch_to_device=False)
    assert isinstance(options, tensorflow.distribute.InputOptions) and options.experimental_fetch_to_device is False
    assert tf.distribute.InputOptions().experimental_fetch_to_device is True  # TensorFlow's default
    with pytest.raises(ValueError, match="disagree"):
        tf.distribute.InputOptions(experimental_fetch_to_device=True, experimental_prefetch_to_device=False)


def test_bad_dataset_arguments_are_value_errors(strategy):
    with pytest.raises(ValueError, match="Argument `options` must be a tf.distribute.InputOptions or None"):
        strategy.experimental_distribute_dataset(tf.data.Dataset.range(3), options={"prefetch": False})
    with pytest.raises(ValueError, match="Argument `dataset_fn` must be callable"):
        strategy.distribute_datasets_from_function(tf.data.Dataset.range(3))
    with pytest.raises(ValueError, match="A dataset must be an iterable of batches"):
        strategy.experimental_distribute_dataset(3)


def test_run_converts_the_step_with_autograph_inside_tf_function(strategy):
    def step(x):
        if tf.reduce_sum(x) > 0:  # a tensor condition: needs autograph, as TensorFlow's strategies apply it
            return x * 2
        return -x

    assert tf.function(lambda x: strategy.run(step, args=(x,)))(tf.constant([1, 2])).numpy().tolist() == [2, 4]
    assert tf.function(lambda x: strategy.run(step, args=(x,)))(tf.constant([-1])).numpy().tolist() == [1]


def test_reduce_and_the_strategy_functions(strategy):
    value = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    assert strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=0).numpy().tolist() == [4.0, 6.0]
    assert strategy.reduce(tf.distribute.ReduceOp.MEAN, value, axis=None) is value
    assert strategy.reduce("mean", np.array([1.0, 3.0]), axis=0) == 2.0
    with pytest.raises(ValueError, match="Argument `reduce_op` must be tf.distribute.ReduceOp.SUM or MEAN"):
        strategy.reduce("max", value, axis=0)
    assert tf.distribute.get_strategy() is tensorflow.distribute.get_strategy()  # outside: TensorFlow's default
    assert not tf.distribute.has_strategy()
    with strategy.scope():
        assert tf.distribute.get_strategy() is strategy and tf.distribute.has_strategy()
        assert tf.distribute.in_cross_replica_context()
        strategy.run(lambda: pytest.fail("never") if tf.distribute.in_cross_replica_context() else None)
    assert isinstance(strategy, shim.distribute.TPUStrategy)  # what the mid-level classes look for


def test_embeddings_made_in_the_scope_know_the_strategy(strategy):
    E = tf.tpu.experimental.embedding
    table = E.TableConfig(vocabulary_size=4, dim=2)
    with pytest.raises(RuntimeError, match="TPUEmbeddingV2 should be created under TPUStrategy"):
        E.TPUEmbeddingV2(feature_config=E.FeatureConfig(table=table), optimizer=E.SGD(0.1))
    with strategy.scope():
        embedding = E.TPUEmbedding(feature_config=E.FeatureConfig(table=table), optimizer=E.SGD(0.1))
    assert "under an emulated TPUStrategy" in repr(embedding) and repr(embedding).endswith("(TensorFlow bridge)")


# ---------------------------------------------------------------------------------------------
# CrossShardOptimizer
# ---------------------------------------------------------------------------------------------


def one_step(make_optimizer):
    """One minimize step of loss = sum(w * w) in a TF1 graph: (w after, global_step after)."""
    graph = tensorflow.Graph()
    with graph.as_default():
        w = tensorflow.compat.v1.get_variable("w", initializer=np.array([1.0, 2.0], np.float32))
        step = tensorflow.compat.v1.train.get_or_create_global_step()
        train_op = make_optimizer().minimize(tensorflow.reduce_sum(w * w), global_step=step)
        with tensorflow.compat.v1.Session() as session:
            session.run(tensorflow.compat.v1.global_variables_initializer())
            session.run(train_op)
            return session.run(w).tolist(), int(session.run(step))


def test_cross_shard_optimizer_over_one_replica_is_the_wrapped_optimizer():
    gradient_descent = lambda: tf.compat.v1.train.GradientDescentOptimizer(0.25)  # noqa: E731
    for reduction in (tf.compat.v1.losses.Reduction.MEAN, tf.compat.v1.losses.Reduction.SUM):
        assert (
            one_step(
                lambda reduction=reduction: tf.compat.v1.tpu.CrossShardOptimizer(
                    gradient_descent(), reduction=reduction
                )
            )
            == one_step(gradient_descent)
            == ([0.5, 1.0], 1)
        )
    # TensorFlow's own class puts a CrossReplicaSum op in the graph, which has no CPU kernel.
    with pytest.raises(tensorflow.errors.InvalidArgumentError, match="CrossReplicaSum"):
        one_step(lambda: tensorflow.compat.v1.tpu.CrossShardOptimizer(gradient_descent()))
    optimizer = tf.compat.v1.tpu.CrossShardOptimizer(gradient_descent())
    assert isinstance(optimizer, tensorflow.compat.v1.tpu.CrossShardOptimizer)
    assert optimizer.get_slot_names() == []


def test_cross_shard_optimizer_keeps_tensorflows_checks():
    with pytest.raises(ValueError, match="Argument `reduction` should be one of"):
        tf.compat.v1.tpu.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), reduction="none")
    with pytest.raises(TypeError, match="CrossShardOptimizer only works with tf.training.Optimizer"):
        tf.compat.v1.tpu.CrossShardOptimizer(tf.keras.optimizers.SGD(0.1))
    with pytest.raises(ValueError, match=r"must be a permutation of range\(1\)"):
        one_step(
            lambda: tf.compat.v1.tpu.CrossShardOptimizer(
                tf.compat.v1.train.GradientDescentOptimizer(0.1), group_assignment=[[0, 1]]
            )
        )
