"""Models the migration tests convert: MovieLens-shaped columns, a config using every option, small specs.

`movielens_config()` is the MovieLens job's EmbeddingConfigSpec (its
columns, built without the dataset: the sizes are MovieLens 100K's).
`every_option_config()` sets every option an EmbeddingConfigSpec has:
shared tables, a sequence feature, weights, every combiner, a vocabulary
list with OOV buckets, a tensor-core column, `mod`, pipelining, a gradient
multiplier, a clipping limit, a profile directory, and an optimizer with
every shared option. `every_optimizer_spec()` gives each table another
optimizer kind. `small_spec(...)` is one table for the numeric tests.
"""

from __future__ import annotations

import os
import tempfile

import tpu_embedding_shim as tf
from tpu_embedding_shim.movielens import model as movielens_model
from tpu_embedding_shim.spec import (
    AdagradMomentumSpec,
    AdagradSpec,
    AdamSpec,
    EmbeddingSpec,
    FeatureSpec,
    FtrlSpec,
    MomentumSpec,
    OptimizerSpec,
    ProximalAdagradSpec,
    RMSPropSpec,
    SGDSpec,
    TableSpec,
)

fc = tf.feature_column
tpu = tf.tpu.experimental


class _MovieLensSizes:
    num_users = 943
    num_items = 1682
    genres = ("Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary", "Drama")
    occupations = ("administrator", "artist", "doctor", "educator", "engineer", "other", "student")


def _zip_vocabulary() -> str:
    path = os.path.join(tempfile.mkdtemp(prefix="migrate-zip-"), "zip.txt")
    with open(path, "w") as file:
        file.write("\n".join(f"{n:03d}" for n in range(100)) + "\n")
    return path


def movielens_config(learning_rate: float = 0.1) -> tf.estimator.tpu.experimental.EmbeddingConfigSpec:
    pooled, sequence = movielens_model.feature_columns(_MovieLensSizes(), _zip_vocabulary())
    return tf.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=pooled + sequence,
        optimization_parameters=tf.estimator.tpu.experimental.AdagradParameters(learning_rate),
    )


def _multiplier(step: int) -> float:
    return 1.0 / (1.0 + step)


def _learning_rate(step: int) -> float:
    return 0.1 * 0.99**step


def every_option_config(*, profile: bool = True) -> tf.estimator.tpu.experimental.EmbeddingConfigSpec:
    """Every option; `profile=False` leaves out the profile directory (no target but keras-rs keeps statistics)."""
    user = fc.categorical_column_with_identity("user", 50)
    item = fc.categorical_column_with_identity("item", 40)
    history = fc.sequence_categorical_column_with_identity("history", 40)
    tags = fc.weighted_categorical_column(fc.categorical_column_with_identity("tags", 30), "tag_weights")
    city = fc.categorical_column_with_vocabulary_list("city", ["paris", "oslo", "lima"], num_oov_buckets=2)
    country = fc.categorical_column_with_identity("country", 12)
    item_col, history_col = tpu.shared_embedding_columns([item, history], 8, max_sequence_lengths=[0, 5])
    columns = [
        tpu.embedding_column(user, 8, combiner="sum", learning_rate_fn=_learning_rate),
        item_col,
        history_col,
        tpu.embedding_column(tags, 4, combiner="sqrtn"),
        tpu.embedding_column(city, 4, combiner="mean", use_safe_embedding_lookup=False),
        tpu.embedding_column(country, 4, embedding_lookup_device="tpu_tensor_core", tensor_core_shape=[None, 3]),
    ]
    return tf.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=columns,
        optimization_parameters=tf.tpu.experimental.AdamParameters(
            0.05,
            beta1=0.8,
            beta2=0.99,
            epsilon=1e-6,
            lazy_adam=False,
            sum_inside_sqrt=False,
            use_gradient_accumulation=True,
            clip_weight_min=-2.0,
            clip_weight_max=2.0,
            weight_decay_factor=0.01,
            multiply_weight_decay_factor_by_learning_rate=True,
            clip_gradient_min=-1.0,
            clip_gradient_max=1.0,
        ),
        clipping_limit=5.0,
        pipeline_execution_with_tensor_core=True,
        experimental_gradient_multiplier_fn=_multiplier,
        partition_strategy="mod",
        profile_data_directory=tempfile.mkdtemp(prefix="migrate-profile-") if profile else None,
    )


EVERY_OPTIMIZER: tuple[OptimizerSpec, ...] = (
    SGDSpec(learning_rate=0.1),
    AdagradSpec(learning_rate=0.1, initial_accumulator=0.2),
    AdagradMomentumSpec(learning_rate=0.1, momentum=0.9, use_nesterov=True, exponent=3.0, beta2=0.99, epsilon=1e-7),
    AdamSpec(learning_rate=0.01),
    FtrlSpec(learning_rate=0.1, l1_regularization_strength=0.01, l2_regularization_strength=0.02, beta=0.1),
    MomentumSpec(learning_rate=0.1, momentum=0.9),
    RMSPropSpec(learning_rate=0.1, rho=0.8, momentum=0.5),
    ProximalAdagradSpec(learning_rate=0.1, l1_regularization_strength=0.01),
)


def every_optimizer_spec() -> EmbeddingSpec:
    """One table per optimizer kind (the table's own optimizer), each with a pooled feature."""
    tables = tuple(
        TableSpec(name=f"t_{optimizer.kind}", vocabulary_size=20, dim=4, optimizer=optimizer, combiner=combiner)
        for optimizer, combiner in zip(EVERY_OPTIMIZER, ["sum", "mean", "sqrtn"] * 3)
    )
    features = tuple(FeatureSpec(name=f"f_{t.name}", table=t.name, num_buckets=20) for t in tables)
    return EmbeddingSpec(tables=tables, features=features, optimizer=SGDSpec(learning_rate=0.1))


def small_spec(
    combiner: str = "sum",
    optimizer: OptimizerSpec | None = None,
    *,
    weighted: bool = False,
    vocabulary_size: int = 30,
    dim: int = 4,
    sequence_length: int = 0,
) -> EmbeddingSpec:
    """One table `t` read by one feature `f` (weights under `w` when `weighted`)."""
    table = TableSpec(name="t", vocabulary_size=vocabulary_size, dim=dim, combiner=combiner)
    feature = FeatureSpec(
        name="f",
        table="t",
        num_buckets=vocabulary_size,
        weight_key="w" if weighted else None,
        max_sequence_length=sequence_length,
    )
    return EmbeddingSpec(tables=(table,), features=(feature,), optimizer=optimizer or AdagradSpec(learning_rate=0.1))


def quantized_midlevel_spec(*, sequence: bool = False) -> EmbeddingSpec:
    """A mid-level feature config lowered as `TPUEmbedding` lowers it: table `q` (TF's simulated quantization,
    5 levels in [-0.25, 0.25], narrower than its initializer's draws) read by the pooled `a` (and, with
    `sequence`, the sequence feature `s`), and the plain table `p` read by `b`; Adagrad."""
    from tpu_embedding_shim.api import lowering

    E = tpu.embedding
    q = E.TableConfig(
        vocabulary_size=12,
        dim=4,
        combiner="sum",
        name="q",
        quantization_config=E.QuantizationConfig(num_buckets=5, lower=-0.25, upper=0.25),
    )
    p = E.TableConfig(vocabulary_size=12, dim=4, combiner="mean", name="p")
    feature_config = {"a": E.FeatureConfig(table=q, name="a"), "b": E.FeatureConfig(table=p, name="b")}
    if sequence:
        feature_config["s"] = E.FeatureConfig(table=q, max_sequence_length=3, name="s")
    return lowering.spec_from_feature_config(feature_config, E.Adagrad(learning_rate=0.1))


# The mid-level target's two ways to a TPUEmbedding ------------------------------------------------------


def midlevel_from_code(migration, directory):
    """The generated model.py, its one import changed to this project, run: its tpu_embedding()."""
    migration.write(directory)
    code = (directory / "model.py").read_text()
    assert "import tensorflow as tf\n" in code
    namespace = {"__file__": str(directory / "model.py"), "__name__": "migrated_model"}
    exec(
        compile(code.replace("import tensorflow as tf\n", "import tpu_embedding_shim as tf\n"), "model.py", "exec"),
        namespace,
    )
    return namespace["tpu_embedding"]()


def midlevel_from_build(migration, directory):
    """The migration's config built by this project's TPUEmbedding, its checkpoint restored into it."""
    migration.write(directory)
    embedding = tf.tpu.experimental.embedding.TPUEmbedding(**migration.config)
    tf.train.Checkpoint(embedding=embedding).restore(str(directory / "tf_checkpoint" / "ckpt-1")).assert_consumed()
    return embedding
