"""Worker of `python -m benchmarks programs`: one program trained by `estimator.train`, in the TensorFlow venv.

`--framework ours` imports `tpu_embedding_shim.tensorflow as tf` (the TF bridge), `--framework tf` imports
`tensorflow as tf` (TF 2.15's own TPUEstimator, use_tpu=False). Prints one JSON line: examples/s over the timed
window (programs.rate) and the versions.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time

from .programs import PROGRAMS, batches, estimator, quick, rate


def input_fn_for(tf, features, labels, stamps: list[float]):
    """The batches, already batched, repeated; a py_function stamps the time each one is taken."""

    def stamp(y):
        stamps.append(time.perf_counter())
        return y

    def stamped(x, y):
        out = tf.py_function(stamp, [y], tf.float32)
        out.set_shape(y.shape)
        return x, out

    def input_fn(params):
        dataset = tf.data.Dataset.from_tensor_slices((features, labels)).repeat()
        return dataset.map(stamped)

    return input_fn


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--framework", choices=("ours", "tf"), required=True)
    parser.add_argument("--program", choices=tuple(PROGRAMS), required=True)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.framework == "ours":
        import tpu_embedding_shim.tensorflow as tf
    else:
        import tensorflow as tf
    import tensorflow

    tensorflow.get_logger().setLevel("ERROR")
    program = quick(PROGRAMS[args.program]) if args.quick else PROGRAMS[args.program]
    features, labels = batches(program, count=8)
    stamps: list[float] = []
    total = program.warmup + program.steps + 2
    with tempfile.TemporaryDirectory() as model_dir:
        est = estimator(tf, program, model_dir, use_tpu=args.framework == "ours")
        est.train(input_fn_for(tf, features, labels, stamps), steps=total)
    versions = {"tensorflow": tensorflow.__version__}
    try:
        import numba

        versions["numba"] = numba.__version__
    except ImportError:
        versions["numba"] = "missing"
    print(json.dumps({"examples_per_s": rate(stamps, program), "stamps": len(stamps), "versions": versions}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
