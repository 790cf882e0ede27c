"""`tf.compat.v1.tpu`: the embedding namespace, and `cross_replica_sum` for numpy dense parts under mpiexec."""

from ....api.replicas import cross_replica_sum
from ... import namespaces as _namespaces
from . import experimental

__all__ = ["experimental", "cross_replica_sum"]

__getattr__ = _namespaces.missing_names(__name__)
