"""`tf.distribute`: an in-process CPU emulation of TPUStrategy (see api/distribute.py)."""

from ....api.distribute import (  # noqa: F401
    DistributedDataset,
    InputContext,
    InputOptions,
    InputReplicationMode,
    ReduceOp,
    ReplicaContext,
    RunOptions,
    Strategy,
    TPUStrategy,
    get_replica_context,
    get_strategy,
    has_strategy,
    in_cross_replica_context,
)
from ... import namespaces as _namespaces
from . import cluster_resolver, experimental  # noqa: F401

__getattr__ = _namespaces.missing_names(__name__)
