"""Errors of the right type whose message names the argument, the value and what is allowed."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import tpu_embedding_shim as tf
from tpu_embedding_shim.engine.distributed import DistributedEngine
from tpu_embedding_shim.migrate import to_jax_tpu_embedding
from tpu_embedding_shim.spec import EmbeddingSpec, FeatureSpec, SGDSpec, TableSpec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PARAMS = np.arange(20, dtype=np.float32).reshape(10, 2)


def spec() -> EmbeddingSpec:
    return EmbeddingSpec(
        tables=(TableSpec(name="t", vocabulary_size=6, dim=2),),
        features=(FeatureSpec(name="f", table="t", num_buckets=6),),
        optimizer=SGDSpec(learning_rate=0.5),
    )


# tf.nn ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_norm", [1e39, 1e-46, np.float64(3.5e38), 1e308])
@pytest.mark.parametrize("lookup", ["embedding_lookup", "embedding_lookup_sparse", "safe_embedding_lookup_sparse"])
def test_a_max_norm_float32_cannot_hold_is_refused_naming_it(max_norm, lookup):
    ids = tf.SparseTensor(indices=[[0, 0]], values=[3], dense_shape=[1, 2])
    call = {
        "embedding_lookup": lambda: tf.nn.embedding_lookup(PARAMS, [1], max_norm=max_norm),
        "embedding_lookup_sparse": lambda: tf.nn.embedding_lookup_sparse(PARAMS, ids, None, max_norm=max_norm),
        "safe_embedding_lookup_sparse": lambda: tf.nn.safe_embedding_lookup_sparse(PARAMS, ids, max_norm=max_norm),
    }[lookup]
    with pytest.raises(ValueError, match=r"Argument `max_norm` must be a number > 0 within float32's range \["):
        call()


def test_the_smallest_and_largest_float32_max_norms_are_accepted():
    tiny = float(np.finfo(np.float32).smallest_subnormal)
    assert tf.nn.embedding_lookup(PARAMS, [1], max_norm=tiny).shape == (1, 2)
    assert tf.nn.embedding_lookup(PARAMS, [1], max_norm=1e38).tolist() == [[2.0, 3.0]]


@pytest.mark.parametrize("weight", [np.inf, -np.inf, 1e39])
@pytest.mark.parametrize("safe", [False, True])
def test_infinite_weights_are_reported_under_the_weights_argument(weight, safe):
    ids = tf.SparseTensor(indices=[[0, 0], [0, 1]], values=[3, 4], dense_shape=[1, 2])
    weights = ids.with_values(np.array([1.0, weight]))
    if safe:
        call, name = (lambda: tf.nn.safe_embedding_lookup_sparse(PARAMS, ids, weights)), "sparse_weights"
    else:
        call, name = (lambda: tf.nn.embedding_lookup_sparse(PARAMS, ids, weights)), "sp_weights"
    with pytest.raises(ValueError, match=rf"Argument `{name}` must hold finite weights \(in float32\)\. Received: "):
        call()


@pytest.mark.parametrize("value", [2**63, 2**64 - 1])
def test_a_uint64_id_at_or_above_2_63_is_reported_as_it_is(value):
    dense = np.array([1, value], dtype=np.uint64)
    with pytest.raises(ValueError, match=rf"Argument `ids` must hold row ids that fit in int64 .* Received: {value} "):
        tf.nn.embedding_lookup(PARAMS, dense)
    ids = tf.SparseTensor(indices=[[0, 0]], values=np.array([value], np.uint64), dense_shape=[1, 1])
    with pytest.raises(
        ValueError, match=rf"Argument `sp_ids` must hold row ids that fit in int64 .* Received: {value} "
    ):
        tf.nn.embedding_lookup_sparse(PARAMS, ids, None)


def test_a_tuple_of_unequal_shards_is_named():
    with pytest.raises(
        ValueError, match=r"Argument `params` .* Received a tuple of arrays of shapes \[\(5, 2\), \(4, 2\)\]"
    ):
        tf.nn.embedding_lookup((PARAMS[:5], PARAMS[5:9]), [1])
    # TensorFlow reads a tuple of equal shapes as one tensor: [2, 5, 2], row 1 is the second array
    assert tf.nn.embedding_lookup((PARAMS[:5], PARAMS[5:]), [1]).tolist() == [PARAMS[5:].tolist()]


# DistributedEngine --------------------------------------------------------------------------------------------------


def test_an_unknown_table_is_a_value_error_naming_the_tables():
    engine = DistributedEngine(spec(), seed=0)
    for call in (engine.table, engine.slots):
        with pytest.raises(ValueError, match=r"Argument `name` must be one of the tables \['t'\]\. Received: 'nope'\."):
            call("nope")


# migrate ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [-1, 2**63, 1.5, True, "3", None])
def test_migrates_seed_is_checked(seed):
    with pytest.raises(ValueError, match=r"Argument `seed` must be an int from 0 to 2\*\*63 - 1\. Received: seed="):
        to_jax_tpu_embedding(spec(), seed=seed)


@pytest.mark.parametrize("checkpoint, error", [(5, TypeError), (["a"], TypeError), ("", ValueError)])
def test_a_checkpoint_that_is_not_a_path_is_named(checkpoint, error):
    with pytest.raises(error, match=r"Argument `checkpoint` must be None \(fresh tables\) or a non-empty path"):
        to_jax_tpu_embedding(spec(), checkpoint)


def _migrate(*argv: str, cwd: str = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tpu_embedding_shim", "migrate", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": ROOT},
        timeout=120,
    )


@pytest.mark.parametrize(
    "option, message",
    [
        ("--out", "argument --out: must name a directory (made if missing), got ''"),
        ("--checkpoint", "argument --checkpoint: must name a checkpoint (a model_dir, a prefix or ckpt-<step>), got"),
    ],
)
def test_an_empty_out_or_checkpoint_is_a_usage_error(tmp_path, option, message):
    argv = ["--to", "jax", "tests.migrate.models:small_spec", "--out", str(tmp_path / "o"), option, ""]
    run = _migrate(*argv)
    assert run.returncode == 2 and message in run.stderr.splitlines()[-1], run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "source, reference, message",
    [
        ("raise RuntimeError('boom at import')\n", "user_model:config", "RuntimeError: boom at import"),
        ("def config():\n    return 1 / 0\n", "user_model:config", "ZeroDivisionError: division by zero"),
        ("x = (\n", "user_model:x", "SyntaxError:"),
    ],
)
def test_a_module_that_fails_is_one_line(tmp_path, source, reference, message):
    (tmp_path / "user_model.py").write_text(source)
    run = _migrate("--to", "jax", reference, "--out", str(tmp_path / "out"), cwd=str(tmp_path))
    assert run.returncode == 1 and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith(f"tpu-embedding-shim migrate: error: MODULE:OBJECT {reference!r}: {message}")
    assert not (tmp_path / "out").exists()
