"""A process forked after the fast kernels ran: its engines run the numpy kernels (numba's OpenMP
layer is not fork-safe; before, the child was stopped and a multiprocessing.Pool hung forever)."""

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("numba", reason="needs numba: the `fast` extra, pip install -e '.[fast]'")

SETUP = textwrap.dedent("""
    import multiprocessing, os, sys, warnings
    import numpy as np
    from tpu_embedding_shim.engine.engine import Engine
    from tpu_embedding_shim.spec import AdagradSpec, EmbeddingSpec, FeatureSpec, TableSpec

    spec = EmbeddingSpec(tables=(TableSpec(name="t", vocabulary_size=1000, dim=8, combiner="sum"),),
                         features=(FeatureSpec(name="f", table="t", num_buckets=1000),),
                         optimizer=AdagradSpec(learning_rate=0.1))
    ids = np.random.default_rng(0).integers(0, 1000, size=(70000, 3))  # large enough for parallel launches

    def step(engine):
        result = engine.forward({"f": ids})
        engine.apply_gradients(result, {"f": np.ones((70000, 8))})
        return engine.table("t")

    fast = Engine(spec, kernels="fast", seed=1)
    step(fast)
    import numba
    assert numba.threading_layer() != "workqueue", numba.threading_layer()
    reference = Engine(spec, kernels="numpy", seed=1)
    step(reference)
    expected = step(reference).copy()  # what the fast engine's second step must give
""")


def _run(body: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SETUP + textwrap.dedent(body)], capture_output=True, text=True, timeout=240
    )


def test_a_forked_child_runs_the_numpy_kernels_with_the_same_numbers():
    done = _run("""
        pid = os.fork()
        if pid == 0:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                table = step(fast)
            ok = np.array_equal(table, expected) and any("spawn" in str(w.message) for w in caught)
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
    """)
    assert done.returncode == 0, done.stderr
    assert "child 0" in done.stdout, (done.stdout, done.stderr)


def test_a_fork_pool_after_a_fast_step_does_not_hang():
    done = _run("""
        def child_step(_):
            warnings.simplefilter("ignore")
            return np.array_equal(step(fast), expected)
        with multiprocessing.get_context("fork").Pool(2) as pool:
            print("pool", pool.map(child_step, range(2), chunksize=1))
        print("parent", np.array_equal(step(fast), expected))  # the parent keeps its fast kernels
    """)
    assert done.returncode == 0, done.stderr
    assert "pool [True, True]" in done.stdout and "parent True" in done.stdout, (done.stdout, done.stderr)
