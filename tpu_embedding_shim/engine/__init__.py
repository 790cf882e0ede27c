"""The CPU engine: tables, lookups, gradients, optimizers. Imports `spec/` only.

Its public API is the names below (`__all__`), and the TensorFlow checkpoint
format in `engine.tf_bundle` (that package's `__all__`): the layers above
(compat, estimator, the namespaces) import nothing else of the engine, and
tests/test_import_layers.py checks it. Everything else in `engine/` is free
to change.

>>> from tpu_embedding_shim.engine import Engine, NumpyKernels
>>> Engine.__module__, NumpyKernels.__module__
('tpu_embedding_shim.engine.engine', 'tpu_embedding_shim.engine.kernels')

Names load at first use (PEP 562): importing the package imports nothing
else, and numba only loads when the fast kernels run.
"""

import importlib
from typing import Any

# public name -> the module that defines it ("" for a module of this package)
_SOURCES: dict[str, str] = {
    # the engine and one step
    "Engine": "engine",
    "LookupResult": "engine",
    "EmbeddingEngine": "interface",
    "initial_table": "engine",
    "Kernels": "kernels",
    "NumpyKernels": "kernels",
    # the engine over several processes (MPI; docs/distributed.md)
    "DistributedEngine": "distributed",
    "communicator": "distributed",
    "Communicator": "distributed",
    "SingleProcess": "distributed",
    "PeerFailedError": "distributed",
    "agree": "distributed",
    "write_collectively": "distributed",
    # ids
    "Ragged": "ragged",
    "to_ragged": "ragged",
    "CheckedBatch": "ragged",
    "check_batch": "ragged",
    "check_batches": "ragged",
    "is_sparse": "ragged",
    "is_ragged_tensor": "ragged",
    "checked_sparse_indices": "ragged",
    # the reference kernels, as a module: pooled / sequence lookups and their gradients
    "lookup": "",
    "pooled_coefficients": "lookup",
    # optimizers
    "initial_slots": "optimizers",
    "apply_update": "optimizers",
    "touches_all_rows": "optimizers",
    "bias_corrected_learning_rate": "optimizers",
    # sharding
    "ShardedTable": "sharding",
    "shard_sizes": "sharding",
    "locate": "sharding",
    "split_table": "sharding",
    "join_shards": "sharding",
    # the project's own checkpoint format, as a module, and its common names
    "checkpoint": "",
    "CheckpointError": "checkpoint",
    "EMBEDDING": "checkpoint",
    "MANIFEST": "checkpoint",
    "save_checkpoint": "checkpoint",
    "load_checkpoint": "checkpoint",
    "read_array": "checkpoint",
    "read_manifest": "checkpoint",
    # files written whole or not at all
    "created_directories": "files",
    "discard_directory": "files",
    "new_directory": "files",
    "not_a_regular_file": "files",
    "replace_file": "files",
    # lookup statistics
    "LookupStatistics": "statistics",
    # how SparseCore stacks and shards tables (TensorFlow 2.21's layouts and stacker), as a module
    "sparsecore_layout": "",
    # TensorFlow's checkpoint format (a package with its own __all__)
    "tf_bundle": "",
}

__all__ = sorted(_SOURCES)


def __getattr__(name: str) -> Any:
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if source == "":
        return importlib.import_module(f".{name}", __name__)
    return getattr(importlib.import_module(f".{source}", __name__), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
