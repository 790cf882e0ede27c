"""`tpu-embedding-shim checkpoint convert` against a real TensorFlow (2.15): an engine checkpoint converted to
TensorFlow's format is read and restored by TensorFlow; a checkpoint TensorFlow saved with the engine's names
converts back to an engine checkpoint with equal values.

Runs only where TensorFlow is installed (see __init__.py).
"""

import numpy as np
import pytest

tf = pytest.importorskip(
    "tensorflow", reason="the TensorFlow interop tests need TensorFlow (tensorflow-cpu==2.15.1 in a separate venv)"
)

from tpu_embedding_shim.cli import main  # noqa: E402
from tpu_embedding_shim.engine.checkpoint import latest_checkpoint, load_checkpoint  # noqa: E402
from tpu_embedding_shim.spec import AdagradSpec  # noqa: E402


def test_tensorflow_reads_and_restores_a_converted_engine_checkpoint(tmp_path, two_table_engine):
    engine = two_table_engine(AdagradSpec(learning_rate=0.5), users=7, items=5, item_table="towers/items")
    result = engine.forward({"u": np.array([[1, 4]]), "i": np.array([[2]])})
    engine.apply_gradients(result, {"u": np.ones((1, 3), np.float32), "i": np.ones((1, 2), np.float32)})
    path = engine.save(str(tmp_path / "engine"))
    assert main(["checkpoint", "convert", path, str(tmp_path / "tf") + "/"]) == 0

    state = engine.state()
    reader = tf.train.load_checkpoint(str(tmp_path / "tf"))
    assert reader.get_variable_to_dtype_map() == {
        "global_step": tf.int64,
        "users": tf.float32,
        "users/accumulators": tf.float32,
        "towers/items": tf.float32,
        "towers/items/accumulators": tf.float32,
    }
    assert reader.get_tensor("global_step") == 1
    for table, arrays in state.items():
        np.testing.assert_array_equal(reader.get_tensor(table), arrays["embedding"])
        np.testing.assert_array_equal(reader.get_tensor(f"{table}/accumulators"), arrays["accumulators"])

    graph = tf.Graph()
    with graph.as_default():
        v1 = tf.compat.v1
        partitioner = v1.fixed_size_partitioner(2)
        users = v1.get_variable("users", [7, 3], partitioner=partitioner)
        accumulators = v1.get_variable("users/accumulators", [7, 3])
        items = v1.get_variable("towers/items", [5, 2])
        items_acc = v1.get_variable("towers/items/accumulators", [5, 2])
        step = v1.train.get_or_create_global_step()
        saver = v1.train.Saver()
        with v1.Session() as session:
            saver.restore(session, tf.train.latest_checkpoint(str(tmp_path / "tf")))
            got = session.run(
                {"users": users.as_tensor(), "acc": accumulators, "items": items, "items_acc": items_acc, "step": step}
            )
    np.testing.assert_array_equal(got["users"], state["users"]["embedding"])
    np.testing.assert_array_equal(got["acc"], state["users"]["accumulators"])
    np.testing.assert_array_equal(got["items"], state["towers/items"]["embedding"])
    np.testing.assert_array_equal(got["items_acc"], state["towers/items"]["accumulators"])
    assert got["step"] == 1


def test_a_checkpoint_tensorflow_saved_with_the_engines_names_converts_to_an_engine_checkpoint(tmp_path):
    table = np.arange(12, dtype=np.float32).reshape(6, 2) / 8
    momenta, velocities = table + 1, table + 2
    graph = tf.Graph()
    with graph.as_default():
        v1 = tf.compat.v1
        partitioner = v1.fixed_size_partitioner(3)  # stored as slices: the reader assembles them
        items = v1.get_variable("items", [6, 2], partitioner=partitioner)
        v1.get_variable("items/momenta", initializer=momenta)
        v1.get_variable("items/velocities", initializer=velocities)
        step = v1.train.get_or_create_global_step()
        saver = v1.train.Saver()
        with v1.Session() as session:
            session.run(v1.global_variables_initializer())
            session.run(step.assign(40))
            for part in items:
                start = part._get_save_slice_info().var_offset[0]
                session.run(part.assign(table[start : start + part.shape[0]]))
            prefix = saver.save(session, str(tmp_path / "tf" / "model.ckpt"), global_step=40)
    assert main(["checkpoint", "convert", prefix, str(tmp_path / "engine")]) == 0
    state, got_step, _ = load_checkpoint(latest_checkpoint(str(tmp_path / "engine")))
    assert got_step == 40 and sorted(state) == ["items"]
    np.testing.assert_array_equal(state["items"]["embedding"], table)
    np.testing.assert_array_equal(state["items"]["momenta"], momenta)
    np.testing.assert_array_equal(state["items"]["velocities"], velocities)
