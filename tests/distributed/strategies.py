"""Hypothesis strategies for the distributed tests: recipes (see `cases.py`) of specs, batches and steps."""

from engine.strategies import shared_options  # tests/engine/strategies.py (pytest puts tests/ on sys.path)
from hypothesis import strategies as st

from . import cases

KINDS = ["sgd", "adagrad", "adagrad_momentum", "adam", "ftrl", "momentum", "rmsprop", "proximal_adagrad"]


@st.composite
def optimizers(draw):
    """An optimizer recipe {'kind': ..., **fields}: every optimizer, its own options and the shared ones,
    a constant or scheduled ('schedule') learning rate."""
    kind = draw(st.sampled_from(KINDS))
    opts = {"kind": kind, "learning_rate": draw(st.sampled_from([0.1, 0.5, "schedule"])), **shared_options(draw)}
    if kind == "adagrad":
        opts.update(initial_accumulator=draw(st.sampled_from([0.1, 1.0])))
    elif kind == "adagrad_momentum":
        opts.update(
            momentum=draw(st.sampled_from([0.0, 0.9])),
            use_nesterov=draw(st.booleans()),
            exponent=draw(st.sampled_from([2.0, 1.7])),
            beta2=draw(st.sampled_from([1.0, 0.9])),
            epsilon=draw(st.sampled_from([1e-10, 1e-3])),
        )
    elif kind == "adam":
        opts.update(
            lazy_adam=draw(st.booleans()),  # non-lazy: every row of every rank moves every step
            beta1=draw(st.sampled_from([0.9, 0.0])),
            beta2=draw(st.sampled_from([0.999, 0.9])),
            epsilon=draw(st.sampled_from([1e-8, 1e-3])),
            sum_inside_sqrt=draw(st.booleans()),
        )
    elif kind == "ftrl":
        by_lr = draw(st.booleans())
        if not by_lr:
            opts["learning_rate"] = 0.2  # the paper form: a constant lr > 0
        opts.update(
            learning_rate_power=draw(st.sampled_from([-0.5, 0.0, -0.7])),
            initial_accumulator_value=draw(st.sampled_from([0.1, 1.0])),
            l1_regularization_strength=draw(st.sampled_from([0.0, 0.01])),
            l2_regularization_strength=draw(st.sampled_from([0.0, 0.1])),
            beta=draw(st.sampled_from([0.0, 0.5])),
            multiply_linear_by_learning_rate=by_lr,
        )
    elif kind == "momentum":
        opts.update(momentum=draw(st.sampled_from([0.5, 0.9])), use_nesterov=draw(st.booleans()))
    elif kind == "rmsprop":
        opts.update(
            rho=draw(st.sampled_from([0.5, 0.9])),
            momentum=draw(st.sampled_from([0.0, 0.7])),
            epsilon=draw(st.sampled_from([1e-10, 1e-3])),
        )
    elif kind == "proximal_adagrad":
        opts.update(
            initial_accumulator=draw(st.sampled_from([0.1, 1.0])),
            l1_regularization_strength=draw(st.sampled_from([0.0, 0.05])),
            l2_regularization_strength=draw(st.sampled_from([0.0, 0.3])),
        )
    return opts


@st.composite
def recipes(draw, world_size, pooling="exact"):
    """A case for `world_size` ranks: 1-3 tables (some smaller than the world, some shared by several
    features, some with their own optimizer), pooled, weighted and sequence features, div or mod with
    1-2 shards per rank, pipelining on or off, a gradient multiplier or not, 1-3 steps of a global batch
    split unevenly over the ranks (some with no example), inference lookups between steps, and perhaps a
    call that must fail. `pooling`: the engine's mode (the owner mode draws bags up to 12 ids long)."""
    tables, features = [], []
    for t in range(draw(st.integers(1, 3))):
        name = f"t{t}"
        tables.append(
            {
                "name": name,
                "vocab": draw(st.integers(1, 40)),
                "dim": draw(st.integers(1, 5)),
                "combiner": draw(st.sampled_from(["sum", "mean", "sqrtn"])),
                "optimizer": draw(st.none() | optimizers()),
                "quantization": draw(st.sampled_from([None, [3, -0.5, 0.5], [256, -2.0, 1.7]])),
            }
        )
        for f in range(draw(st.integers(1, 3))):
            kind = draw(st.sampled_from(["plain", "weighted", "sequence"]))
            features.append(
                {
                    "name": f"{name}f{f}",
                    "table": name,
                    "weighted": kind == "weighted",
                    "sequence_length": draw(st.integers(1, 4)) if kind == "sequence" else 0,
                    "safe": draw(st.booleans()),
                }
            )
    names = [f["name"] for f in features]
    steps = draw(st.integers(1, 3))
    batch_sizes = draw(st.lists(st.integers(0, 4), min_size=world_size, max_size=world_size))
    no_gradient = draw(st.lists(st.sampled_from(names), unique=True, max_size=1))
    options = {} if pooling == "exact" else {"pooling": pooling}
    return {
        **options,
        "tables": tables,
        "features": features,
        "optimizer": draw(optimizers()),
        "strategy": draw(st.sampled_from(["div", "mod"])),
        "shards_per_rank": draw(st.integers(1, 2)),
        "pipelining": draw(st.booleans()),
        "multiplier": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**31)),
        "data_seed": draw(st.integers(0, 2**31)),
        "steps": steps,
        "batch_sizes": batch_sizes,
        "max_ids": draw(st.integers(0, 6 if pooling == "exact" else 12)),
        "no_gradient": no_gradient,
        "inference": draw(st.lists(st.integers(0, steps - 1), unique=True, max_size=2)),
        "faults": draw(faults(steps, batch_sizes, trained=len(names) > len(no_gradient))),
    }


@st.composite
def faults(draw, steps, batch_sizes, trained):
    """No fault, or one call that must fail (`cases.FAULTS`) in the first example of a rank that has one."""
    ranks = [rank for rank, size in enumerate(batch_sizes) if size]
    kinds = [k for k in cases.FAULTS if trained or k in ("bad_id", "stale_result")]
    if not ranks or not draw(st.booleans()):
        return []
    step, kind, rank = draw(st.integers(0, steps - 1)), draw(st.sampled_from(kinds)), draw(st.sampled_from(ranks))
    return [{"step": step, "kind": kind, "rank": rank}]
