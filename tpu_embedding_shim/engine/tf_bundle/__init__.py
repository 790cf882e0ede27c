"""TensorFlow's checkpoint format (the tensor bundle), read and written with numpy alone.

A TensorFlow checkpoint `P` is `P.index` (a sorted table: name -> dtype,
shape, data file, offset, size, CRC-32C) plus `P.data-<k>-of-<n>` (the
tensors' raw little-endian bytes), and its directory's `checkpoint` text
file names the latest one. This package knows the format only, not the
names TensorFlow gives variables: `api/checkpoint_reader.py` puts
`tf.train.load_checkpoint` & co. on top of it.

One idea per module:

- `crc32c.py`: CRC-32C and TF's masking (numba kernel, numpy fallback);
- `wire.py`: protobuf varints and fields; `protos.py`: the four messages
  of the index (header, entry, shape, slice);
- `ordered_code.py`: the key of one slice of a partitioned tensor;
- `table.py`: the LevelDB-style table of the `.index` file;
- `dtypes.py`: dtype codes, bfloat16; `strings.py`: string tensors;
- `naming.py`: file names; `state.py`: the `checkpoint` state file;
- `reader.py`: `BundleReader`, `read_bundle`, `list_bundle`;
- `writer.py`: `write_bundle` (atomic), `SlicedTensor`, `delete_bundle`;
- `object_graph.py`: the TrackableObjectGraph of TF2 object-based
  checkpoints (`_CHECKPOINTABLE_OBJECT_GRAPH`), keys and escaping;
- `debris.py`: a live writer's directory lock, and removing what killed
  saves left.

The byte layout was measured against TensorFlow 2.15
(tests/tf_interop/ checks both directions against real TensorFlow).
"""

from .crc32c import crc32c, mask, unmask
from .debris import acquire_writer, release_writer, remove_debris, sole_writer, writing
from .dtypes import CODES, code_of, name_of
from .errors import BundleError, DataLossError, NotFoundError, UnimplementedError
from .naming import data_file, data_files, index_file, index_suffix_hint, is_bundle, newest_complete
from .object_graph import (
    OBJECT_GRAPH_KEY,
    VARIABLE_VALUE,
    Node,
    TrackableObjectGraph,
    build_graph,
    checkpoint_key,
    escape_local_name,
    unescape_local_name,
)
from .protos import FULL, BundleEntry, BundleHeader
from .reader import ROW_BUFFER, BundleReader, list_bundle, read_bundle
from .state import STATE_FILE, CheckpointState, read_state, record_latest, write_state
from .wire import WireError, decode_varint, encode_varint, field_bytes, field_varint, iter_fields
from .writer import SlicedTensor, delete_bundle, write_bundle

__all__ = [
    "crc32c",
    "mask",
    "unmask",
    "BundleError",
    "DataLossError",
    "NotFoundError",
    "UnimplementedError",
    "data_file",
    "data_files",
    "index_file",
    "is_bundle",
    "index_suffix_hint",
    "newest_complete",
    "FULL",
    "BundleEntry",
    "BundleHeader",
    "BundleReader",
    "ROW_BUFFER",
    "list_bundle",
    "read_bundle",
    "STATE_FILE",
    "CheckpointState",
    "read_state",
    "record_latest",
    "write_state",
    "SlicedTensor",
    "delete_bundle",
    "write_bundle",
    "acquire_writer",
    "release_writer",
    "remove_debris",
    "sole_writer",
    "writing",
    "CODES",
    "code_of",
    "name_of",
    "OBJECT_GRAPH_KEY",
    "VARIABLE_VALUE",
    "Node",
    "TrackableObjectGraph",
    "build_graph",
    "checkpoint_key",
    "escape_local_name",
    "unescape_local_name",
    "WireError",
    "decode_varint",
    "encode_varint",
    "field_bytes",
    "field_varint",
    "iter_fields",
]
