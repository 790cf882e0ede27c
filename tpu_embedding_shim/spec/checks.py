"""Argument checks shared by every layer, with one message shape.

Every error says which argument, what was received and what is allowed, in
TensorFlow's own phrasing: "Argument `dim` must be an int >= 1. Received: 0."
A hint is appended when there is an obvious fix.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Any

COMBINERS = ("sum", "mean", "sqrtn")
PARTITION_STRATEGIES = ("div", "mod")


def fail(
    name: str,
    expected: str,
    value: Any,
    *,
    error: type[Exception] = ValueError,
    owner: str | None = None,
    hint: str | None = None,
) -> Exception:
    """Builds (does not raise) the project's standard argument error."""
    where = f" of {owner}" if owner else ""
    message = f"Argument `{name}`{where} must be {expected}. Received: {value!r}."
    if hint:
        message += f" {hint}"
    return error(message)


def is_int(value: Any) -> bool:
    """True for Python and numpy integers, False for bools and floats."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """True for finite Python and numpy real numbers, False for bools."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value))


def check_int(name: str, value: Any, *, minimum: int = 0, owner: str | None = None) -> int:
    """Returns `value` as an int if it is an integer >= `minimum`.

    A bool, a float (even 2.0) or a string is rejected: TensorFlow's TPU
    columns accept `dimension=2.5` and fail much later; we refuse at once.
    """
    if not is_int(value):
        error = TypeError if isinstance(value, (str, bytes)) else ValueError
        raise fail(name, f"an int >= {minimum}", value, error=error, owner=owner)
    if value < minimum:
        raise fail(name, f"an int >= {minimum}", value, owner=owner)
    return int(value)


def check_real(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    min_open: bool = False,
    max_open: bool = False,
    owner: str | None = None,
    hint: str | None = None,
) -> float:
    """Returns `value` as a float if it is a finite number inside the bounds."""
    parts = []
    if minimum is not None:
        parts.append(f"{'>' if min_open else '>='} {minimum}")
    if maximum is not None:
        parts.append(f"{'<' if max_open else '<='} {maximum}")
    expected = "a finite number" + (" " + " and ".join(parts) if parts else "")
    if not is_real(value):
        error = TypeError if isinstance(value, (str, bytes)) else ValueError
        raise fail(name, expected, value, error=error, owner=owner, hint=hint)
    number = float(value)
    too_low = minimum is not None and (number <= minimum if min_open else number < minimum)
    too_high = maximum is not None and (number >= maximum if max_open else number > maximum)
    if too_low or too_high:
        raise fail(name, expected, value, owner=owner, hint=hint)
    return number


def check_optional_real(name: str, value: Any, **bounds: Any) -> float | None:
    """Like `check_real`, but None passes through as None."""
    return None if value is None else check_real(name, value, **bounds)


def check_bool(name: str, value: Any, *, owner: str | None = None, error: type[Exception] = TypeError) -> bool:
    """Accepts only True or False (numpy bools included); `error` is the exception raised otherwise."""
    if value is True or value is False:
        return bool(value)
    if type(value).__name__ == "bool_":
        return bool(value)
    raise fail(name, "True or False", value, error=error, owner=owner)


def check_choice(
    name: str,
    value: Any,
    choices: Iterable[Any],
    *,
    owner: str | None = None,
    hint: str | None = None,
) -> Any:
    """Returns `value` if it is one of `choices` (exact match, case-sensitive)."""
    choices = tuple(choices)
    if not isinstance(value, str) or value not in choices:
        listed = ", ".join(repr(c) for c in choices)
        if hint is None and isinstance(value, str) and value.lower() in choices:
            hint = f"Names are case-sensitive: use {value.lower()!r}."
        raise fail(name, f"one of {listed}", value, owner=owner, hint=hint)
    return value


def check_callable(name: str, value: Any, *, owner: str | None = None, allow_none: bool = True) -> Any:
    """Accepts a callable (or None when `allow_none`)."""
    if value is None and allow_none:
        return None
    if not callable(value):
        raise fail(name, "callable" + (" or None" if allow_none else ""), value, owner=owner)
    return value


def check_list(name: str, value: Any, expected: str, *, owner: str | None = None, hint: str | None = None) -> Any:
    """Accepts a list or tuple; anything else is a TypeError saying what was `expected`."""
    if not isinstance(value, (list, tuple)):
        raise fail(name, expected, value, error=TypeError, owner=owner, hint=hint)
    return value


def check_name(name: str, value: Any, *, owner: str | None = None) -> str:
    """Accepts a non-empty string."""
    if not isinstance(value, str) or not value:
        raise fail(
            name, "a non-empty str", value, error=TypeError if not isinstance(value, str) else ValueError, owner=owner
        )
    return value


def parse_combiner(value: Any, *, name: str = "combiner", owner: str | None = None) -> str:
    """The one place a combiner name is parsed: 'sum', 'mean' or 'sqrtn'."""
    return str(check_choice(name, value, COMBINERS, owner=owner))


def parse_partition_strategy(value: Any, *, name: str = "partition_strategy", owner: str | None = None) -> str:
    """The one place a partition strategy is parsed: 'div' or 'mod'."""
    return str(check_choice(name, value, PARTITION_STRATEGIES, owner=owner))
