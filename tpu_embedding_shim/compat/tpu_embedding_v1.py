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

from ..spec import AdagradSpec, AdamSpec, FtrlSpec, MomentumSpec, ProximalAdagradSpec, RMSPropSpec, SGDSpec
from ..spec.checks import check_bool, check_callable, check_int, check_name, check_real, fail, parse_combiner
from ..spec.initializers import default_table_initializer
from .optimizer_lowering import lowers_to, optimizer_spec, same


class _OptimizationParameters:
    """Options shared by every v1 TPU embedding optimizer."""

    def __init__(
        self,
        learning_rate,
        use_gradient_accumulation,
        clip_weight_min,
        clip_weight_max,
        weight_decay_factor,
        multiply_weight_decay_factor_by_learning_rate,
        clip_gradient_min=None,
        clip_gradient_max=None,
    ):
        self.learning_rate = learning_rate
        self.use_gradient_accumulation = use_gradient_accumulation
        self.clip_weight_min = clip_weight_min
        self.clip_weight_max = clip_weight_max
        self.weight_decay_factor = weight_decay_factor
        self.multiply_weight_decay_factor_by_learning_rate = multiply_weight_decay_factor_by_learning_rate
        self.clip_gradient_min = clip_gradient_min
        self.clip_gradient_max = clip_gradient_max

    def _validate(self) -> None:
        optimizer_spec(self)

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in sorted(vars(self).items()))
        return f"{type(self).__name__}({fields})"

    def __eq__(self, other):
        return type(self) is type(other) and vars(self) == vars(other)

    __hash__ = object.__hash__


@lowers_to(AdagradSpec, same("initial_accumulator"))
class AdagradParameters(_OptimizationParameters):
    """Adagrad: `a += g**2; w -= lr * g / sqrt(a)`, accumulator starting at `initial_accumulator`."""

    def __init__(
        self,
        learning_rate: float,
        initial_accumulator: float = 0.1,
        use_gradient_accumulation: bool = True,
        clip_weight_min=None,
        clip_weight_max=None,
        weight_decay_factor=None,
        multiply_weight_decay_factor_by_learning_rate=None,
        clip_gradient_min=None,
        clip_gradient_max=None,
    ):
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clip_gradient_min,
            clip_gradient_max,
        )
        self.initial_accumulator = initial_accumulator
        self._validate()


@lowers_to(ProximalAdagradSpec, same("initial_accumulator", "l1_regularization_strength", "l2_regularization_strength"))
class ProximalAdagradParameters(_OptimizationParameters):
    """Adagrad followed by l1 / l2 proximal shrinkage."""

    def __init__(
        self,
        learning_rate: float,
        initial_accumulator: float = 0.1,
        l1_regularization_strength: float = 0.0,
        l2_regularization_strength: float = 0.0,
        use_gradient_accumulation: bool = True,
        clip_weight_min=None,
        clip_weight_max=None,
        weight_decay_factor=None,
        multiply_weight_decay_factor_by_learning_rate=None,
        clip_gradient_min=None,
        clip_gradient_max=None,
    ):
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clip_gradient_min,
            clip_gradient_max,
        )
        self.initial_accumulator = initial_accumulator
        self.l1_regularization_strength = l1_regularization_strength
        self.l2_regularization_strength = l2_regularization_strength
        self._validate()


@lowers_to(AdamSpec, same("beta1", "beta2", "epsilon", "lazy_adam", "sum_inside_sqrt"))
class AdamParameters(_OptimizationParameters):
    """Adam without bias correction; lazy (only touched rows) by default."""

    def __init__(
        self,
        learning_rate: float,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-08,
        lazy_adam: bool = True,
        sum_inside_sqrt: bool = True,
        use_gradient_accumulation: bool = True,
        clip_weight_min=None,
        clip_weight_max=None,
        weight_decay_factor=None,
        multiply_weight_decay_factor_by_learning_rate=None,
        clip_gradient_min=None,
        clip_gradient_max=None,
    ):
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clip_gradient_min,
            clip_gradient_max,
        )
        self.beta1 = beta1
        self.beta2 = beta2
        self.epsilon = epsilon
        self.lazy_adam = lazy_adam
        self.sum_inside_sqrt = sum_inside_sqrt
        self._validate()


@lowers_to(
    FtrlSpec,
    same(
        "learning_rate_power",
        "initial_accumulator_value",
        "l1_regularization_strength",
        "l2_regularization_strength",
        "beta",
        "multiply_linear_by_learning_rate",
        "allow_zero_accumulator",
    ),
)
class FtrlParameters(_OptimizationParameters):
    """FTRL-proximal, TensorFlow's TPU formulation."""

    def __init__(
        self,
        learning_rate: float,
        learning_rate_power: float = -0.5,
        initial_accumulator_value: float = 0.1,
        l1_regularization_strength: float = 0.0,
        l2_regularization_strength: float = 0.0,
        use_gradient_accumulation: bool = True,
        clip_weight_min=None,
        clip_weight_max=None,
        weight_decay_factor=None,
        multiply_weight_decay_factor_by_learning_rate=None,
        multiply_linear_by_learning_rate: bool = False,
        beta: float = 0,
        allow_zero_accumulator: bool = False,
        clip_gradient_min=None,
        clip_gradient_max=None,
    ):
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clip_gradient_min,
            clip_gradient_max,
        )
        self.learning_rate_power = learning_rate_power
        self.initial_accumulator_value = initial_accumulator_value
        self.initial_linear_value = 0.0
        self.l1_regularization_strength = l1_regularization_strength
        self.l2_regularization_strength = l2_regularization_strength
        self.multiply_linear_by_learning_rate = multiply_linear_by_learning_rate
        self.beta = beta
        self.allow_zero_accumulator = allow_zero_accumulator
        self._validate()


@lowers_to(SGDSpec)
class StochasticGradientDescentParameters(_OptimizationParameters):
    """Plain SGD: `w -= lr * g`."""

    def __init__(
        self,
        learning_rate: float,
        use_gradient_accumulation: bool = True,
        clip_weight_min=None,
        clip_weight_max=None,
        weight_decay_factor=None,
        multiply_weight_decay_factor_by_learning_rate=None,
        clip_gradient_min=None,
        clip_gradient_max=None,
    ):
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clip_gradient_min,
            clip_gradient_max,
        )
        self._validate()


@lowers_to(MomentumSpec, same("momentum", "use_nesterov"))
class MomentumParameters(_OptimizationParameters):
    """Momentum (optionally Nesterov): `m = momentum * m + g; w -= lr * m`."""

    def __init__(
        self,
        learning_rate: float,
        momentum: float,
        use_nesterov: bool = False,
        use_gradient_accumulation: bool = True,
        clip_weight_min=None,
        clip_weight_max=None,
        weight_decay_factor=None,
        multiply_weight_decay_factor_by_learning_rate=None,
        clip_gradient_min=None,
        clip_gradient_max=None,
    ):
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clip_gradient_min,
            clip_gradient_max,
        )
        self.momentum = momentum
        self.use_nesterov = use_nesterov
        self._validate()


@lowers_to(RMSPropSpec, same("rho", "momentum", "epsilon"))
class RMSPropParameters(_OptimizationParameters):
    """RMSProp with momentum."""

    def __init__(
        self,
        learning_rate: float,
        rho: float,
        momentum: float,
        epsilon: float,
        use_gradient_accumulation: bool = True,
        clip_weight_min=None,
        clip_weight_max=None,
        weight_decay_factor=None,
        multiply_weight_decay_factor_by_learning_rate=None,
        clip_gradient_min=None,
        clip_gradient_max=None,
    ):
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clip_gradient_min,
            clip_gradient_max,
        )
        self.rho = rho
        self.momentum = momentum
        self.epsilon = epsilon
        self._validate()


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
