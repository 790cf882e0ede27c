"""`Engine` and `DistributedEngine` are one interface to the layers above: same members, same words."""

import inspect
import warnings

import pytest

from tpu_embedding_shim.engine import DistributedEngine, EmbeddingEngine, Engine, SingleProcess
from tpu_embedding_shim.spec import EmbeddingSpec, FeatureSpec, SGDSpec, TableSpec

SPEC = EmbeddingSpec(
    tables=(TableSpec(name="t", vocabulary_size=6, dim=2, combiner="sum"),),
    features=(FeatureSpec(name="f", table="t", num_buckets=6),),
    optimizer=SGDSpec(learning_rate=0.5),
    clipping_limit=1.0,
)
MEMBERS = [name for name in dir(EmbeddingEngine) if not name.startswith("_")]


def engines():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return Engine(SPEC, seed=0), DistributedEngine(SPEC, SingleProcess(), seed=0)


def test_both_engines_implement_the_interface_with_its_signatures():
    assert {"forward", "apply_gradients", "flush", "table", "slots", "state", "load_state", "describe"} <= set(MEMBERS)
    for engine in engines():
        assert isinstance(engine, EmbeddingEngine)
        for name in MEMBERS:
            declared = getattr(EmbeddingEngine, name)
            if callable(declared):
                assert (
                    list(inspect.signature(getattr(engine, name)).parameters)
                    == list(inspect.signature(declared).parameters)[1:]
                ), (type(engine).__name__, name)


@pytest.mark.parametrize("make", [lambda: Engine(SPEC), lambda: DistributedEngine(SPEC, SingleProcess())])
def test_both_engines_give_the_same_clipping_limit_warning_pointing_at_the_caller(make):
    with pytest.warns(UserWarning, match=r"clipping_limit=1.0 has no effect: TensorFlow stores it") as caught:
        make()
    assert caught[0].filename == __file__


def test_both_descriptions_say_the_same_things_in_the_same_words():
    one, ranks = (engine.describe() for engine in engines())
    assert one[0] == "CPU embedding engine: 1 table(s), 1 feature(s), 1 shard(s) per table by 'div'."
    assert ranks[0] == (
        "Distributed CPU embedding engine, rank 0 of 1 (SingleProcess()): 1 table(s), 1 feature(s), "
        "1 shard(s) per table by 'div', 1 per rank."
    )
    assert one[1].replace("shard sizes [6]", "ROWS") == ranks[1].replace("rows per rank [6] (this rank: 6)", "ROWS")
    ignored = "  clipping_limit=1.0 is ignored, as in TensorFlow."
    assert ignored in one and ignored in ranks
