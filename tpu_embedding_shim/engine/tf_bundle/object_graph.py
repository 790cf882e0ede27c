"""The object graph of a TF2 object-based checkpoint (`TrackableObjectGraph`), by hand.

A `tf.train.Checkpoint` stores, beside its tensors, the string tensor
`_CHECKPOINTABLE_OBJECT_GRAPH`: a serialized `TrackableObjectGraph` proto
(tensorflow/core/protobuf/trackable_object_graph.proto) listing every
object reachable from the root, breadth first (node 0 is the root):

- `nodes` 1: each a TrackableObject:
  - `children` 1: ObjectReference {`node_id` 1, `local_name` 2};
  - `attributes` 2: SerializedTensor {`name` 1 ('VARIABLE_VALUE'),
    `full_name` 2 (the variable's name), `checkpoint_key` 3 (the tensor's
    key in the bundle)};
  - `slot_variables` 3: SlotVariableReference {`original_variable_node_id`
    1, `slot_name` 2, `slot_variable_node_id` 3} (optimizer slots);
  - `registered_saver` 4: RegisteredSaver {`name` 1, `object_name` 2};
  - `has_checkpoint_values` 5: a google.protobuf.BoolValue {`value` 1},
    always written (empty for False).

A tensor's key is the escaped local names of the first (breadth-first)
path to its object, joined by '/', then `/.ATTRIBUTES/<attribute>`:
`embedding/items.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE` is attribute
VARIABLE_VALUE of child `items/accumulators` of child `embedding` ('.'
is escaped as '..' and '/' as '.S').

`build_graph` numbers a tree of `Node`s as TensorFlow does and computes
every key and `has_checkpoint_values`; `encode` writes what TensorFlow's
protobuf serializer writes, byte for byte (fields in number order,
defaults left out), which tests/engine/test_object_graph.py checks on
graphs TensorFlow 2.15 wrote.

>>> root = Node()
>>> table = root.add("embedding", Node()).add("items/accumulators", Node.variable("items/accumulators", "v"))
>>> graph, values = build_graph(root)
>>> values
{'embedding/items.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE': 'v'}
>>> TrackableObjectGraph.decode(graph.encode()) == graph
True
>>> graph.resolve(["embedding", "items/accumulators"]), graph.nodes[2].attributes[0].full_name
(2, 'items/accumulators')
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from .wire import WireError, as_int32, field_bytes, field_varint, iter_fields

__all__ = [
    "OBJECT_GRAPH_KEY",
    "VARIABLE_VALUE",
    "ObjectReference",
    "SerializedTensor",
    "SlotVariableReference",
    "RegisteredSaver",
    "TrackableObject",
    "TrackableObjectGraph",
    "Node",
    "build_graph",
    "escape_local_name",
    "unescape_local_name",
    "checkpoint_key",
]

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
"""The bundle key of the serialized object graph (a scalar string tensor)."""

VARIABLE_VALUE = "VARIABLE_VALUE"
"""The attribute name of a variable's value."""

_ATTRIBUTES = ".ATTRIBUTES"


def escape_local_name(name: str) -> str:
    """A local name as it appears in a key: '.' -> '..', '/' -> '.S' (TensorFlow's escaping)."""
    return name.replace(".", "..").replace("/", ".S")


def unescape_local_name(escaped: str) -> str:
    """The local name an escaped key component stands for.

    Raises:
      ValueError: a '.' followed by neither '.' nor 'S'.
    """
    out, i = [], 0
    while i < len(escaped):
        char = escaped[i]
        if char != ".":
            out.append(char)
            i += 1
            continue
        following = escaped[i + 1 : i + 2]
        if following == ".":
            out.append(".")
        elif following == "S":
            out.append("/")
        else:
            raise ValueError(f"{escaped!r}: '.' at position {i} is followed by {following!r}, not '.' or 'S'")
        i += 2
    return "".join(out)


def checkpoint_key(path: Sequence[str], attribute: str = VARIABLE_VALUE) -> str:
    """The bundle key of `attribute` of the object at `path` (local names from the root).

    >>> checkpoint_key(["model", "w"])
    'model/w/.ATTRIBUTES/VARIABLE_VALUE'
    """
    prefix = "/".join(escape_local_name(name) for name in path)
    return f"{prefix}/{_ATTRIBUTES}/{escape_local_name(attribute)}"


# The messages ------------------------------------------------------------------------------


def _text(value: Any, what: str) -> str:
    if not isinstance(value, bytes):
        raise WireError(f"{what} is a varint, expected a string")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise WireError(f"{what} is not valid UTF-8") from None


def _message(value: Any, what: str) -> bytes:
    if not isinstance(value, bytes):
        raise WireError(f"{what} is a varint, expected a message")
    return value


def _string_field(number: int, value: str) -> bytes:
    return field_bytes(number, value.encode("utf-8")) if value else b""


def _int_field(number: int, value: int) -> bytes:
    return field_varint(number, value) if value else b""


@dataclasses.dataclass(frozen=True)
class ObjectReference:
    """An edge: the child's node id and its name in the parent."""

    node_id: int
    local_name: str

    def encode(self) -> bytes:
        return _int_field(1, self.node_id) + _string_field(2, self.local_name)

    @classmethod
    def decode(cls, data: bytes) -> ObjectReference:
        node_id, name = 0, ""
        for number, value in iter_fields(data):
            if number == 1:
                node_id = as_int32(value)
            elif number == 2:
                name = _text(value, "ObjectReference.local_name")
        return cls(node_id, name)


@dataclasses.dataclass(frozen=True)
class SerializedTensor:
    """One saved value of an object: its attribute name, the variable's name, its bundle key."""

    name: str
    full_name: str = ""
    checkpoint_key: str = ""

    def encode(self) -> bytes:
        return _string_field(1, self.name) + _string_field(2, self.full_name) + _string_field(3, self.checkpoint_key)

    @classmethod
    def decode(cls, data: bytes) -> SerializedTensor:
        fields = ["", "", ""]
        for number, value in iter_fields(data):
            if 1 <= number <= 3:
                fields[number - 1] = _text(value, "SerializedTensor field")
        return cls(*fields)


@dataclasses.dataclass(frozen=True)
class SlotVariableReference:
    """An optimizer slot: the variable it belongs to, its name, the slot variable's node."""

    original_variable_node_id: int
    slot_name: str
    slot_variable_node_id: int

    def encode(self) -> bytes:
        return (
            _int_field(1, self.original_variable_node_id)
            + _string_field(2, self.slot_name)
            + _int_field(3, self.slot_variable_node_id)
        )

    @classmethod
    def decode(cls, data: bytes) -> SlotVariableReference:
        original, name, slot = 0, "", 0
        for number, value in iter_fields(data):
            if number == 1:
                original = as_int32(value)
            elif number == 2:
                name = _text(value, "SlotVariableReference.slot_name")
            elif number == 3:
                slot = as_int32(value)
        return cls(original, name, slot)


@dataclasses.dataclass(frozen=True)
class RegisteredSaver:
    """A saver registered by name (`tf.TPUEmbeddingCallback`) and the path of the object it saves."""

    name: str
    object_name: str = ""

    def encode(self) -> bytes:
        return _string_field(1, self.name) + _string_field(2, self.object_name)

    @classmethod
    def decode(cls, data: bytes) -> RegisteredSaver:
        name, object_name = "", ""
        for number, value in iter_fields(data):
            if number == 1:
                name = _text(value, "RegisteredSaver.name")
            elif number == 2:
                object_name = _text(value, "RegisteredSaver.object_name")
        return cls(name, object_name)


@dataclasses.dataclass(frozen=True)
class TrackableObject:
    """One node: its children, saved attributes, slots, registered saver, and whether anything below is saved.

    `has_checkpoint_values` None means the field is absent (graphs of TF < 2.6).
    """

    children: tuple[ObjectReference, ...] = ()
    attributes: tuple[SerializedTensor, ...] = ()
    slot_variables: tuple[SlotVariableReference, ...] = ()
    registered_saver: RegisteredSaver | None = None
    has_checkpoint_values: bool | None = None

    def encode(self) -> bytes:
        out = b"".join(field_bytes(1, child.encode()) for child in self.children)
        out += b"".join(field_bytes(2, attribute.encode()) for attribute in self.attributes)
        out += b"".join(field_bytes(3, slot.encode()) for slot in self.slot_variables)
        if self.registered_saver is not None:
            out += field_bytes(4, self.registered_saver.encode())
        if self.has_checkpoint_values is not None:
            out += field_bytes(5, field_varint(1, 1) if self.has_checkpoint_values else b"")
        return out

    @classmethod
    def decode(cls, data: bytes) -> TrackableObject:
        children, attributes, slots = [], [], []
        saver, has_values = None, None
        for number, value in iter_fields(data):
            if number == 1:
                children.append(ObjectReference.decode(_message(value, "children")))
            elif number == 2:
                attributes.append(SerializedTensor.decode(_message(value, "attributes")))
            elif number == 3:
                slots.append(SlotVariableReference.decode(_message(value, "slot_variables")))
            elif number == 4:
                saver = RegisteredSaver.decode(_message(value, "registered_saver"))
            elif number == 5:
                has_values = False
                for sub, item in iter_fields(_message(value, "has_checkpoint_values")):
                    if sub == 1:
                        has_values = bool(item)
        return cls(tuple(children), tuple(attributes), tuple(slots), saver, has_values)


@dataclasses.dataclass(frozen=True)
class TrackableObjectGraph:
    """The whole graph: `nodes[0]` is the root."""

    nodes: tuple[TrackableObject, ...] = ()

    def encode(self) -> bytes:
        return b"".join(field_bytes(1, node.encode()) for node in self.nodes)

    @classmethod
    def decode(cls, data: bytes) -> TrackableObjectGraph:
        """The graph in `data`.

        Raises:
          WireError: bytes that are not a TrackableObjectGraph, or an edge to
            a node that does not exist.
        """
        nodes = tuple(
            TrackableObject.decode(_message(value, "nodes"))
            for number, value in iter_fields(bytes(data))
            if number == 1
        )
        for node_id, node in enumerate(nodes):
            for child in node.children:
                if not 0 <= child.node_id < len(nodes):
                    raise WireError(
                        f"node {node_id} has child {child.local_name!r} -> node {child.node_id}, but the "
                        f"graph has {len(nodes)} nodes"
                    )
        return cls(nodes)

    def child(self, node_id: int, local_name: str) -> int | None:
        """The node id of child `local_name` of node `node_id`, or None."""
        for reference in self.nodes[node_id].children:
            if reference.local_name == local_name:
                return reference.node_id
        return None

    def resolve(self, path: Iterable[str], start: int = 0) -> int | None:
        """The node reached from `start` (the root) through the local names of `path`, or None."""
        node_id: int | None = start if self.nodes else None
        for name in path:
            if node_id is None:
                return None
            node_id = self.child(node_id, name)
        return node_id

    def attribute(self, node_id: int, name: str = VARIABLE_VALUE) -> SerializedTensor | None:
        """Attribute `name` of a node, or None."""
        for attribute in self.nodes[node_id].attributes:
            if attribute.name == name:
                return attribute
        return None

    def paths(self) -> list[tuple[str, ...]]:
        """Each node's first breadth-first path from the root (local names); () for the root and unreachable ones."""
        if not self.nodes:
            return []
        paths: dict[int, tuple[str, ...]] = {0: ()}
        queue = collections.deque([0])
        while queue:
            node_id = queue.popleft()
            for child in self.nodes[node_id].children:
                if child.node_id not in paths:
                    paths[child.node_id] = paths[node_id] + (child.local_name,)
                    queue.append(child.node_id)
        return [paths.get(node_id, ()) for node_id in range(len(self.nodes))]


# Building a graph --------------------------------------------------------------------------


class Node:
    """An object while a graph is built: named children, saved attributes, maybe a registered saver.

    The same `Node` may be the child of several parents (a DAG, as
    TensorFlow's `_variables` dict points at the table variables again);
    it becomes one graph node.
    """

    def __init__(self, attributes: Sequence[tuple[str, str, Any]] = (), registered_saver: str | None = None):
        self.children: list[tuple[str, Node]] = []
        self.attributes: list[tuple[str, str, Any]] = list(attributes)  # (name, full_name, value)
        self.registered_saver = registered_saver

    @classmethod
    def variable(cls, full_name: str, value: Any) -> Node:
        """A variable: one VARIABLE_VALUE attribute holding `value`."""
        return cls([(VARIABLE_VALUE, full_name, value)])

    def add(self, local_name: str, child: Node) -> Node:
        """Adds `child` under `local_name`; returns the child.

        Raises:
          ValueError: this node already has a child of that name.
        """
        if any(name == local_name for name, _ in self.children):
            raise ValueError(f"Two objects named {local_name!r} under one parent: local names must be unique.")
        self.children.append((local_name, child))
        return child


def build_graph(root: Node) -> tuple[TrackableObjectGraph, dict[str, Any]]:
    """(graph, {checkpoint_key: value}) of the objects reachable from `root`, numbered as TensorFlow does.

    Nodes are numbered breadth first, children in the order they were
    added; a key comes from the first path that reaches its node, and
    `has_checkpoint_values` is True for a node with attributes, slots or a
    registered saver and for every node above one.

    Raises:
      ValueError: two attributes with one key.
    """
    order: list[Node] = [root]
    ids: dict[int, int] = {id(root): 0}
    paths: list[tuple[str, ...]] = [()]
    queue = collections.deque([root])
    while queue:
        node = queue.popleft()
        for name, child in node.children:
            if id(child) not in ids:
                ids[id(child)] = len(order)
                order.append(child)
                paths.append(paths[ids[id(node)]] + (name,))
                queue.append(child)
    values: dict[str, Any] = {}
    nodes = []
    for node, path in zip(order, paths):
        attributes = []
        for name, full_name, value in node.attributes:
            key = checkpoint_key(path, name)
            if key in values:
                raise ValueError(f"Two saved values have the key {key!r}.")
            values[key] = value
            attributes.append(SerializedTensor(name, full_name, key))
        saver = None
        if node.registered_saver is not None:
            saver = RegisteredSaver(node.registered_saver, "/".join(escape_local_name(n) for n in path))
        children = tuple(ObjectReference(ids[id(child)], name) for name, child in node.children)
        nodes.append(TrackableObject(children, tuple(attributes), (), saver))
    return with_checkpoint_values(TrackableObjectGraph(tuple(nodes))), values


def with_checkpoint_values(graph: TrackableObjectGraph) -> TrackableObjectGraph:
    """`graph` with `has_checkpoint_values` set on every node (TensorFlow's rule, see `build_graph`)."""
    parents: dict[int, set] = collections.defaultdict(set)
    marked = set()
    for node_id, node in enumerate(graph.nodes):
        if node.attributes or node.slot_variables or node.registered_saver is not None:
            marked.add(node_id)
        for child in node.children:
            parents[child.node_id].add(node_id)
    queue = list(marked)
    while queue:
        for parent in parents.pop(queue.pop(), ()):
            if parent not in marked:
                marked.add(parent)
                queue.append(parent)
    return TrackableObjectGraph(
        tuple(
            dataclasses.replace(node, has_checkpoint_values=node_id in marked)
            for node_id, node in enumerate(graph.nodes)
        )
    )
