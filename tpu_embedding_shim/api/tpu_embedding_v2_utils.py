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

import inspect
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..spec import AdagradMomentumSpec, AdagradSpec, AdamSpec, FtrlSpec, SGDSpec
from ..spec.checks import (
    check_bool,
    check_callable,
    check_int,
    check_list,
    check_name,
    check_real,
    fail,
    is_real,
    parse_combiner,
)
from ..spec.initializers import RowIdInitializer, TruncatedNormal, default_table_initializer  # noqa: F401
from .optimizer_base import SHARED_OPTIONS, TensorFlowOptimizer, signature
from .optimizer_lowering import lowers_to, optimizer_spec


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


class _Optimizer(TensorFlowOptimizer):
    """A v2 TPU embedding optimizer.

    TensorFlow stores `clipvalue` as `clip_gradient_min` / `clip_gradient_max`,
    and `slot_variable_creation_fn` (None where the class has no such argument).
    """

    zero_argument_learning_rate = True  # a callable learning rate takes no argument (evaluated per update)

    def _store(self, arguments):
        owner = type(self).__name__
        learning_rate = arguments["learning_rate"]
        if not callable(learning_rate) and not is_real(learning_rate):
            raise fail(
                "learning_rate",
                "a number >= 0 or a zero-argument callable",
                learning_rate,
                error=TypeError if isinstance(learning_rate, str) else ValueError,
                owner=owner,
            )
        arguments["clip_gradient_min"], arguments["clip_gradient_max"] = _clip_bounds(arguments.pop("clipvalue"), owner)
        arguments.setdefault("slot_variable_creation_fn", None)
        check_callable("slot_variable_creation_fn", arguments["slot_variable_creation_fn"], owner=owner)
        check_bool("low_dimensional_packing_status", arguments["low_dimensional_packing_status"], owner=owner)
        super()._store(arguments)

    def _slot_names(self):
        return list(optimizer_spec(self).slot_initial_values())

    def __eq__(self, other):
        """TensorFlow's rule: an instance of this class with equal attributes (so `SGD(0.1) != SGD(0.2)`)."""
        return isinstance(other, type(self)) and vars(self) == vars(other)

    def __hash__(self):
        """TensorFlow's: the hash of every (attribute, value) pair, so equal optimizers hash equally."""
        return hash(tuple(vars(self).items()))


Optimizer = _Optimizer
"""The v2 optimizers' base class under a public name (TensorFlow names it `_Optimizer`): what a `TableConfig`
and the mid-level classes accept."""


# The arguments after the shared options of every class but SGD (FTRL puts two of its own before `_PACKING`).
_SLOTS_AND_CLIP = dict(slot_variable_creation_fn=None, clipvalue=None)
_PACKING = dict(low_dimensional_packing_status=False)


def _signature(**options: Any) -> inspect.Signature:
    """TensorFlow's order for Adagrad, AdagradMomentum and Adam: `learning_rate` (0.001), the class's own
    `options`, then the shared ones."""
    return signature(learning_rate=0.001, **options, **SHARED_OPTIONS, **_SLOTS_AND_CLIP, **_PACKING)


@lowers_to(SGDSpec)
class SGD(_Optimizer):
    """Stochastic gradient descent: `w -= lr * g`."""

    __signature__ = signature(learning_rate=0.01, **SHARED_OPTIONS, clipvalue=None, **_PACKING)


@lowers_to(AdagradSpec, initial_accumulator="initial_accumulator_value")
class Adagrad(_Optimizer):
    """Adagrad; the `accumulators` slot starts at `initial_accumulator_value` (> 0)."""

    __signature__ = _signature(initial_accumulator_value=0.1)


@lowers_to(AdagradMomentumSpec)
class AdagradMomentum(_Optimizer):
    """Adagrad with momentum; slots `accumulators` and `momenta`, both starting at 0."""

    __signature__ = _signature(momentum=0.0, use_nesterov=False, exponent=2, beta2=1, epsilon=1e-10)


@lowers_to(FtrlSpec)
class FTRL(_Optimizer):
    """FTRL-proximal; slots `accumulators` (initial value > 0) and `linears` (0)."""

    __signature__ = signature(
        learning_rate=0.001,
        learning_rate_power=-0.5,
        l1_regularization_strength=0.0,
        l2_regularization_strength=0.0,
        beta=0.0,
        initial_accumulator_value=0.1,
        **SHARED_OPTIONS,
        **_SLOTS_AND_CLIP,
        multiply_linear_by_learning_rate=False,
        allow_zero_accumulator=False,
        **_PACKING,
    )

    def _store(self, arguments):
        super()._store(arguments)
        check_real(
            "initial_accumulator_value", self.initial_accumulator_value, minimum=0.0, min_open=True, owner="FTRL"
        )


@lowers_to(AdamSpec, beta1="beta_1", beta2="beta_2")
class Adam(_Optimizer):
    """Adam without bias correction; slots `momenta` and `velocities`; lazy by default."""

    __signature__ = _signature(beta_1=0.9, beta_2=0.999, epsilon=1e-07, lazy_adam=True, sum_inside_sqrt=True)


OPTIMIZER_CLASSES = (SGD, Adagrad, AdagradMomentum, Adam, FTRL)


class CustomOptimizer(_Optimizer):
    """TensorFlow 2.21's `CustomOptimizer`: a per-row update function TensorFlow runs on SparseCores.

    Accepted and checked as TensorFlow checks it; TensorFlow 2.21's own
    `TPUEmbeddingV2.apply_gradients` refuses it ("Unsupported optimizer in
    minibatching mode."), and its `TPUEmbedding` cannot load it, so the
    mid-level classes here refuse it when they are built (see
    docs/sparsecore.md).
    """

    def __init__(
        self,
        custom_computation: Any,
        learning_rate: Any = 0.01,
        slot_names: Any = None,
        slot_initializers: Any = None,
        hyperparameters: Any = None,
        slot_dims: Any = None,
    ):
        owner = "CustomOptimizer"
        if not callable(learning_rate) and not is_real(learning_rate):
            raise fail("learning_rate", "a number >= 0 or a zero-argument callable", learning_rate, owner=owner)
        names = tuple(slot_names or ())
        initializers = tuple(slot_initializers or ())
        dims = tuple(slot_dims or ())
        if len(names) != len(initializers):
            raise ValueError(
                f"The number of slot_names ({len(names)}) must match the number of slot_initializers "
                f"({len(initializers)}). Received: slot_names={slot_names!r}."
            )
        if dims and len(dims) != len(names):
            raise ValueError(
                f"The number of slot_dims ({len(dims)}) must match the number of slot_names ({len(names)}). "
                f"Received: slot_dims={slot_dims!r}."
            )
        for name, dim in zip(names, dims):
            if dim not in (1, 2):
                raise ValueError(
                    f"Unsupported slot dim '{dim}' for slot '{name}'. Only 1D and 2D are supported "
                    "(Argument `slot_dims` of CustomOptimizer: each 1 or 2)."
                )
        vars(self).update(
            learning_rate=learning_rate,
            use_gradient_accumulation=False,
            clip_weight_min=None,
            clip_weight_max=None,
            clip_gradient_min=None,
            clip_gradient_max=None,
            weight_decay_factor=None,
            multiply_weight_decay_factor_by_learning_rate=None,
            slot_variable_creation_fn=None,
            low_dimensional_packing_status=False,
            _slot_names_attr=names,
            _slot_initializers_attr=initializers,
            _slot_dims_attr=dims,
            _hyperparameters=tuple(hyperparameters or ()),
            _custom_computation=custom_computation,
        )

    def _slot_names(self):
        return list(self._slot_names_attr)

    @property
    def hyperparameters(self) -> tuple:
        return self._hyperparameters

    @property
    def custom_computation(self) -> Any:
        return self._custom_computation

    @property
    def slot_dims(self) -> tuple:
        return self._slot_dims_attr


class CustomCombiner:
    """TensorFlow 2.21's `CustomCombiner`: a per-sample combiner function TensorFlow runs on SparseCores.

    Accepted and checked as TensorFlow checks it; a table that uses it is
    refused when a mid-level object is built (TensorFlow 2.21 cannot run it
    either: its SparseCore preprocessing takes the combiner as a string).
    """

    CUSTOM_COMBINER_SLOT_NAME = "custom_combiner_variables"

    def __init__(
        self,
        combiner_computation: Any,
        max_valency: int,
        num_weights: int = 0,
        initializer: Any = None,
        combiner_weights_learning_rate: Any = 0.01,
    ):
        if num_weights > 0 and initializer is None:
            raise ValueError(
                "When `num_weights` is greater than 0, `initializer` must be set. Received: "
                f"num_weights={num_weights!r}, initializer=None."
            )
        self.slot_variable_creation_fn = None
        self.combiner = "custom_combiner_" + str(hash(combiner_computation))
        self.combiner_computation = combiner_computation
        self.max_valency = max_valency
        self.num_weights = num_weights
        self.combiner_weights_learning_rate = combiner_weights_learning_rate
        self._slot_names_attr = (self.CUSTOM_COMBINER_SLOT_NAME,)
        self._slot_initializers_attr = (initializer,) if initializer is not None else ()

    def _slot_names(self) -> list[str]:
        return list(self._slot_names_attr) if self.num_weights > 0 else []

    def __str__(self) -> str:
        return self.combiner


class QuantizationConfig:
    """Simulated quantization of looked-up rows (forward pass only), TensorFlow's rule:

    each looked-up value is clipped to [lower, upper] and rounded to the
    nearest of `num_buckets` evenly spaced levels before the combiner
    (`spec.QuantizationSpec`; TPU lookups only, serving reads the table as
    stored: docs/mid_level_api.md "Quantized tables").
    """

    def __init__(self, num_buckets: int, lower: float, upper: float):
        owner = "QuantizationConfig"
        if is_real(num_buckets) and num_buckets < 2:  # TensorFlow's one check, with its type
            raise ValueError(
                f"num_buckets is {num_buckets}, must be at least 2 for simulated quantization. "
                f"(Argument `num_buckets` of {owner}: an int >= 2.)"
            )
        check_int("num_buckets", num_buckets, minimum=2, owner=owner)
        check_real("lower", lower, owner=owner)
        check_real("upper", upper, minimum=float(lower), min_open=True, owner=owner)
        self.num_buckets, self.lower, self.upper = int(num_buckets), float(lower), float(upper)

    def __repr__(self):
        return f"QuantizationConfig(num_buckets={self.num_buckets}, lower={self.lower}, upper={self.upper})"


TABLE_DTYPES = (np.dtype("float32"), np.dtype("int32"))


def _table_dtype(dtype: Any) -> np.dtype:
    """`TableConfig(dtype=)`: float32 or int32, as a numpy dtype (a TensorFlow `DType` works too)."""
    try:
        parsed = np.dtype(getattr(dtype, "as_numpy_dtype", dtype))
    except TypeError:
        parsed = None
    if parsed not in TABLE_DTYPES:
        raise ValueError(
            f"Argument `dtype` must be either float32 or int32. Received: {dtype}. (Argument `dtype` of "
            "TableConfig: tf.float32, tf.int32 or their numpy / string forms.)"
        )
    return parsed


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
        dtype: Any = np.float32,
    ):
        owner = "TableConfig"
        check_int("vocabulary_size", vocabulary_size, minimum=1, owner=owner)
        check_int("dim", dim, minimum=1, owner=owner)
        check_callable("initializer", initializer, owner=owner)
        if optimizer is not None and not isinstance(optimizer, _Optimizer):
            raise fail("optimizer", "None or one of SGD, Adagrad, AdagradMomentum, Adam, FTRL", optimizer, owner=owner)
        if isinstance(combiner, str):
            parse_combiner(combiner, owner=owner)
        elif not isinstance(combiner, CustomCombiner):
            raise fail("combiner", "'mean', 'sum', 'sqrtn' or a CustomCombiner", combiner, owner=owner)
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
        self.dtype = _table_dtype(dtype)

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
            check_list("output_shape", output_shape, "None or a list of sizes", owner=owner)
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
