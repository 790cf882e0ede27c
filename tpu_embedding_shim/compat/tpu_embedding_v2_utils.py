"""TensorFlow's v2 TPU embedding configuration (`tf.tpu.experimental.embedding`).

`TableConfig`, `FeatureConfig` and the optimizers `SGD`, `Adagrad`,
`AdagradMomentum`, `Adam` and `FTRL`, with TensorFlow's arguments, defaults
and checks (and ours where TensorFlow is lax). A learning rate is a number
or a zero-argument callable, evaluated at every `apply_gradients`.

>>> table = TableConfig(vocabulary_size=100, dim=8, name="video")
>>> FeatureConfig(table=table, name="watched").table.name
'video'
>>> Adam(beta_1=1.0)
Traceback (most recent call last):
...
ValueError: Argument `beta_1` of Adam must be a finite number >= 0.0 and < 1.0. Received: 1.0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..spec import AdagradMomentumSpec, AdagradSpec, AdamSpec, FtrlSpec, SGDSpec
from ..spec.checks import check_bool, check_callable, check_int, check_name, check_real, fail, is_real, parse_combiner
from ..spec.initializers import RowIdInitializer, TruncatedNormal, default_table_initializer  # noqa: F401
from .optimizer_lowering import lowers_to, optimizer_spec, same


def _clip_bounds(clipvalue: Any, owner: str) -> tuple[float | None, float | None]:
    """`clipvalue` -> (min, max): a scalar c means (-c, c); a pair is (min, max)."""
    if clipvalue is None:
        return None, None
    if isinstance(clipvalue, tuple):
        expected = "None, a number >= 0, or a (min, max) tuple of numbers or None with min <= max"
        if len(clipvalue) != 2:
            raise fail("clipvalue", expected, clipvalue, owner=owner)
        for bound in clipvalue:
            if bound is not None and not is_real(bound):
                raise fail(
                    "clipvalue",
                    expected,
                    clipvalue,
                    owner=owner,
                    error=TypeError if isinstance(bound, (str, bytes)) else ValueError,
                )
        low, high = clipvalue
        if low is not None and high is not None and low > high:
            raise fail("clipvalue", expected, clipvalue, owner=owner)
        return clipvalue
    check_real(
        "clipvalue",
        clipvalue,
        minimum=0.0,
        owner=owner,
        hint="A scalar c clips gradients to [-c, c]; pass a (min, max) tuple for other bounds.",
    )
    return -float(clipvalue), float(clipvalue)


class _Optimizer:
    """Options shared by every v2 TPU embedding optimizer."""

    zero_argument_learning_rate = True  # a callable learning rate takes no argument (evaluated per update)

    def __init__(
        self,
        learning_rate,
        use_gradient_accumulation,
        clip_weight_min,
        clip_weight_max,
        weight_decay_factor,
        multiply_weight_decay_factor_by_learning_rate,
        clipvalue=None,
        slot_variable_creation_fn=None,
        low_dimensional_packing_status=False,
    ):
        owner = type(self).__name__
        if not callable(learning_rate) and not is_real(learning_rate):
            raise fail(
                "learning_rate",
                "a number >= 0 or a zero-argument callable",
                learning_rate,
                error=TypeError if isinstance(learning_rate, str) else ValueError,
                owner=owner,
            )
        self.learning_rate = learning_rate
        self.use_gradient_accumulation = use_gradient_accumulation
        self.clip_weight_min = clip_weight_min
        self.clip_weight_max = clip_weight_max
        self.weight_decay_factor = weight_decay_factor
        self.multiply_weight_decay_factor_by_learning_rate = multiply_weight_decay_factor_by_learning_rate
        self.clip_gradient_min, self.clip_gradient_max = _clip_bounds(clipvalue, owner)
        self.slot_variable_creation_fn = check_callable(
            "slot_variable_creation_fn", slot_variable_creation_fn, owner=owner
        )
        self.low_dimensional_packing_status = check_bool(
            "low_dimensional_packing_status", low_dimensional_packing_status, owner=owner
        )

    def _validate(self) -> None:
        optimizer_spec(self)

    def _slot_names(self):
        return list(optimizer_spec(self).slot_initial_values())

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in sorted(vars(self).items()))
        return f"{type(self).__name__}({fields})"

    def __eq__(self, other):
        """TensorFlow's rule: an instance of this class with equal attributes (so `SGD(0.1) != SGD(0.2)`)."""
        return isinstance(other, type(self)) and vars(self) == vars(other)

    def __hash__(self):
        """TensorFlow's: the hash of every (attribute, value) pair, so equal optimizers hash equally."""
        return hash(tuple(vars(self).items()))


@lowers_to(SGDSpec)
class SGD(_Optimizer):
    """Stochastic gradient descent: `w -= lr * g`."""

    def __init__(
        self,
        learning_rate: float | Callable[[], float] = 0.01,
        use_gradient_accumulation: bool = True,
        clip_weight_min=None,
        clip_weight_max=None,
        weight_decay_factor=None,
        multiply_weight_decay_factor_by_learning_rate=None,
        clipvalue=None,
        low_dimensional_packing_status: bool = False,
    ):
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clipvalue,
            None,
            low_dimensional_packing_status,
        )
        self._validate()


@lowers_to(AdagradSpec, {"initial_accumulator": "initial_accumulator_value"})
class Adagrad(_Optimizer):
    """Adagrad; the `accumulators` slot starts at `initial_accumulator_value` (> 0)."""

    def __init__(
        self,
        learning_rate=0.001,
        initial_accumulator_value: float = 0.1,
        use_gradient_accumulation: bool = True,
        clip_weight_min=None,
        clip_weight_max=None,
        weight_decay_factor=None,
        multiply_weight_decay_factor_by_learning_rate=None,
        slot_variable_creation_fn=None,
        clipvalue=None,
        low_dimensional_packing_status: bool = False,
    ):
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clipvalue,
            slot_variable_creation_fn,
            low_dimensional_packing_status,
        )
        self.initial_accumulator_value = initial_accumulator_value
        self._validate()


@lowers_to(AdagradMomentumSpec, same("momentum", "use_nesterov", "exponent", "beta2", "epsilon"))
class AdagradMomentum(_Optimizer):
    """Adagrad with momentum; slots `accumulators` and `momenta`, both starting at 0."""

    def __init__(
        self,
        learning_rate=0.001,
        momentum: float = 0.0,
        use_nesterov: bool = False,
        exponent: float = 2,
        beta2: float = 1,
        epsilon: float = 1e-10,
        use_gradient_accumulation: bool = True,
        clip_weight_min=None,
        clip_weight_max=None,
        weight_decay_factor=None,
        multiply_weight_decay_factor_by_learning_rate=None,
        slot_variable_creation_fn=None,
        clipvalue=None,
        low_dimensional_packing_status: bool = False,
    ):
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clipvalue,
            slot_variable_creation_fn,
            low_dimensional_packing_status,
        )
        self.momentum = momentum
        self.use_nesterov = use_nesterov
        self.exponent = exponent
        self.beta2 = beta2
        self.epsilon = epsilon
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
class FTRL(_Optimizer):
    """FTRL-proximal; slots `accumulators` (initial value > 0) and `linears` (0)."""

    def __init__(
        self,
        learning_rate=0.001,
        learning_rate_power: float = -0.5,
        l1_regularization_strength: float = 0.0,
        l2_regularization_strength: float = 0.0,
        beta: float = 0.0,
        initial_accumulator_value: float = 0.1,
        use_gradient_accumulation: bool = True,
        clip_weight_min=None,
        clip_weight_max=None,
        weight_decay_factor=None,
        multiply_weight_decay_factor_by_learning_rate=None,
        slot_variable_creation_fn=None,
        clipvalue=None,
        multiply_linear_by_learning_rate: bool = False,
        allow_zero_accumulator: bool = False,
        low_dimensional_packing_status: bool = False,
    ):
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clipvalue,
            slot_variable_creation_fn,
            low_dimensional_packing_status,
        )
        check_real("initial_accumulator_value", initial_accumulator_value, minimum=0.0, min_open=True, owner="FTRL")
        self.learning_rate_power = learning_rate_power
        self.l1_regularization_strength = l1_regularization_strength
        self.l2_regularization_strength = l2_regularization_strength
        self.beta = beta
        self.initial_accumulator_value = initial_accumulator_value
        self.multiply_linear_by_learning_rate = multiply_linear_by_learning_rate
        self.allow_zero_accumulator = allow_zero_accumulator
        self._validate()


@lowers_to(AdamSpec, {"beta1": "beta_1", "beta2": "beta_2", **same("epsilon", "lazy_adam", "sum_inside_sqrt")})
class Adam(_Optimizer):
    """Adam without bias correction; slots `momenta` and `velocities`; lazy by default."""

    def __init__(
        self,
        learning_rate=0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-07,
        lazy_adam: bool = True,
        sum_inside_sqrt: bool = True,
        use_gradient_accumulation: bool = True,
        clip_weight_min=None,
        clip_weight_max=None,
        weight_decay_factor=None,
        multiply_weight_decay_factor_by_learning_rate=None,
        slot_variable_creation_fn=None,
        clipvalue=None,
        low_dimensional_packing_status: bool = False,
    ):
        super().__init__(
            learning_rate,
            use_gradient_accumulation,
            clip_weight_min,
            clip_weight_max,
            weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate,
            clipvalue,
            slot_variable_creation_fn,
            low_dimensional_packing_status,
        )
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.lazy_adam = lazy_adam
        self.sum_inside_sqrt = sum_inside_sqrt
        self._validate()


OPTIMIZER_CLASSES = (SGD, Adagrad, AdagradMomentum, Adam, FTRL)


class QuantizationConfig:
    """Simulated quantization of looked-up rows (forward pass only)."""

    def __init__(self, num_buckets: int, lower: float, upper: float):
        owner = "QuantizationConfig"
        check_int("num_buckets", num_buckets, minimum=2, owner=owner)
        check_real("lower", lower, owner=owner)
        check_real("upper", upper, minimum=float(lower), min_open=True, owner=owner)
        self.num_buckets, self.lower, self.upper = int(num_buckets), float(lower), float(upper)

    def __repr__(self):
        return f"QuantizationConfig(num_buckets={self.num_buckets}, lower={self.lower}, upper={self.upper})"


class TableConfig:
    """One embedding table of the mid-level API.

    Mutable, as TensorFlow's is: `TPUEmbedding` names unnamed tables
    `table_<i>` and gives optimizer-less tables the global optimizer.
    """

    def __init__(
        self,
        vocabulary_size: int,
        dim: int,
        initializer: Callable | None = None,
        optimizer: _Optimizer | None = None,
        combiner: str = "mean",
        name: str | None = None,
        quantization_config: QuantizationConfig | None = None,
        layout: Any = None,
    ):
        owner = "TableConfig"
        check_int("vocabulary_size", vocabulary_size, minimum=1, owner=owner)
        check_int("dim", dim, minimum=1, owner=owner)
        check_callable("initializer", initializer, owner=owner)
        if optimizer is not None and not isinstance(optimizer, _Optimizer):
            raise fail("optimizer", "None or one of SGD, Adagrad, AdagradMomentum, Adam, FTRL", optimizer, owner=owner)
        parse_combiner(combiner, owner=owner)
        if name is not None:
            check_name("name", name, owner=owner)
        if quantization_config is not None and not isinstance(quantization_config, QuantizationConfig):
            raise fail("quantization_config", "a QuantizationConfig or None", quantization_config, owner=owner)
        self.vocabulary_size = int(vocabulary_size)
        self.dim = int(dim)
        self.initializer = initializer if initializer is not None else default_table_initializer(dim)
        self.optimizer = optimizer
        self.combiner = combiner
        self.name = name
        self.quantization_config = quantization_config
        self.layout = layout

    def __repr__(self):
        """TensorFlow's text; the default initializer (truncated normal, mean 0, stddev 1/sqrt(dim)) prints as None."""
        initializer = self.initializer
        if (
            isinstance(initializer, TruncatedNormal)
            and initializer.mean == 0.0
            and math.isclose(initializer.stddev, 1 / math.sqrt(self.dim))
        ):
            initializer = None
        return (
            f"TableConfig(vocabulary_size={self.vocabulary_size!r}, dim={self.dim!r}, "
            f"initializer={initializer!r}, optimizer={self.optimizer!r}, combiner={self.combiner!r}, "
            f"name={self.name!r}, quantization_config={self.quantization_config!r})"
        )


class FeatureConfig:
    """One feature of the mid-level API: which table, sequence length, output shape."""

    def __init__(
        self,
        table: TableConfig,
        max_sequence_length: int = 0,
        validate_weights_and_indices: bool = True,
        output_shape: Any = None,
        name: str | None = None,
    ):
        owner = "FeatureConfig"
        if not isinstance(table, TableConfig):
            raise fail("table", "a tf.tpu.experimental.embedding.TableConfig", table, owner=owner)
        check_int("max_sequence_length", max_sequence_length, minimum=0, owner=owner)
        if validate_weights_and_indices is not True and validate_weights_and_indices is not False:
            raise fail("validate_weights_and_indices", "True or False", validate_weights_and_indices, owner=owner)
        if output_shape is not None:
            if not isinstance(output_shape, (list, tuple)):
                raise fail("output_shape", "None or a list of sizes", output_shape, error=TypeError, owner=owner)
            output_shape = [int(check_int("output_shape", d, minimum=1, owner=owner)) for d in output_shape]
        if name is not None:
            check_name("name", name, owner=owner)
        self.table = table
        self.max_sequence_length = int(max_sequence_length)
        self.validate_weights_and_indices = validate_weights_and_indices
        self.output_shape = output_shape
        self.name = name

    def __repr__(self):
        """TensorFlow's text, where `output_shape` is a `TensorShape`: `TensorShape([16, 4])`, `TensorShape(None)`."""
        return (
            f"FeatureConfig(table={self.table!r}, max_sequence_length={self.max_sequence_length!r}, "
            f"validate_weights_and_indices={self.validate_weights_and_indices!r}, "
            f"output_shape=TensorShape({self.output_shape!r}), name={self.name!r})"
        )
