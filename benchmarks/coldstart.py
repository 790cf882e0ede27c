"""Cold start: import + build + first step in a fresh process (run as `python -m benchmarks.coldstart`).

Prints one JSON line: seconds for `import`, the engine `build` (table
initialization), the `first_step` (numba kernels loaded from the cache, or
compiled when the cache is empty) and a `second_step` for comparison.
"""

from __future__ import annotations

import json
import sys
import time


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    vocab = int(argv[0]) if argv else 1_000_000
    t0 = time.perf_counter()
    import numpy as np

    from tpu_embedding_shim.engine.engine import Engine
    from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, TableSpec

    t1 = time.perf_counter()
    spec = EmbeddingSpec(
        tables=(TableSpec(name="t", vocabulary_size=vocab, dim=64, combiner="sum"),),
        features=(FeatureSpec(name="f", table="t", num_buckets=vocab),),
        optimizer=AdagradSpec(learning_rate=0.05),
    )
    engine = Engine(spec, seed=0)
    t2 = time.perf_counter()
    rng = np.random.default_rng(0)
    times = []
    for _ in range(2):
        ids = rng.integers(1, vocab, (4096, 20))
        grad = rng.standard_normal((4096, 64)).astype(np.float32)
        start = time.perf_counter()
        result = engine.forward({"f": ids})
        engine.apply_gradients(result, {"f": grad})
        times.append(time.perf_counter() - start)
    kernels = [line.strip() for line in engine.describe() if "kernels:" in line]
    print(
        json.dumps(
            {
                "import": t1 - t0,
                "build": t2 - t1,
                "first_step": times[0],
                "second_step": times[1],
                "vocab": vocab,
                "kernels": kernels,
            }
        )
    )


if __name__ == "__main__":
    main()
