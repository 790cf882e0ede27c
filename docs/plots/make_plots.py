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

Each plot is drawn twice, for the page's column at a laptop's width and at a
phone's (`LAYOUTS`), with text that stays 11 px or more on screen.

Run from the repository top to rewrite the PNGs in docs/images/
(lazy_adam.png, lazy_adam-phone.png, pipelining.png, pipelining-phone.png):

    python docs/plots/make_plots.py
"""

import contextlib
import os
import sys
from dataclasses import dataclass

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


# Each plot comes in two layouts, one for each width of the page's content column (688 px in a 1280 px
# window, 358 px on a 390 px phone); semantics.md shows the one that fits with a <picture> whose phone
# source has the media query PHONE_MEDIA. A layout is drawn at LOGICAL_DPI (one inch of figure is 100
# CSS px on the page) and saved at DENSITY times that, so the text stays sharp on high-density screens:
# the page's srcset gives both widths (`lazy_adam.png 1440w`, `sizes="720px"`). Text sizes are in CSS px.
LOGICAL_DPI, DENSITY = 100, 2
PHONE_MEDIA = "(max-width: 719px)"  # a narrower window would shrink the wide layout's text under 11 px
FIGURES = ("lazy_adam", "pipelining")


@dataclass(frozen=True)
class Layout:
    """One plot layout: its width on the page and its text sizes, in CSS px."""

    suffix: str  # the PNG is <figure><suffix>.png
    width_px: int
    column_px: int  # the content column it is shown in, at 1280 px or on a 390 px phone
    text_px: float  # ticks, legends, in-plot labels
    label_px: float  # axis labels and titles
    narrow: bool  # panels one under the other, short titles, a one-column legend


WIDE = Layout(suffix="", width_px=720, column_px=688, text_px=13, label_px=14, narrow=False)
PHONE = Layout(suffix="-phone", width_px=360, column_px=358, text_px=12, label_px=12.5, narrow=True)
LAYOUTS = (WIDE, PHONE)


_CACHE: dict = {}


def _cached(function):
    """`function()`, computed once per process (each layout draws the same numbers)."""
    if function not in _CACHE:
        _CACHE[function] = function()
    return _CACHE[function]


def _points(px: float) -> float:
    """A font size in points for `px` CSS px on the page (matplotlib sizes fonts in points)."""
    return px * 72 / LOGICAL_DPI


def on_screen_px(layout: Layout, points: float) -> float:
    """How tall text of `points` points shows on the page, the picture shrunk to its column if wider."""
    return points * LOGICAL_DPI / 72 * min(1.0, layout.column_px / layout.width_px)


def _font_sizes(layout: Layout) -> dict:
    """matplotlib's settings for the layout's text sizes."""
    text, label = _points(layout.text_px), _points(layout.label_px)
    return {
        "font.size": text,
        "xtick.labelsize": text,
        "ytick.labelsize": text,
        "legend.fontsize": text,
        "axes.labelsize": label,
        "axes.titlesize": label,
        "figure.titlesize": label,
    }


def _figure(plt, layout: Layout, height_px: int, **subplots):
    size = (layout.width_px / LOGICAL_DPI, height_px / LOGICAL_DPI)
    return plt.subplots(figsize=size, dpi=LOGICAL_DPI, layout="constrained", **subplots)


def _lazy_adam_figure(plt, layout: Layout):
    data = _cached(lazy_adam_data)
    fig, ax = _figure(plt, layout, 440 if layout.narrow else 400)
    ax.axhline(TARGET, color="0.6", lw=1, ls=":", label="target")
    ax.plot(data["steps"], data["lazy"]["frequent"], color="0.45", lw=1.2, label="frequent row: lazy = non-lazy")
    ax.plot(data["steps"], data["non_lazy"]["rare"], color="tab:orange", lw=2, label="rare row, non-lazy Adam")
    ax.plot(data["steps"], data["lazy"]["rare"], color="tab:blue", lw=2, label="rare row, lazy Adam (TPU default)")
    for step in range(0, LAZY_STEPS, RARE_EVERY):
        ax.axvline(step + 1, color="tab:blue", alpha=0.25, lw=1)
    if layout.narrow:
        ax.set_title(f"Adam(lr={ADAM_LR}), a rarely seen row")
        ax.set_xlabel("step (faint lines: rare row looked up)")
    else:
        ax.set_title(f"Adam(lr={ADAM_LR}) on a rarely seen row: lazy vs non-lazy")
        ax.set_xlabel(f"step (faint lines: the rare row is looked up, every {RARE_EVERY} steps)")
    ax.set_ylabel("row value")
    ax.set_xlim(0, LAZY_STEPS)
    ax.set_ylim(0, 1.2)
    fig.legend(loc="outside lower center", ncols=1 if layout.narrow else 2, frameon=False)
    return fig


def _pipelining_figure(plt, layout: Layout):
    data = _cached(pipelining_data)
    rates = PIPE_LEARNING_RATES
    if layout.narrow:
        fig, axes = _figure(plt, layout, 620, nrows=len(rates), sharex=True, sharey=True)
    else:
        fig, axes = _figure(plt, layout, 340, ncols=len(rates), sharey=True)
    for ax, lr in zip(axes, rates):
        curves = data["curves"][lr]
        ax.semilogy(data["steps"], curves["off"], color="tab:blue", lw=2, label="no pipelining")
        ax.semilogy(data["steps"], curves["on"], color="tab:red", lw=1.8, ls="--", label="pipelining (one step stale)")
        ax.set_xlim(1, PIPE_STEPS)
        ax.set_ylim(1e-8, 1e4)
        ax.set_yticks([1e-8, 1e-4, 1, 1e4])
        if layout.narrow:  # the panels are stacked: the learning rate goes in the top left corner
            ax.text(0.03, 0.92, f"learning rate {lr:g}", transform=ax.transAxes, ha="left", va="top")
        else:
            ax.set_title(f"learning rate {lr:g}")
            ax.set_xlabel("step")
    if layout.narrow:
        fig.suptitle("SGD with and without pipelining")
        axes[-1].set_xlabel("step")
        axes[len(rates) // 2].set_ylabel("training loss (log scale)")
    else:
        fig.suptitle("SGD, with and without pipeline_execution_with_tensor_core")
        axes[0].set_ylabel("training loss (log scale)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=1 if layout.narrow else 2, frameon=False)
    return fig


@contextlib.contextmanager
def figures(layout: Layout):
    """The matplotlib figures of one layout, by name, with its text sizes in effect; closed on exit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with plt.rc_context(_font_sizes(layout)):
        drawn = {"lazy_adam": _lazy_adam_figure(plt, layout), "pipelining": _pipelining_figure(plt, layout)}
        try:
            yield drawn
        finally:
            for fig in drawn.values():
                plt.close(fig)


def draw(out_dir: str = IMAGES) -> list[str]:
    """Write every figure in every layout into `out_dir` (lazy_adam.png, lazy_adam-phone.png, ...)."""
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for layout in LAYOUTS:
        with figures(layout) as drawn:
            for name, fig in drawn.items():
                paths.append(os.path.join(out_dir, f"{name}{layout.suffix}.png"))
                # The PNG names the matplotlib that drew it (metadata "Software"): with that version the
                # same numbers give the same bytes, which tests/docs/test_plots.py checks.
                fig.savefig(paths[-1], dpi=LOGICAL_DPI * DENSITY)
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
