"""The main job: a legacy-style TPUEstimator recommender trained on MovieLens 100K, on a CPU.

`tpu-embedding-shim movielens` fetches the data if needed (or reads the
user's own ratings file, `data.load_ratings`), trains the
model_fn of `model.py` with `TPUEstimator` and an `EmbeddingConfigSpec`
(Adagrad for the embeddings, as on a TPU), evaluates after each epoch, prints
test AUC and log loss next to a most-popular-item baseline, saves a
checkpoint, exports the tables for CPU serving, and plots train loss and
test AUC per epoch (when matplotlib is installed). With `dense="tf"` the
model's dense part is TensorFlow's (`model_tf.py`, needs the `tensorflow`
extra); the default is the numpy MLP.

`mpiexec -n N tpu-embedding-shim movielens` trains the same program on N
replicas (docs/distributed.md): each reads its rows of every global batch,
the tables are sharded over the processes, the dense gradients are summed
across them, and replica 0 prints and writes. The AUC is that of one
process to float tolerance (the dense sums run in another order).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import os
import shutil
import sys
import time

import numpy as np

import tpu_embedding_shim as tf

from ..api import replicas
from . import data as ml_data
from . import model as ml_model
from .progress import JobProgress

log = logging.getLogger("tpu_embedding_shim.movielens")


@dataclasses.dataclass
class JobConfig:
    """What the job does; the defaults reach test AUC >= 0.78 in well under two minutes on 2 cores."""

    output_dir: str = "movielens_output"
    wheel: str | None = None  # the recbole wheel; None: fetch into the cache
    ratings: str | None = None  # the user's own ratings CSV (data.load_ratings) instead of MovieLens
    epochs: int = 5
    batch_size: int = 256
    eval_batch_size: int = 4096
    embedding_learning_rate: float = 2.0
    dense_learning_rate: float = 3e-3
    max_examples: int | None = None  # a slice of the ratings, for quick runs and tests
    num_shards: int = 2
    partition_strategy: str = "div"
    pipelining: bool = False
    seed: int = 0
    progress: bool | None = None  # the job's progress lines; False: none (None and True: shown)
    plot: bool = True
    dense: str = "numpy"  # the dense part: "numpy" (model.py) or "tf" (model_tf.py, needs TensorFlow)

    def __post_init__(self):
        """Every option checked before anything is read or written: a bad one is a ValueError naming it."""
        for name in ("epochs", "batch_size", "eval_batch_size", "num_shards"):
            _check_count(name, getattr(self, name))
        if self.max_examples is not None:
            _check_count("max_examples", self.max_examples, "or None for every rating")
        for name in ("embedding_learning_rate", "dense_learning_rate"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise ValueError(f"Option `{name}` must be a number > 0. Received: {value!r}.")
        if self.partition_strategy not in ("div", "mod"):
            raise ValueError(
                f"Option `partition_strategy` must be 'div' or 'mod'. Received: {self.partition_strategy!r}."
            )
        if self.wheel is not None and self.ratings is not None:
            raise ValueError(
                f"Options `wheel` and `ratings` exclude each other: MovieLens from the wheel, or your own ratings. "
                f"Received: wheel={self.wheel!r}, ratings={self.ratings!r}."
            )
        if self.dense not in DENSE_BACKENDS:
            raise ValueError(f"Option `dense` must be one of {list(DENSE_BACKENDS)}. Received: {self.dense!r}.")
        if self.num_shards > MANY_SHARDS:
            log.warning(
                "num_shards=%d: the numbers are the same for any shard count, but every step walks every "
                "shard of every table, so more than %d shards make training much slower on a CPU.",
                self.num_shards,
                MANY_SHARDS,
            )


DENSE_BACKENDS = ("numpy", "tf")
MANY_SHARDS = 64
"""More shards than this: a warning (5,000 shards trained about 35x slower than 2)."""


def _check_count(name: str, value, alternative: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"Option `{name}` must be an int >= 1{' ' + alternative if alternative else ''}. Received: {value!r}."
        )


@dataclasses.dataclass
class JobResult:
    """Per-epoch figures and where things were written."""

    train_loss: list[float]
    test_auc: list[float]
    test_log_loss: list[float]
    baseline_auc: float
    baseline_log_loss: float
    seconds: float
    checkpoint: str
    export_dir: str
    plot: str | None
    global_step: int
    dense: str = "numpy"  # which dense part trained: "numpy" or "tf"
    replicas: int = 1  # processes that trained it (mpiexec -n N)
    data: dict = dataclasses.field(default_factory=dict)  # where the ratings came from: `load_data`'s arguments


TF_PACKAGES = ("tensorflow", "tensorflow_estimator")  # the `tensorflow` extra
TF_INSTALL = (
    "pip install tensorflow-cpu==2.15.1 tensorflow-estimator==2.15.0"
    if sys.version_info < (3, 12)
    else "pip install tensorflow-cpu==2.21.0 tf-keras==2.21.0"
)
"""The packages of pyproject.toml's `tensorflow` extra (Python < 3.12) or `tensorflow-latest` extra (3.12+) for this
Python, as a command that runs anywhere."""


def tf_model_module():
    """`model_tf` (it imports TensorFlow); without TensorFlow, an ImportError naming the `tensorflow` extra."""
    try:
        return importlib.import_module(f"{__package__}.model_tf")
    except ImportError as error:
        cause = error
        while isinstance(cause.__cause__, ImportError):  # tpu_embedding_shim.tensorflow's: TensorFlow's own error
            cause = cause.__cause__
        if not (isinstance(cause, ModuleNotFoundError) and str(cause.name).split(".")[0] in TF_PACKAGES):
            raise  # TensorFlow is installed: its own error, or the bridge's, as it is
        raise ImportError(
            f"The dense part in TensorFlow (--dense tf) needs TensorFlow, which is not installed ({cause}). "
            f"Install it with `{TF_INSTALL}` (or pip install -e '.[tensorflow]' in the project's checkout), or use "
            "the default numpy dense part (--dense numpy)."
        ) from error


def load_data(wheel: str | None = None, ratings: str | None = None, max_examples: int | None = None):
    """The job's ratings: the user's own `ratings` CSV, else MovieLens 100K from `wheel` (None: the cached
    download); the first users' ratings up to about `max_examples` if given."""
    data = ml_data.load_ratings(ratings) if ratings is not None else ml_data.load(wheel)
    return _slice(data, max_examples)


def _slice(data: ml_data.MovieLens, max_examples: int | None) -> ml_data.MovieLens:
    """Keeps the ratings of the first users until about `max_examples` ratings (whole users, so the split holds)."""
    if not max_examples or max_examples >= len(data.user):
        return data
    last_user = data.user[min(max_examples, len(data.user)) - 1]
    keep = data.user <= last_user
    return dataclasses.replace(data, train=data.train[keep[data.train]], test=data.test[keep[data.test]])


def baseline(data: ml_data.MovieLens) -> dict[str, float]:
    """Most-popular-item: score a rating by how often the movie was rated in training.

    The AUC ranks by popularity; the log loss is that of the training base
    rate (popularity is not a probability).
    """
    counts = np.bincount(data.item[data.train], minlength=data.num_items)
    labels = data.label[data.test]
    base_rate = float(np.clip(data.label[data.train].mean(), 1e-6, 1 - 1e-6))
    logit = np.full(len(labels), np.log(base_rate / (1 - base_rate)))
    return {"auc": ml_model.auc(labels, counts[data.item[data.test]]), "log_loss": ml_model.log_loss(labels, logit)}


MARKER = ".tpu-embedding-shim-movielens"  # marks an output directory this job wrote
_OUTPUTS = ("model", "export", "results.json", "training.png", "zip_prefixes.txt")  # what the job writes there


def check_output_dir(output_dir: str) -> None:
    """A FileExistsError if `output_dir` is not empty and not this job's earlier output (nothing is changed)."""
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise FileExistsError(f"--output-dir {output_dir!r} is a file; pass a new or empty directory.")
    if os.path.isdir(output_dir) and os.listdir(output_dir) and not os.path.isfile(os.path.join(output_dir, MARKER)):
        raise FileExistsError(
            f"--output-dir {output_dir!r} is not empty and was not written by this job (no {MARKER} file); "
            "pass a new or empty directory."
        )


def prepare_output_dir(output_dir: str, echo=print) -> None:
    """Makes `output_dir` ready for a run from scratch: every run trains from step 0.

    A directory a previous run of this job wrote (it holds `MARKER`) has that
    run's outputs removed: the job is rerunnable, where the estimator alone
    would resume from the old checkpoint and refuse to overwrite the export.
    A non-empty directory without the marker is not this job's to clear: a
    FileExistsError names it and changes nothing.
    """
    check_output_dir(output_dir)
    if os.path.isdir(output_dir) and os.listdir(output_dir):
        echo(f"replacing the previous run in {output_dir}")
        for name in _OUTPUTS:
            path = os.path.join(output_dir, name)
            if os.path.isdir(path):
                shutil.rmtree(path)
            elif os.path.exists(path):
                os.remove(path)
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, MARKER), "w") as handle:
        handle.write("written by `tpu-embedding-shim movielens`; a rerun replaces this directory's outputs\n")


def embedding_config(config: JobConfig, data: ml_data.MovieLens, vocabulary: str):
    """(EmbeddingConfigSpec, pooled columns, sequence columns) of the job: its TPU embedding columns over `data`."""
    pooled_columns, sequence_columns = ml_model.feature_columns(data, vocabulary, ml_model.Dims(), seed=config.seed)
    spec = tf.estimator.tpu.experimental.EmbeddingConfigSpec(
        feature_columns=pooled_columns + sequence_columns,
        optimization_parameters=tf.estimator.tpu.experimental.AdagradParameters(config.embedding_learning_rate),
        partition_strategy=config.partition_strategy,
        pipeline_execution_with_tensor_core=config.pipelining,
    )
    return spec, pooled_columns, sequence_columns


def embedding_config_spec(output_dir: str = "movielens_output", wheel: str | None = None):
    """The job's EmbeddingConfigSpec with the default options, over MovieLens 100K (from the cache, downloaded if
    missing): what `tpu-embedding-shim migrate --to ... tpu_embedding_shim.movielens.job:embedding_config_spec
    --checkpoint movielens_output/model` converts (docs/migrate.md). The zip-prefix vocabulary is the one the run in
    `output_dir` wrote (it depends on the run's examples), else the whole training split's. `wheel`: as
    `JobConfig.wheel`."""
    data = ml_data.load(wheel)
    vocabulary = os.path.join(output_dir, "zip_prefixes.txt")
    if not os.path.isfile(vocabulary):
        os.makedirs(ml_data.cache_dir(), exist_ok=True)
        vocabulary = ml_data.write_zip_vocabulary(data, os.path.join(ml_data.cache_dir(), "zip_prefixes.txt"))
    return embedding_config(JobConfig(), data, vocabulary)[0]


def build_estimator(config: JobConfig, data: ml_data.MovieLens, train_losses: list[float]):
    """The TPUEstimator, its model_fn and the EmbeddingConfigSpec: a legacy TPU program, import changed."""
    os.makedirs(config.output_dir, exist_ok=True)
    path = os.path.join(config.output_dir, "zip_prefixes.txt")
    vocabulary = replicas.on_chief(lambda: ml_data.write_zip_vocabulary(data, path), "movielens: vocabulary")
    dims = ml_model.Dims()
    config_spec, pooled_columns, sequence_columns = embedding_config(config, data, vocabulary)
    layout = ml_model.pooled_layout(pooled_columns)

    def model_fn(features, labels, mode, params):
        dense = ml_model.DenseModel(
            layout, dims, learning_rate=config.dense_learning_rate, seed=config.seed, state=params["dense_state"]
        )
        pooled = tf.keras.layers.DenseFeatures(pooled_columns)(features)
        sequence, lengths = tf.keras.experimental.SequenceFeatures(sequence_columns)(features)
        logits = dense.forward(pooled, sequence, lengths)
        probabilities = ml_model.sigmoid(logits)
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.tpu.TPUEstimatorSpec(mode, predictions={"probability": probabilities})
        loss = ml_model.log_loss(labels, logits)
        if mode == tf.estimator.ModeKeys.EVAL:

            def metric_fn(labels, logits):
                return {"auc": ml_model.auc(labels, logits), "log_loss": ml_model.log_loss(labels, logits)}

            return tf.estimator.tpu.TPUEstimatorSpec(mode, loss=loss, eval_metrics=(metric_fn, [labels, logits]))
        # d(loss)/d(logits) of the mean over the GLOBAL batch: each replica holds len(labels) of its examples. The
        # engine sums the replicas' embedding gradients and cross_replica_sum the dense ones, so both are the
        # gradients of one process's loss (to float rounding). One process: cross_replica_sum is a copy.
        global_batch = len(labels) * params["context"].num_replicas
        d_pooled, d_sequence, dense_grads = dense.backward((probabilities - labels) / global_batch, sequence.shape)
        dense_grads = tf.compat.v1.tpu.cross_replica_sum(dense_grads)
        train_losses.append(loss)
        return tf.estimator.tpu.TPUEstimatorSpec(
            mode,
            loss=loss,
            train_op=lambda: dense.step(dense_grads),
            embedding_gradients={pooled: d_pooled, sequence: d_sequence},
        )

    if config.dense == "tf":  # the same model, its dense part a TensorFlow graph
        model_fn = tf_model_module().model_fn_for(
            pooled_columns,
            sequence_columns,
            layout,
            dims,
            learning_rate=config.dense_learning_rate,
            seed=config.seed,
            train_losses=train_losses,
        )
    run_config = tf.estimator.tpu.RunConfig(
        model_dir=os.path.join(config.output_dir, "model"),
        tf_random_seed=config.seed,
        log_step_count_steps=None,  # the job's own progress lines say it (progress.py)
        save_checkpoints_steps=10**9,
        keep_checkpoint_max=2,
        tpu_config=tf.estimator.tpu.TPUConfig(num_shards=config.num_shards),
    )
    return tf.estimator.tpu.TPUEstimator(
        model_fn=model_fn,
        config=run_config,
        train_batch_size=config.batch_size,
        eval_batch_size=config.eval_batch_size,
        predict_batch_size=config.eval_batch_size,
        embedding_config_spec=config_spec,
    )


def input_fn_for(data: ml_data.MovieLens, examples: np.ndarray, *, shuffle_seed: int | None = None, on_step=None):
    """An input_fn yielding batches (a generator is the numpy world's tf.data.Dataset).

    `params['batch_size']` is the per-replica batch; under mpiexec each
    replica yields its rows of the global batches (`current_input_fn_deployment`
    says which), so the replicas see, together, one process's batches.
    `on_step()` is called after each step: when the estimator asks for the
    next batch (and once more at the end).
    """

    def input_fn(params):
        _, replica, count, _ = params["context"].current_input_fn_deployment()
        global_batches = ml_data.batches(data, examples, params["batch_size"] * count, shuffle_seed=shuffle_seed)
        sliced = (replicas.replica_slice(batch, replica=replica, replicas=count) for batch in global_batches)
        return sliced if on_step is None else _calling_after_each(sliced, on_step)

    return input_fn


def _calling_after_each(batches, on_step):
    """The batches, calling `on_step()` once each has been used (the estimator asks for the next one)."""
    for index, batch in enumerate(batches):
        if index:
            on_step()
        yield batch
    on_step()


def run(config: JobConfig, *, echo=print) -> JobResult:
    """Trains, evaluates every epoch, saves, exports and plots; returns the figures."""
    if config.dense == "tf":
        tf_model_module()  # no TensorFlow: fail before anything is downloaded or written
    if not replicas.is_chief():
        echo = _silent  # replica 0 prints and logs for all
        logging.getLogger("tpu_embedding_shim").setLevel(logging.WARNING)
    start = time.time()
    if config.wheel is None and config.ratings is None:
        _fetch_everywhere()
    source: dict = {
        "wheel": _absolute(config.wheel),
        "ratings": _absolute(config.ratings),
        "max_examples": config.max_examples,
    }
    data = load_data(**source)
    name = f"ratings from {config.ratings}" if config.ratings else "MovieLens 100K"
    echo(
        f"{name}: {len(data.train)} training and {len(data.test)} test ratings "
        f"(last 20% of each user's ratings by time); label: rating >= {ml_data.POSITIVE_RATING:g}."
    )
    base = baseline(data)
    replicas.on_chief(lambda: prepare_output_dir(config.output_dir, echo), "movielens: output directory")
    train_losses: list[float] = []
    estimator = build_estimator(config, data, train_losses)
    estimator.progress = False  # the job prints its own progress lines, on a terminal or not
    steps_per_epoch = -(-len(data.train) // config.batch_size)
    progress = JobProgress(
        steps_per_epoch, config.epochs, echo if config.progress is not False else _silent, losses=train_losses
    )
    library_log = logging.getLogger("tpu_embedding_shim")
    level = library_log.level

    def on_step() -> None:
        progress.step()
        if progress.done == 1:  # the engine and estimator have said what runs; their per-epoch lines repeat the job's
            library_log.setLevel(max(level, logging.WARNING))

    try:
        progress.start()
        epoch_loss, test_auc, test_log_loss = [], [], []
        for epoch in range(config.epochs):
            epoch_start = time.time()
            before = len(train_losses)
            estimator.train(input_fn_for(data, data.train, shuffle_seed=config.seed + epoch, on_step=on_step))
            metrics = estimator.evaluate(input_fn_for(data, data.test))
            epoch_loss.append(float(replicas.cross_replica_mean(float(np.mean(train_losses[before:])))))
            test_auc.append(float(metrics["auc"]))
            test_log_loss.append(float(metrics["log_loss"]))
            echo(
                f"epoch {epoch + 1}/{config.epochs}: train loss {epoch_loss[-1]:.4f}  test AUC {test_auc[-1]:.4f}  "
                f"test log loss {test_log_loss[-1]:.4f}  ({time.time() - epoch_start:.1f} s)  {progress.eta()}".rstrip()
            )
        seconds = time.time() - start
        checkpoint = estimator.latest_checkpoint()
        export_dir = estimator.export_embeddings(os.path.join(config.output_dir, "export"))
    finally:
        progress.close()
        library_log.setLevel(level)
    plot = (
        replicas.on_chief(lambda: _plot(config, epoch_loss, test_auc, base["auc"], echo), "movielens: plot")
        if config.plot
        else None
    )
    result = JobResult(
        epoch_loss,
        test_auc,
        test_log_loss,
        base["auc"],
        base["log_loss"],
        seconds,
        checkpoint,
        export_dir,
        plot,
        estimator.global_step,
        config.dense,
        replicas.num_replicas(),
        source,
    )
    results = os.path.join(config.output_dir, "results.json")

    def write_results() -> None:
        with open(results, "w") as handle:
            json.dump(dataclasses.asdict(result), handle, indent=2)

    replicas.on_chief(write_results, "movielens: results")
    echo("")
    echo(f"{'model':<28}{'test AUC':>10}{'log loss':>10}")
    echo(f"{f'TPU-embedding model ({config.dense})':<28}{test_auc[-1]:>10.4f}{test_log_loss[-1]:>10.4f}")
    echo(f"{'most-popular-item baseline':<28}{base['auc']:>10.4f}{base['log_loss']:>10.4f}")
    where = f" on {replicas.num_replicas()} replicas" if replicas.num_replicas() > 1 else ""
    echo(f"trained{where} in {seconds:.1f} s. Wrote:")
    echo(f"  checkpoint    {checkpoint}")
    echo(f"  export        {export_dir}")
    echo(f"  results       {results}")
    echo(f"  plot          {plot}" if plot else "  plot          (none: --no-plot or no matplotlib)")
    echo(f"score (user, item) pairs: tpu-embedding-shim movielens-score PAIRS.csv --output-dir {config.output_dir}")
    return result


def _fetch_everywhere() -> None:
    """Replica 0 downloads the data into its cache; the replicas whose cache still lacks it (on hosts whose
    caches are their own) get its copy from replica 0, rather than each host downloading (collective)."""
    fetched = replicas.on_chief(ml_data.fetch, "movielens: download")
    comm = replicas.world()
    if comm.size == 1:
        return
    lacking = comm.allgather_object(ml_data.cached() is None)
    if any(lacking):
        content = None
        if comm.rank == 0:
            with open(fetched, "rb") as handle:
                content = handle.read()
        content = comm.bcast_object(content)
        if lacking[comm.rank]:
            ml_data.keep(content, fetched)


def _absolute(path: str | None) -> str | None:
    return None if path is None else os.path.abspath(path)


def _silent(*args, **kwargs) -> None:
    """The echo of replicas other than 0."""


def _plot(config: JobConfig, losses: list[float], aucs: list[float], baseline_auc: float, echo) -> str | None:
    """training.png: train loss (left axis), test AUC and the most-popular-item baseline's AUC (right), per epoch."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        echo(
            "matplotlib is not installed: skipping the plot (pip install matplotlib, "
            "or pip install -e '.[plot]' in the project's checkout)."
        )
        return None
    epochs = np.arange(1, len(losses) + 1)
    figure, left = plt.subplots(figsize=(6, 4))
    left.plot(epochs, losses, "o-", color="tab:blue", label="train loss")
    left.set_xlabel("epoch")
    left.set_xticks(epochs)
    left.set_ylabel("train loss (log loss)", color="tab:blue")
    right = left.twinx()
    right.plot(epochs, aucs, "s-", color="tab:orange", label="test AUC")
    right.axhline(
        baseline_auc, linestyle="--", color="tab:gray", label=f"most-popular-item baseline AUC ({baseline_auc:.3f})"
    )
    low, high = min(baseline_auc, *aucs), max(baseline_auc, *aucs)
    right.set_ylim(low - 0.15 * (high - low) - 0.005, high + 0.05 * (high - low) + 0.005)  # the baseline off the edge
    right.set_ylabel("test AUC", color="tab:orange")
    left_handles, left_labels = left.get_legend_handles_labels()
    right_handles, right_labels = right.get_legend_handles_labels()
    left.legend(left_handles + right_handles, left_labels + right_labels, loc="center right", fontsize="small")
    data = "your ratings" if config.ratings else "MovieLens 100K"
    left.set_title(f"{data} on tpu-embedding-shim (dense part: {config.dense})")
    figure.tight_layout()
    path = os.path.join(config.output_dir, "training.png")
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
