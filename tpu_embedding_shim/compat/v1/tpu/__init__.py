"""`tf.compat.v1.tpu`: the embedding namespace, and `cross_replica_sum` for numpy dense parts under mpiexec."""

from ...replicas import cross_replica_sum
from . import experimental

__all__ = ["experimental", "cross_replica_sum"]
