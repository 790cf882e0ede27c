"""The plots of docs/semantics.md, computed with the project's own engine.

Two experiments, each a pure function that returns its numbers (tested by
tests/docs/test_plots.py, so the pages cannot drift from the engine), and a
drawing step that needs matplotlib (`pip install -e '.[plot]'`):

- `lazy_adam_data()`: one table of two rows, both trained towards 1.0 with
  Adam. Row 0 is in every step; row 1 ("rare") only in every 30th step.
  Lazy Adam moves the rare row only when it is looked up; non-lazy Adam
  keeps moving it on its momentum between sightings.
- `pipelining_data()`: a linear model `y = embedding(id) . w` with 8 ids,
  trained with SGD, every id in (almost) every batch, with and without
  `pipeline_execution_with_tensor_core`, at three learning rates.

Run from the repository top to rewrite the PNGs in docs/images/:

    python docs/plots/make_plots.py
"""

import os
import sys

import numpy as np

from tpu_embedding_shim.engine.engine import Engine
from tpu_embedding_shim.spec import AdamSpec, EmbeddingSpec, FeatureSpec, SGDSpec, TableSpec, Zeros

IMAGES = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "images")

LAZY_STEPS, RARE_EVERY, ADAM_LR, TARGET = 300, 30, 0.01, 1.0
PIPE_STEPS, PIPE_VOCAB, PIPE_DIM, PIPE_BATCH = 60, 8, 4, 64
PIPE_LEARNING_RATES = (4.0, 12.0, 20.0)


def _adam_run(lazy: bool) -> dict[str, list[float]]:
    spec = EmbeddingSpec(
        tables=(TableSpec(name="t", vocabulary_size=2, dim=1, combiner="sum", initializer=Zeros()),),
        features=(FeatureSpec(name="ids", table="t", num_buckets=2),),
        optimizer=AdamSpec(learning_rate=ADAM_LR, lazy_adam=lazy),
    )
    engine = Engine(spec)
    rare, frequent = [], []
    for step in range(LAZY_STEPS):
        seen = step % RARE_EVERY == 0
        result = engine.forward({"ids": [[0], [1]] if seen else [[0], [-1]]})  # -1 pads: row 1 not looked up
        grad = result.activations["ids"] - TARGET  # loss = sum (x - 1)**2 / 2
        if not seen:
            grad[1] = 0.0
        engine.apply_gradients(result, {"ids": grad.astype(np.float32)})
        table = engine.table("t")
        frequent.append(float(table[0, 0]))
        rare.append(float(table[1, 0]))
    return {"rare": rare, "frequent": frequent}


def lazy_adam_data() -> dict:
    """Row values after every step, lazy and non-lazy Adam, and a summary."""
    lazy, dense = _adam_run(True), _adam_run(False)
    sightings = LAZY_STEPS // RARE_EVERY
    return {
        "steps": list(range(1, LAZY_STEPS + 1)),
        "lazy": lazy,
        "non_lazy": dense,
        "summary": {
            "sightings": sightings,
            "lazy_rare_after_first_sighting": round(lazy["rare"][RARE_EVERY - 1], 3),
            "non_lazy_rare_after_first_sighting": round(dense["rare"][RARE_EVERY - 1], 3),
            "lazy_rare_final": round(lazy["rare"][-1], 3),
            "non_lazy_rare_final": round(dense["rare"][-1], 3),
            "frequent_final": round(lazy["frequent"][-1], 3),
            "frequent_rows_equal": bool(np.allclose(lazy["frequent"], dense["frequent"])),
        },
    }


def _pipeline_run(pipelining: bool, learning_rate: float, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    true_table = rng.normal(size=(PIPE_VOCAB, PIPE_DIM)).astype(np.float32)
    w = rng.normal(size=PIPE_DIM).astype(np.float32)  # the dense layer, known and fixed
    spec = EmbeddingSpec(
        tables=(TableSpec(name="t", vocabulary_size=PIPE_VOCAB, dim=PIPE_DIM, combiner="sum", initializer=Zeros()),),
        features=(FeatureSpec(name="ids", table="t", num_buckets=PIPE_VOCAB),),
        optimizer=SGDSpec(learning_rate=learning_rate),
        pipeline_execution_with_tensor_core=pipelining,
    )
    engine = Engine(spec)
    losses = []
    for _ in range(PIPE_STEPS):
        ids = rng.integers(0, PIPE_VOCAB, PIPE_BATCH)
        labels = true_table[ids] @ w
        result = engine.forward({"ids": ids[:, None]})
        error = result.activations["ids"] @ w - labels
        losses.append(float(np.mean(error**2) / 2))
        engine.apply_gradients(result, {"ids": (np.outer(error, w) / PIPE_BATCH).astype(np.float32)})
    return losses


def _steps_below(losses: list[float], threshold: float):
    """The first step (counted from 1) whose loss is below `threshold`, or None."""
    return next((i + 1 for i, loss in enumerate(losses) if loss < threshold), None)


def pipelining_data() -> dict:
    """Loss per step, with and without pipelining, at each learning rate, and a summary."""
    curves = {lr: {"off": _pipeline_run(False, lr), "on": _pipeline_run(True, lr)} for lr in PIPE_LEARNING_RATES}
    summary = {}
    for lr, curve in curves.items():
        summary[lr] = {
            "steps_to_1e-4": {side: _steps_below(curve[side], 1e-4) for side in ("off", "on")},
            "diverged": {side: curve[side][-1] > curve[side][0] for side in ("off", "on")},
        }
    growth = curves[PIPE_LEARNING_RATES[-1]]["on"]
    summary["growth_on_at_highest_rate"] = float(f"{growth[-1] / growth[0]:.1g}")
    return {"steps": list(range(1, PIPE_STEPS + 1)), "curves": curves, "summary": summary}


def draw(out_dir: str = IMAGES) -> list[str]:
    """Write lazy_adam.png and pipelining.png into `out_dir`; return their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    paths = []

    data = lazy_adam_data()
    fig, ax = plt.subplots(figsize=(9.5, 3.6), dpi=100)
    ax.axhline(TARGET, color="0.7", lw=1, ls=":", label="target")
    ax.plot(
        data["steps"],
        data["lazy"]["frequent"],
        color="0.45",
        lw=1.2,
        label="frequent row (every step):\nlazy = non-lazy",
    )
    ax.plot(data["steps"], data["non_lazy"]["rare"], color="tab:orange", lw=2, label="rare row, non-lazy Adam")
    ax.plot(data["steps"], data["lazy"]["rare"], color="tab:blue", lw=2, label="rare row, lazy Adam (TPU default)")
    for step in range(0, LAZY_STEPS, RARE_EVERY):
        ax.axvline(step + 1, color="tab:blue", alpha=0.12, lw=1)
    ax.set_xlabel(f"training step (the rare row is looked up at the faint lines,\nevery {RARE_EVERY} steps)")
    ax.set_ylabel("row value")
    ax.set_title(f"Adam(lr={ADAM_LR}) on a rarely seen row: lazy vs non-lazy")
    ax.set_ylim(0, 1.2)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    paths.append(os.path.join(out_dir, "lazy_adam.png"))
    fig.savefig(paths[-1])
    plt.close(fig)

    data = pipelining_data()
    fig, axes = plt.subplots(1, len(PIPE_LEARNING_RATES), figsize=(9, 3.2), dpi=100, sharey=True)
    for ax, lr in zip(axes, PIPE_LEARNING_RATES):
        ax.semilogy(data["steps"], data["curves"][lr]["off"], color="tab:blue", lw=2, label="no pipelining")
        ax.semilogy(
            data["steps"],
            data["curves"][lr]["on"],
            color="tab:red",
            lw=1.5,
            ls="--",
            label="pipelining (one step stale)",
        )
        ax.set_title(f"SGD learning rate {lr:g}")
        ax.set_xlabel("step")
        ax.set_ylim(1e-8, 1e4)
    axes[0].set_ylabel("training loss (log scale)")
    axes[0].legend(loc="lower left", fontsize=8)
    fig.suptitle("pipeline_execution_with_tensor_core on a model whose ids repeat every step", fontsize=10)
    fig.tight_layout()
    paths.append(os.path.join(out_dir, "pipelining.png"))
    fig.savefig(paths[-1])
    plt.close(fig)
    return paths


def main(argv: list[str]) -> int:
    """Print the summaries and draw the plots."""
    print("lazy Adam:", lazy_adam_data()["summary"])
    print("pipelining:", pipelining_data()["summary"])
    for path in draw(argv[1] if len(argv) > 1 else IMAGES):
        print("wrote", os.path.normpath(path))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
