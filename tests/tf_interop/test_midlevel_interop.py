"""The mid-level API's checkpoints both ways against a real TensorFlow (2.15): `tf.train.Checkpoint` of an embedding
written here restores into TensorFlow's `TPUEmbeddingForServing` / `TPUEmbedding`, and TensorFlow's restore here.

Runs only where TensorFlow is installed (see __init__.py).
"""

import os

import numpy as np
import pytest

tf = pytest.importorskip(
    "tensorflow", reason="the TensorFlow interop tests need TensorFlow (tensorflow-cpu==2.15.1 in a separate venv)"
)

import tpu_embedding_shim as shim  # noqa: E402
from tpu_embedding_shim.engine.tf_bundle import BundleReader  # noqa: E402
from tpu_embedding_shim.engine.tf_bundle.object_graph import OBJECT_GRAPH_KEY  # noqa: E402

TF, SHIM = tf.tpu.experimental.embedding, shim.tpu.experimental.embedding
OPTIMIZERS = ["SGD", "Adagrad", "AdagradMomentum", "Adam", "FTRL"]


def optimizer(module, name):
    return {
        "SGD": lambda: module.SGD(0.1),
        "Adagrad": lambda: module.Adagrad(0.1),
        "AdagradMomentum": lambda: module.AdagradMomentum(0.1, momentum=0.5),
        "Adam": lambda: module.Adam(0.1),
        "FTRL": lambda: module.FTRL(0.1),
    }[name]()


def config(module, second="FTRL"):
    """Two tables (one with its own optimizer, names with '.' and '/'), a nested feature config."""
    items = module.TableConfig(vocabulary_size=7, dim=3, name="items.v2")
    users = module.TableConfig(vocabulary_size=5, dim=2, name="users/x", optimizer=optimizer(module, second))
    return {
        "hist": [module.FeatureConfig(table=items)],
        "item": module.FeatureConfig(table=items),
        "user": {"id": module.FeatureConfig(table=users)},
    }


def tf_variables(embedding):
    """{table name: {slot or 'parameters': numpy}} of a TensorFlow mid-level object."""
    return {table: {slot: v.numpy() for slot, v in slots.items()} for table, slots in embedding._variables.items()}


def shim_variables(embedding):
    return {table.name: slots for table, slots in embedding.variables.items()}


def assert_equal_variables(a, b):
    assert sorted(a) == sorted(b)
    for table in a:
        assert sorted(a[table]) == sorted(b[table]), table
        for slot in a[table]:
            np.testing.assert_array_equal(a[table][slot], b[table][slot], err_msg=f"{table}/{slot}")


def trained_shim(name, cls=None):
    cls = cls or SHIM.TPUEmbedding
    if cls is SHIM.TPUEmbeddingV2:
        with shim.distribute.TPUStrategy().scope():
            embedding = cls(config(SHIM), optimizer=optimizer(SHIM, name))
    else:
        embedding = cls(config(SHIM), optimizer=optimizer(SHIM, name))
    rng = np.random.default_rng(0)
    features = {
        "hist": [np.array([1, 6, 2, 2])],
        "item": np.array([0, 3, 3, 5]),
        "user": {"id": np.array([4, 1, 0, 4])},
    }
    for _ in range(3):
        if cls is SHIM.TPUEmbeddingV2:
            activations, preserved = embedding(features)
            embedding.apply_gradients(shim_gradients(activations, rng), preserved)
        else:
            embedding.enqueue(features)
            embedding.apply_gradients(shim_gradients(embedding.dequeue(), rng))
    return embedding


def shim_gradients(activations, rng):
    return {
        "hist": [rng.normal(size=activations["hist"][0].shape).astype(np.float32)],
        "item": rng.normal(size=activations["item"].shape).astype(np.float32),
        "user": {"id": rng.normal(size=activations["user"]["id"].shape).astype(np.float32)},
    }


@pytest.mark.parametrize("name", OPTIMIZERS)
@pytest.mark.parametrize("cls", ["TPUEmbedding", "TPUEmbeddingV2"])
def test_tensorflow_restores_ours(tmp_path, name, cls):
    ours = trained_shim(name, getattr(SHIM, cls))
    model = {"w": np.arange(3, dtype=np.float32)}
    path = shim.train.Checkpoint(embedding=ours, model=model).save(str(tmp_path / "ckpt"))
    assert tf.train.latest_checkpoint(str(tmp_path)) == path
    expected = shim_variables(ours)

    # TensorFlow's serving object, with the training optimizer: tables and slots; without one: tables only.
    serving = TF.TPUEmbeddingForServing(config(TF), optimizer(TF, name))
    w = tf.Variable(np.zeros(3, np.float32))
    status = tf.train.Checkpoint(embedding=serving, model={"w": w}).restore(path)
    serving.build()
    status.assert_consumed()
    assert_equal_variables(tf_variables(serving), expected)
    np.testing.assert_array_equal(w.numpy(), model["w"])
    tables_only = TF.TPUEmbeddingForServing(config(TF), None)
    status = tf.train.Checkpoint(embedding=tables_only).restore(path)
    tables_only.build()
    status.assert_existing_objects_matched()
    for table, value in tables_only.embedding_tables.items():
        np.testing.assert_array_equal(value.numpy(), expected[table.name]["parameters"])

    # TensorFlow's CPU TPUEmbedding (restored on build).
    embedding = TF.TPUEmbedding(config(TF), optimizer=optimizer(TF, name))
    status = tf.train.Checkpoint(embedding=embedding, model={"w": w}).restore(path)
    embedding.build()
    status.assert_consumed()
    assert_equal_variables(tf_variables(embedding), expected)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_our_object_graph_is_tensorflows(tmp_path, name):
    embedding = TF.TPUEmbedding(config(TF), optimizer=optimizer(TF, name))
    embedding.build()
    theirs = tf.train.Checkpoint(embedding=embedding, model={"w": tf.Variable(np.zeros(3, np.float32))}).save(
        str(tmp_path / "tf" / "ckpt")
    )
    ours = shim.train.Checkpoint(
        embedding=SHIM.TPUEmbedding(config(SHIM), optimizer=optimizer(SHIM, name)), model={"w": np.zeros(3, np.float32)}
    ).save(str(tmp_path / "ours" / "ckpt"))
    reader = tf.train.load_checkpoint(theirs)
    assert BundleReader(ours).read(OBJECT_GRAPH_KEY)[()] == reader.get_tensor(OBJECT_GRAPH_KEY)
    ours_shapes = tf.train.load_checkpoint(ours).get_variable_to_shape_map()
    assert ours_shapes == {
        **reader.get_variable_to_shape_map(),
        "embedding/.ATTRIBUTES/TPU_EMBEDDING_SHIM_global_step": [],
    }


@pytest.mark.parametrize("name", OPTIMIZERS)
@pytest.mark.parametrize("cls", ["TPUEmbedding", "TPUEmbeddingForServing", "TPUEmbeddingV2"])
def test_we_restore_tensorflows(tmp_path, name, cls):
    embedding = TF.TPUEmbedding(config(TF), optimizer=optimizer(TF, name))
    embedding.build()
    rng = np.random.default_rng(1)
    for slots in embedding._variables.values():
        for variable in slots.values():
            variable.assign(rng.normal(size=variable.shape).astype(np.float32))
    w = tf.Variable(rng.normal(size=4))
    tf.train.Checkpoint(embedding=embedding, model={"w": w}).save(str(tmp_path / "ckpt"))
    if cls == "TPUEmbeddingV2":
        with shim.distribute.TPUStrategy().scope():
            ours = SHIM.TPUEmbeddingV2(config(SHIM), optimizer=optimizer(SHIM, name))
    elif cls == "TPUEmbeddingForServing":
        ours = SHIM.TPUEmbeddingForServing(config(SHIM), optimizer(SHIM, name))
    else:
        ours = SHIM.TPUEmbedding(config(SHIM), optimizer=optimizer(SHIM, name))
    model = {"w": np.zeros(4)}
    shim.train.Checkpoint(embedding=ours, model=model).restore(
        shim.train.latest_checkpoint(str(tmp_path))
    ).assert_consumed()
    assert_equal_variables(shim_variables(ours), tf_variables(embedding))
    np.testing.assert_array_equal(model["w"], w.numpy())


def test_checkpoint_managers_read_each_others_directories(tmp_path):
    ours = trained_shim("Adam")
    manager = shim.train.CheckpointManager(shim.train.Checkpoint(embedding=ours), str(tmp_path / "ours"), max_to_keep=2)
    paths = [manager.save() for _ in range(3)]
    serving = TF.TPUEmbeddingForServing(config(TF), optimizer(TF, "Adam"))
    checkpoint = tf.train.Checkpoint(embedding=serving)
    theirs = tf.train.CheckpointManager(checkpoint, str(tmp_path / "ours"), max_to_keep=2)
    assert theirs.checkpoints == paths[1:] and theirs.latest_checkpoint == paths[2]
    assert theirs.restore_or_initialize() == paths[2]
    serving.build()
    assert int(checkpoint.save_counter) == 3
    assert_equal_variables(tf_variables(serving), shim_variables(ours))
    assert theirs.save().endswith("ckpt-4")  # TensorFlow continues our directory, and we continue its
    again = shim.train.CheckpointManager(
        shim.train.Checkpoint(embedding=trained_shim("Adam")), str(tmp_path / "ours"), max_to_keep=2
    )
    assert again.checkpoints == paths[2:] + [str(tmp_path / "ours" / "ckpt-4")]
    assert again.restore_or_initialize() == str(tmp_path / "ours" / "ckpt-4")
    assert os.path.basename(again.save()) == "ckpt-5"
    assert theirs.checkpoints == paths[2:] + [str(tmp_path / "ours" / "ckpt-4")]
    assert tf.train.latest_checkpoint(str(tmp_path / "ours")).endswith("ckpt-5")


def test_numpy_objects_and_a_root_match_tensorflows_variables(tmp_path):
    class Module(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(np.arange(3.0))
            self.layers = {"out": tf.Variable(np.ones((2, 2), np.float32))}

    path = tf.train.Checkpoint(root=Module(), extra=[tf.Variable(5), tf.Variable(np.float32(0.5))]).save(
        str(tmp_path / "tf" / "ckpt")
    )
    root = {"w": np.zeros(3), "layers": {"out": np.zeros((2, 2), np.float32)}}
    extra = [np.zeros((), np.int32), np.zeros((), np.float32)]
    shim.train.Checkpoint(root=root, extra=extra).restore(path).assert_consumed()
    assert root["w"].tolist() == [0.0, 1.0, 2.0] and root["layers"]["out"].sum() == 4 and extra[0] == 5
    ours = shim.train.Checkpoint(root=root, extra=extra).save(str(tmp_path / "ours" / "ckpt"))
    module = Module()
    module.w.assign(np.zeros(3))
    tf_extra = [tf.Variable(0), tf.Variable(np.float32(0))]
    # (TensorFlow 2.15's status.assert_consumed() fails with a root object even on its own checkpoints.)
    tf.train.Checkpoint(root=module, extra=tf_extra).restore(ours)
    assert module.w.numpy().tolist() == [0.0, 1.0, 2.0] and int(tf_extra[0].numpy()) == 5
    assert BundleReader(ours).read(OBJECT_GRAPH_KEY)[()] == tf.train.load_checkpoint(path).get_tensor(OBJECT_GRAPH_KEY)


def test_both_refuse_a_table_of_another_shape(tmp_path):
    path = shim.train.Checkpoint(embedding=trained_shim("SGD")).save(str(tmp_path / "ckpt"))
    other = TF.TPUEmbeddingForServing(
        {"f": TF.FeatureConfig(table=TF.TableConfig(vocabulary_size=8, dim=3, name="items.v2"))}, None
    )
    other.build()
    with pytest.raises(ValueError, match="incompatible tensor with shape"):
        tf.train.Checkpoint(embedding=other).restore(path)
    ours = SHIM.TPUEmbeddingForServing(
        {"f": SHIM.FeatureConfig(table=SHIM.TableConfig(vocabulary_size=8, dim=3, name="items.v2"))}, None
    )
    with pytest.raises(ValueError, match="incompatible tensor with shape"):
        shim.train.Checkpoint(embedding=ours).restore(path)
