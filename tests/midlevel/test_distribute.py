"""The in-process CPU stand-in for tf.distribute.TPUStrategy and the TPU set-up calls."""

from __future__ import annotations

import numpy as np
import pytest

import tpu_embedding_shim as tf


def test_it_says_it_emulates():
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="grpc://10.0.0.1:8470")
    strategy = tf.distribute.TPUStrategy(resolver)
    for thing in (resolver, strategy, tf.tpu.experimental.initialize_tpu_system(resolver)):
        assert "emulation" in repr(thing)
    assert "emulated in-process on the CPU" in tf.distribute.TPUStrategy.__doc__
    assert (
        strategy.cluster_resolver is resolver and resolver.master() == "" and resolver.num_accelerators() == {"TPU": 0}
    )
    assert tf.distribute.experimental.TPUStrategy is tf.distribute.TPUStrategy


def test_setup_calls_are_no_ops():
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver.connect(tpu="local")
    assert tf.config.experimental_connect_to_cluster(resolver) is None
    tf.tpu.experimental.shutdown_tpu_system(resolver)
    assert tf.config.list_logical_devices("TPU") == []
    assert [d.device_type for d in tf.config.list_logical_devices()] == ["CPU"]


def test_scope_run_and_replica_context():
    strategy = tf.distribute.TPUStrategy()
    assert not tf.distribute.has_strategy() and tf.distribute.in_cross_replica_context()
    assert strategy.num_replicas_in_sync == 1
    with strategy.scope():
        assert tf.distribute.get_strategy() is strategy and tf.distribute.get_replica_context() is None

        def step(x, scale=1):
            assert not tf.distribute.in_cross_replica_context()
            context = tf.distribute.get_replica_context()
            return x * scale + context.replica_id_in_sync_group

        assert strategy.run(step, args=(np.array([1, 2]),), kwargs={"scale": 3}).tolist() == [3, 6]
    assert tf.distribute.get_strategy() is not strategy
    with pytest.raises(ValueError, match="callable"):
        strategy.run(3)


def test_datasets_are_any_iterables_of_batches():
    strategy = tf.distribute.TPUStrategy()
    options = tf.distribute.InputOptions(experimental_fetch_to_device=False)
    dataset = strategy.experimental_distribute_dataset([(1, "a"), (2, "b")], options=options)
    iterator = iter(dataset)
    assert next(iterator) == (1, "a") and iterator.get_next() == (2, "b")
    with pytest.raises(StopIteration):
        next(iterator)

    contexts = []

    def dataset_fn(context):
        contexts.append(context)
        return (np.full(context.get_per_replica_batch_size(4), i) for i in range(3))

    for distribute in (
        strategy.experimental_distribute_datasets_from_function,
        strategy.distribute_datasets_from_function,
    ):
        batches = list(
            iter(distribute(dataset_fn, options=tf.distribute.InputOptions(experimental_prefetch_to_device=False)))
        )
        assert [b.tolist() for b in batches] == [[0] * 4, [1] * 4, [2] * 4]
    assert contexts[0].num_replicas_in_sync == 1 and contexts[0].input_pipeline_id == 0
    with pytest.raises(ValueError, match="iterable"):
        strategy.experimental_distribute_dataset(3)


def test_input_options_are_checked():
    with pytest.raises(ValueError, match="experimental_fetch_to_device"):
        tf.distribute.InputOptions(experimental_fetch_to_device="no")
    with pytest.raises(ValueError, match="replication_mode"):
        tf.distribute.InputOptions(experimental_replication_mode="PER_REPLICA")
    options = tf.distribute.InputOptions(experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA)
    assert "PER_REPLICA" in repr(options)


def test_reduce_gather_and_local_results():
    strategy = tf.distribute.TPUStrategy()
    value = np.array([[1.0, 2.0], [3.0, 4.0]])
    assert strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None) is value
    assert strategy.reduce("mean", value, axis=0).tolist() == [2.0, 3.0]
    assert strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=1).tolist() == [3.0, 7.0]
    assert strategy.experimental_local_results(value)[0] is value
    assert strategy.gather(value, axis=0) is value
    assert strategy.experimental_distribute_values_from_function(lambda ctx: ctx.replica_id_in_sync_group) == 0


def test_function_and_range_stand_ins():
    @tf.function
    def f(x):
        return x + 1

    @tf.function(jit_compile=True)
    def g(x):
        return x * 2

    assert f(1) == 2 and g(2) == 4
    assert list(tf.range(3)) == [0, 1, 2] and list(tf.range(1, 7, 2)) == [1, 3, 5]


def test_namespaces():
    assert tf.compat.v1.train.Checkpoint is tf.train.Checkpoint
    assert tf.compat.v1.distribute.TPUStrategy is tf.distribute.TPUStrategy
    assert tf.compat.v2.config.experimental_connect_to_cluster is tf.config.experimental_connect_to_cluster
    names = ("TPUEmbedding", "TPUEmbeddingV2", "TPUEmbeddingForServing", "serving_embedding_lookup")
    assert all(hasattr(tf.tpu.experimental.embedding, name) for name in names)
