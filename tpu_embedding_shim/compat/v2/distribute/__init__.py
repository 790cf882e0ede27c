"""`tf.distribute`: an in-process CPU emulation of TPUStrategy (see compat/distribute.py)."""

from ...distribute import (  # noqa: F401
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
from . import cluster_resolver, experimental  # noqa: F401
