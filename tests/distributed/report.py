"""What the estimator programs (`*_program.py`) report: the trained model, and every replica's error.

The programs import it as a sibling module (they run as scripts from this
directory).
"""

import json

import numpy as np

from tpu_embedding_shim.api import replicas


def record_model(record, estimator, metrics):
    """The eval metrics and every variable of the latest checkpoint (collective under mpiexec)."""
    record["metrics"] = {key: float(value) for key, value in metrics.items()}
    record["variables"] = {
        name: np.asarray(estimator.get_variable_value(name)).tolist() for name in estimator.get_variable_names()
    }


def write_record(record, out):
    """Replica 0 writes `record` to `out`, with `errors`: each replica's error (None: it finished)."""
    errors = replicas.world().allgather_object(record.get("error"))
    if replicas.is_chief():
        record["errors"] = errors
        with open(out, "w") as handle:
            json.dump(record, handle)
