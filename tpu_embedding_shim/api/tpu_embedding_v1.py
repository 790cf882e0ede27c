"""TensorFlow's v1 TPU embedding configuration (`tensorflow/python/tpu/tpu_embedding.py`).

The optimizer parameter classes (`AdagradParameters`, `AdamParameters`,
`FtrlParameters`, `StochasticGradientDescentParameters`, and the Momentum,
RMSProp and ProximalAdagrad classes `EmbeddingConfigSpec` also accepts) and
the v1 `TableConfig` / `FeatureConfig` used with `feature_to_config_dict` and
`table_to_config_dict`. Signatures and defaults are TensorFlow 2.15's. Each
object is checked when built by lowering it to its spec (see `optimizer_lowering.py`),
so a bad value fails at the line that wrote it.

>>> AdagradParameters(0.1).initial_accumulator
0.1
>>> AdamParameters(0.1, beta1=1.0)
Traceback (most recent call last):
...
ValueError: Argument `beta1` of AdamParameters must be a finite number >= 0.0 and < 1.0. Received: 1.0.
"""

from __future__ import annotations

import collections
import inspect
from typing import Any

from ..spec import AdagradSpec, AdamSpec, FtrlSpec, MomentumSpec, ProximalAdagradSpec, RMSPropSpec, SGDSpec
from ..spec.checks import check_bool, check_callable, check_int, check_name, check_real, fail, parse_combiner
from ..spec.initializers import default_table_initializer
from .optimizer_base import REQUIRED, SHARED_OPTIONS, TensorFlowOptimizer, signature
from .optimizer_lowering import lowers_to


class _OptimizationParameters(TensorFlowOptimizer):
    """A v1 TPU embedding optimizer: equal to another of its class with the same attributes."""

    def __eq__(self, other):
        return type(self) is type(other) and vars(self) == vars(other)

    __hash__ = object.__hash__


# The arguments every v1 class ends with (FtrlParameters puts three of its own before them).
_CLIP = dict(clip_gradient_min=None, clip_gradient_max=None)


def _signature(**options: Any) -> inspect.Signature:
    """TensorFlow's order for every v1 class but FtrlParameters: `learning_rate` (required), the class's own
    `options`, then the shared ones."""
    return signature(learning_rate=REQUIRED, **options, **SHARED_OPTIONS, **_CLIP)


@lowers_to(AdagradSpec)
class AdagradParameters(_OptimizationParameters):
    """Adagrad: `a += g**2; w -= lr * g / sqrt(a)`, accumulator starting at `initial_accumulator`."""

    __signature__ = _signature(initial_accumulator=0.1)


@lowers_to(ProximalAdagradSpec)
class ProximalAdagradParameters(_OptimizationParameters):
    """Adagrad followed by l1 / l2 proximal shrinkage."""

    __signature__ = _signature(initial_accumulator=0.1, l1_regularization_strength=0.0, l2_regularization_strength=0.0)


@lowers_to(AdamSpec)
class AdamParameters(_OptimizationParameters):
    """Adam without bias correction; lazy (only touched rows) by default."""

    __signature__ = _signature(beta1=0.9, beta2=0.999, epsilon=1e-08, lazy_adam=True, sum_inside_sqrt=True)


@lowers_to(FtrlSpec)
class FtrlParameters(_OptimizationParameters):
    """FTRL-proximal, TensorFlow's TPU formulation; the `linears` slot starts at `initial_linear_value` (0)."""

    __signature__ = signature(
        learning_rate=REQUIRED,
        learning_rate_power=-0.5,
        initial_accumulator_value=0.1,
        l1_regularization_strength=0.0,
        l2_regularization_strength=0.0,
        **SHARED_OPTIONS,
        multiply_linear_by_learning_rate=False,
        beta=0,
        allow_zero_accumulator=False,
        **_CLIP,
    )

    def _store(self, arguments):
        super()._store(arguments)
        self.initial_linear_value = 0.0  # an attribute of TensorFlow's, not an argument


@lowers_to(SGDSpec)
class StochasticGradientDescentParameters(_OptimizationParameters):
    """Plain SGD: `w -= lr * g`."""

    __signature__ = _signature()


@lowers_to(MomentumSpec)
class MomentumParameters(_OptimizationParameters):
    """Momentum (optionally Nesterov): `m = momentum * m + g; w -= lr * m`."""

    __signature__ = _signature(momentum=REQUIRED, use_nesterov=False)


@lowers_to(RMSPropSpec)
class RMSPropParameters(_OptimizationParameters):
    """RMSProp with momentum."""

    __signature__ = _signature(rho=REQUIRED, momentum=REQUIRED, epsilon=REQUIRED)


OPTIMIZATION_PARAMETER_CLASSES = tuple(_OptimizationParameters.__subclasses__())  # every class above


class TableConfig(
    collections.namedtuple(
        "TableConfig",
        (
            "vocabulary_size",
            "dimension",
            "initializer",
            "combiner",
            "hot_id_replication",
            "learning_rate",
            "learning_rate_fn",
            "optimization_parameters",
        ),
    )
):
    """v1 table configuration, for `EmbeddingConfigSpec(table_to_config_dict=...)`.

    `learning_rate` or `learning_rate_fn` (a function of the global step)
    overrides the optimizer's learning rate for this table; at most one may
    be given. `optimization_parameters` overrides the spec's optimizer.
    """

    def __new__(
        cls,
        vocabulary_size,
        dimension,
        initializer=None,
        combiner="mean",
        hot_id_replication=False,
        learning_rate=None,
        learning_rate_fn=None,
        optimization_parameters=None,
    ):
        owner = "TableConfig"
        check_int("vocabulary_size", vocabulary_size, minimum=1, owner=owner)
        check_int("dimension", dimension, minimum=1, owner=owner)
        check_callable("initializer", initializer, owner=owner)
        if combiner is not None:
            parse_combiner(combiner, owner=owner)
        check_bool("hot_id_replication", hot_id_replication, owner=owner)
        if learning_rate is not None and learning_rate_fn is not None:
            raise ValueError(
                "TableConfig: give at most one of `learning_rate` and `learning_rate_fn`. "
                f"Received: learning_rate={learning_rate!r}, learning_rate_fn={learning_rate_fn!r}."
            )
        if learning_rate is not None:
            check_real("learning_rate", learning_rate, minimum=0.0, owner=owner)
        check_callable("learning_rate_fn", learning_rate_fn, owner=owner)
        if optimization_parameters is not None and not isinstance(optimization_parameters, _OptimizationParameters):
            raise fail(
                "optimization_parameters",
                "an instance of one of " + ", ".join(c.__name__ for c in OPTIMIZATION_PARAMETER_CLASSES) + " or None",
                optimization_parameters,
                owner=owner,
            )
        if initializer is None:
            initializer = default_table_initializer(dimension)
        return super().__new__(
            cls,
            int(vocabulary_size),
            int(dimension),
            initializer,
            combiner,
            hot_id_replication,
            learning_rate,
            learning_rate_fn,
            optimization_parameters,
        )


class FeatureConfig(collections.namedtuple("FeatureConfig", ("table_id", "max_sequence_length", "weight_key"))):
    """v1 feature configuration: which table, sequence length, weight key."""

    def __new__(cls, table_id, max_sequence_length=0, weight_key=None):
        owner = "FeatureConfig"
        check_name("table_id", table_id, owner=owner)
        check_int("max_sequence_length", max_sequence_length, minimum=0, owner=owner)
        if weight_key is not None:
            check_name("weight_key", weight_key, owner=owner)
        return super().__new__(cls, table_id, int(max_sequence_length), weight_key)
