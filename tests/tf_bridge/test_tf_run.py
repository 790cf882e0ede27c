"""`FixedRun` (runner/tf_run.py): a training step's session run, worked out once, as `Session.run` runs it."""

import numpy as np
import pytest
import tensorflow as tf

from tpu_embedding_shim.runner.tf_run import FixedRun


def _graph():
    """A graph with float, int and string placeholders, a variable and an op that changes it."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        ids = tf.compat.v1.placeholder(tf.int64, [None], name="ids")
        words = tf.compat.v1.placeholder(tf.string, [None], name="words")
        v = tf.compat.v1.get_variable("v", initializer=tf.zeros([3]))
        total = tf.reduce_sum(x, 0) + tf.cast(tf.reduce_sum(ids), tf.float32)
        length = tf.strings.length(words)
        update = tf.compat.v1.assign_add(v, tf.reduce_sum(x, 0)).op
        with tf.control_dependencies([update]):
            after = tf.identity(v.read_value())
        init = tf.compat.v1.global_variables_initializer()
    graph.finalize()
    session = tf.compat.v1.Session(graph=graph)
    session.run(init)
    return session, (x, ids, words), (update, after, total, length), v


def test_the_same_values_as_session_run_and_the_op_runs_once_per_call():
    session, placeholders, fetches, _ = _graph()
    run = FixedRun.for_session(session, list(fetches), list(placeholders))
    assert run is not None
    values = (np.ones((2, 3), np.float64), [1, 2], np.array(["ab", "c"]))  # converted as Session.run converts
    got = run(values)
    assert got[0] is None  # an op: run, nothing fetched
    np.testing.assert_array_equal(got[1], [2.0, 2.0, 2.0])  # the variable after one update
    want = session.run(list(fetches), dict(zip(placeholders, values)))
    np.testing.assert_array_equal(want[1], [4.0, 4.0, 4.0])  # and a second one
    for mine, theirs in zip(got[2:], want[2:]):
        np.testing.assert_array_equal(mine, theirs)
        assert mine.dtype == theirs.dtype


@pytest.mark.parametrize(
    "values",
    [
        (np.ones((2, 4), np.float32), [1], np.array(["a"])),  # [2, 4] into [None, 3]
        (np.ones((2, 3), np.float32), [[1]], np.array(["a"])),  # rank 2 into [None]
    ],
)
def test_a_badly_shaped_feed_is_session_runs_error_and_runs_nothing(values):
    session, placeholders, fetches, v = _graph()
    run = FixedRun.for_session(session, list(fetches), list(placeholders))
    with pytest.raises(ValueError) as theirs:
        session.run(list(fetches), dict(zip(placeholders, values)))
    with pytest.raises(ValueError) as mine:
        run(values)
    assert str(mine.value) == str(theirs.value)
    np.testing.assert_array_equal(session.run(v), np.zeros(3))  # nothing ran


def test_a_value_that_is_not_of_the_placeholders_type_is_session_runs_error():
    session, placeholders, fetches, _ = _graph()
    run = FixedRun.for_session(session, list(fetches), list(placeholders))
    values = (np.array([["a", "b", "c"]]), [1], np.array(["a"]))  # strings into float32
    with pytest.raises(ValueError) as theirs:
        session.run(list(fetches), dict(zip(placeholders, values)))
    with pytest.raises(ValueError) as mine:
        run(values)
    assert type(mine.value) is type(theirs.value)


def test_an_error_of_the_run_itself_is_tensorflows_own_type():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None])
        checked = tf.debugging.check_numerics(x, "x is not finite")
    session = tf.compat.v1.Session(graph=graph)
    run = FixedRun.for_session(session, [checked], [x])
    with pytest.raises(tf.errors.InvalidArgumentError, match="x is not finite"):
        run([np.array([np.nan], np.float32)])


def test_fetches_or_feeds_that_are_not_plain_tensors_or_ops_are_left_to_session_run():
    session, placeholders, fetches, v = _graph()
    assert FixedRun.for_session(session, [v], list(placeholders)) is None
    other = tf.Graph()
    with other.as_default():
        elsewhere = tf.constant(1.0)
        op_elsewhere = tf.no_op()
    assert FixedRun.for_session(session, [elsewhere], list(placeholders)) is None
    assert FixedRun.for_session(session, [op_elsewhere], list(placeholders)) is None
    with pytest.raises(ValueError, match="strict|length|argument"):  # one value per placeholder, no fewer
        FixedRun.for_session(session, list(fetches), list(placeholders))([np.ones((1, 3))])


def test_a_placeholder_no_fetch_reads_is_checked_as_session_run_checks_it():
    """A feed that no fetch depends on is not handed to TensorFlow, but a bad value is still Session.run's error."""
    session, placeholders, fetches, v = _graph()
    x, ids, _ = placeholders
    run = FixedRun.for_session(session, [fetches[0], fetches[1]], [x, ids])  # the update reads x, not ids
    np.testing.assert_array_equal(run((np.ones((2, 3)), [7]))[1], [2.0, 2.0, 2.0])
    with pytest.raises(ValueError) as theirs:
        session.run([fetches[0], fetches[1]], {x: np.ones((2, 3)), ids: [[7]]})
    with pytest.raises(ValueError) as mine:
        run((np.ones((2, 3)), [[7]]))
    assert str(mine.value) == str(theirs.value)
    np.testing.assert_array_equal(session.run(v), [2.0, 2.0, 2.0])  # only the first call's update ran
