"""The TrackableObjectGraph proto by hand: round trips, TensorFlow's bytes, numbering, keys, escaping.

The graphs under tests/fixtures/tf_checkpoints/ were written by TensorFlow
2.15 (make_fixtures.py, make_midlevel_fixtures.py): decoding and encoding
them again must give TensorFlow's bytes, and building the same objects
must give the same graph.
"""

import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpu_embedding_shim.engine.tf_bundle import BundleReader, read_state
from tpu_embedding_shim.engine.tf_bundle.object_graph import (
    OBJECT_GRAPH_KEY,
    Node,
    ObjectReference,
    RegisteredSaver,
    SerializedTensor,
    SlotVariableReference,
    TrackableObject,
    TrackableObjectGraph,
    build_graph,
    checkpoint_key,
    escape_local_name,
    unescape_local_name,
)
from tpu_embedding_shim.engine.tf_bundle.wire import WireError

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "tf_checkpoints"
TF_WRITTEN = ["tf2_object", "midlevel_tpu_embedding", "midlevel_serving"]

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


def tf_graph_bytes(directory):
    reader = BundleReader(read_state(FIXTURES / directory).model_checkpoint_path)
    return bytes(reader.read(OBJECT_GRAPH_KEY)[()])


@st.composite
def graphs(draw):
    count = draw(st.integers(1, 6))
    ids = st.integers(0, count - 1)
    nodes = []
    for _ in range(count):
        saver = draw(st.none() | st.builds(RegisteredSaver, text, text))
        nodes.append(
            TrackableObject(
                children=tuple(draw(st.lists(st.builds(ObjectReference, ids, text), max_size=3))),
                attributes=tuple(draw(st.lists(st.builds(SerializedTensor, text, text, text), max_size=2))),
                slot_variables=tuple(draw(st.lists(st.builds(SlotVariableReference, ids, text, ids), max_size=2))),
                registered_saver=saver,
                has_checkpoint_values=draw(st.sampled_from([None, True, False])),
            )
        )
    return TrackableObjectGraph(tuple(nodes))


@settings(max_examples=200, deadline=None)
@given(graphs())
def test_encode_decode_round_trip(graph):
    data = graph.encode()
    assert TrackableObjectGraph.decode(data) == graph
    assert TrackableObjectGraph.decode(data).encode() == data


@pytest.mark.parametrize("directory", TF_WRITTEN)
def test_tensorflows_graphs_are_reencoded_byte_for_byte(directory):
    data = tf_graph_bytes(directory)
    graph = TrackableObjectGraph.decode(data)
    assert graph.encode() == data
    assert graph.nodes[0].has_checkpoint_values is True
    reader = BundleReader(read_state(FIXTURES / directory).model_checkpoint_path)
    keys = {a.checkpoint_key for node in graph.nodes for a in node.attributes}
    assert keys == set(reader.names()) - {OBJECT_GRAPH_KEY}  # every key is in the bundle, and only those
    # Each key is the escaped first path to its node.
    for node, path in zip(graph.nodes, graph.paths()):
        for attribute in node.attributes:
            assert attribute.checkpoint_key == checkpoint_key(path, attribute.name)


def test_the_tpu_embedding_node_has_tensorflows_registered_saver():
    graph = TrackableObjectGraph.decode(tf_graph_bytes("midlevel_tpu_embedding"))
    embedding = graph.resolve(["embedding"])
    assert graph.nodes[embedding].registered_saver == RegisteredSaver("tf.TPUEmbeddingCallback", "embedding")
    config = graph.resolve(["embedding", "_feature_config"])
    assert graph.nodes[config].has_checkpoint_values is False
    assert graph.resolve(["embedding", "_variables", "users/x", "linears"]) == graph.resolve(
        ["embedding", "users/x/linears"]
    )
    serving = TrackableObjectGraph.decode(tf_graph_bytes("midlevel_serving"))
    assert serving.nodes[serving.resolve(["embedding"])].registered_saver is None


def test_building_tensorflows_tf2_object_graph_gives_its_bytes():
    # make_fixtures.tf2_object: Checkpoint(tower=Tower(), table=..., step=..., words=...), Tower holding `kernel` and
    # a dict `layers` {'out': ...}; TensorFlow sorts the keyword arguments and adds save_counter last.
    root = Node()
    for name in ("step", "table"):
        root.add(name, Node.variable("Variable", name))
    tower = root.add("tower", Node())
    tower.add("kernel", Node.variable("Variable", "kernel"))
    tower.add("layers", Node()).add("out", Node.variable("Variable", "out"))
    root.add("words", Node.variable("Variable", "words"))
    root.add("save_counter", Node.variable("save_counter", "counter"))
    graph, values = build_graph(root)
    assert graph.encode() == tf_graph_bytes("tf2_object")
    assert values["tower/layers/out/.ATTRIBUTES/VARIABLE_VALUE"] == "out"


def test_numbering_is_breadth_first_and_shared_nodes_are_one_node():
    root = Node()
    a = root.add("a", Node())
    b = root.add("b", Node())
    leaf = a.add("x", Node.variable("x", 1))
    b.add("same", leaf)  # reached a second way: one node, keyed by its first path
    root.add("self", root)
    graph, values = build_graph(root)
    assert [[(c.node_id, c.local_name) for c in n.children] for n in graph.nodes] == [
        [(1, "a"), (2, "b"), (0, "self")],
        [(3, "x")],
        [(3, "same")],
        [],
    ]
    assert values == {"a/x/.ATTRIBUTES/VARIABLE_VALUE": 1}
    assert [n.has_checkpoint_values for n in graph.nodes] == [True, True, True, True]
    empty, _ = build_graph(Node())
    assert empty.nodes[0].has_checkpoint_values is False


def test_has_checkpoint_values_follows_savers_and_slots_upwards():
    root = Node()
    root.add("plain", Node())
    root.add("saver", Node(registered_saver="tf.Saver")).add("below", Node())
    graph, _ = build_graph(root)
    assert [n.has_checkpoint_values for n in graph.nodes] == [True, False, True, False]
    assert graph.nodes[2].registered_saver == RegisteredSaver("tf.Saver", "saver")


def test_duplicate_names_and_keys_are_refused():
    root = Node()
    root.add("a", Node())
    with pytest.raises(ValueError, match="'a'"):
        root.add("a", Node())
    twice = Node([("VARIABLE_VALUE", "v", 1), ("VARIABLE_VALUE", "v", 2)])
    with pytest.raises(ValueError, match="key"):
        build_graph(twice)


@given(st.text(max_size=20))
def test_escaping_round_trips_and_never_leaves_a_slash(name):
    escaped = escape_local_name(name)
    assert "/" not in escaped
    assert unescape_local_name(escaped) == name


def test_escaping_is_tensorflows():
    # Keys TensorFlow 2.15 wrote for tables 'items.v2' and 'users/x' (midlevel_tpu_embedding).
    assert (
        checkpoint_key(["embedding", "items.v2/accumulators"])
        == "embedding/items..v2.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE"
    )
    assert checkpoint_key(["embedding", "users/x"]) == "embedding/users.Sx/.ATTRIBUTES/VARIABLE_VALUE"
    assert checkpoint_key([]) == "/.ATTRIBUTES/VARIABLE_VALUE"
    with pytest.raises(ValueError, match="followed by"):
        unescape_local_name("a.b")


def test_bad_bytes_are_wire_errors():
    with pytest.raises(WireError):
        TrackableObjectGraph.decode(b"\x0a\x05\x0a")  # a node that runs past the end
    dangling = TrackableObjectGraph((TrackableObject(children=(ObjectReference(3, "x"),)),)).encode()
    with pytest.raises(WireError, match="node 3"):
        TrackableObjectGraph.decode(dangling)
    with pytest.raises(WireError, match="UTF-8"):
        TrackableObjectGraph.decode(
            TrackableObjectGraph((TrackableObject(children=(ObjectReference(0, "x"),)),))
            .encode()
            .replace(b"x", b"\xff")
        )


def test_lookups():
    graph, _ = build_graph(_tree())
    assert graph.resolve([]) == 0 and graph.resolve(["m", "w"]) == 2 and graph.resolve(["m", "nope"]) is None
    assert graph.attribute(2).full_name == "w" and graph.attribute(1) is None
    assert graph.paths() == [(), ("m",), ("m", "w")]
    assert TrackableObjectGraph().resolve([]) is None


def _tree():
    root = Node()
    root.add("m", Node()).add("w", Node.variable("w", 0))
    return root
