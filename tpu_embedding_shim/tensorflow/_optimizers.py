"""`tf.compat.v1.tpu.CrossShardOptimizer` over the replicas of this program: one process, or `mpiexec -n N`.

On a TPU it sums each gradient over the replicas (`cross_replica_sum`)
and, with `reduction=MEAN`, scales the loss by 1 / number of shards first.
TensorFlow's own class puts a `CrossReplicaSum` op in the graph, which has
no CPU kernel. This subclass keeps TensorFlow's checks (`reduction`, a
`tf.compat.v1.train.Optimizer`, `group_assignment`) and:

- in one process (one replica), delegates to the wrapped optimizer: the
  sum over one replica is the gradient, the scale is 1;
- under `mpiexec -n N` (N replicas, api/replicas.py), scales the loss
  by 1 / N for `MEAN`, and sums every gradient over the processes in ONE
  graph op (`cross_replica_sum`, a `tf.numpy_function` calling
  `replicas.cross_replica_sum`): one op, so every process makes the same
  collective call at each step whatever order the session runs ops in. The
  sum runs in replica order, so every replica applies the same update.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from ..api import replicas
from ..runner.tf_bridge import CROSS_REPLICA_OP

__all__ = ["CrossShardOptimizer"]


class CrossShardOptimizer(tf.compat.v1.tpu.CrossShardOptimizer):
    """TensorFlow's `CrossShardOptimizer` over this program's replicas (module docstring)."""

    def compute_gradients(self, loss: Any, var_list: Any = None, **kwargs: Any) -> Any:
        """The wrapped optimizer's gradients of `loss`, scaled by 1 / N for `reduction=MEAN` (N replicas)."""
        count = replicas.num_replicas()
        subgroup = self._verify_and_get_subgroup_size(self._group_assignment, count)
        if count > 1 and self._reduction == tf.compat.v1.losses.Reduction.MEAN:
            loss = loss * (1.0 / (subgroup if self._group_assignment else count))
        return self._opt.compute_gradients(loss, var_list=var_list, **kwargs)

    def apply_gradients(self, grads_and_vars: Any, global_step: Any = None, name: Any = None) -> Any:
        """The wrapped optimizer's update with every gradient summed over the replicas."""
        grads_and_vars = list(grads_and_vars)
        if replicas.num_replicas() == 1:
            return self._opt.apply_gradients(grads_and_vars, global_step, name)
        if self._group_assignment:
            raise NotImplementedError(
                "CrossShardOptimizer(group_assignment=...) sums over subgroups of replicas; under mpiexec the "
                "project sums over all of them. Leave group_assignment out."
            )
        present = [i for i, (grad, _) in enumerate(grads_and_vars) if grad is not None]
        grads = [tf.convert_to_tensor(grads_and_vars[i][0]) for i in present]
        summed = list(grads_and_vars)
        if grads:
            outputs = tf.numpy_function(_sum_over_replicas, grads, [g.dtype for g in grads], name=CROSS_REPLICA_OP)
            for i, grad, out in zip(present, grads, outputs):
                out.set_shape(grad.shape)
                summed[i] = (out, grads_and_vars[i][1])
        return self._opt.apply_gradients(summed, global_step, name)


def _sum_over_replicas(*grads: np.ndarray) -> list[np.ndarray]:
    return [np.asarray(g) for g in replicas.cross_replica_sum(list(grads))]
