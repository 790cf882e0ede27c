"""Report rows as data: each target keeps a table of option name -> `Rule`, built mostly from the rules here.

A rule answers one option of the source with its `Row`. Most options are
either mapped the same way whatever their value (`exact`, `converted`,
`impossible`), or exact while they are off and converted or impossible once
they are on (`when_on`: a flag set, a count above 0, a key given). An option
that needs the source (the feature's bucket count, the table's optimizer)
gets a function of its own in the target's table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .options import Option
from .report import CONVERTED, EXACT, IMPOSSIBLE, Row
from .source import MigrationInput

__all__ = [
    "Rule",
    "make_row",
    "exact",
    "converted",
    "impossible",
    "when_on",
    "from_tokens",
    "follows_weight_decay",
    "row_of",
]

Rule = Callable[[Option, MigrationInput], Row]
"""An option's report row, from the option and the source it belongs to."""
Text = str | Callable[[Option], str]
"""A row's target or how: fixed, or written from the option (its value, its table or feature)."""


def _text(text: Text, option: Option) -> str:
    return text(option) if callable(text) else text


def make_row(option: Option, status: str, target: str = "", how: str = "") -> Row:
    """The report row of `option`."""
    return Row(option.where, option.name, option.text, status, target, how)


def exact(target: Text, how: str = "") -> Rule:
    """The target does the same thing, whatever the value: `target` says how it is written there."""
    return lambda option, source: make_row(option, EXACT, _text(target, option), how)


def converted(target: str, how: Text) -> Rule:
    """The target does it after a conversion, whatever the value: `how` says which."""
    return lambda option, source: make_row(option, CONVERTED, target, _text(how, option))


def impossible(how: str) -> Rule:
    """The target cannot do it, whatever the value: `how` says what will differ."""
    return lambda option, source: make_row(option, IMPOSSIBLE, how=how)


def when_on(off: str, status: str, target: str, how: Text, *, on: Callable[[Any], bool] = bool) -> Rule:
    """Exact while the option is off (`off` says what the target does then); once `on(value)` (by default: a true
    value), a `status` row (converted or impossible) with `target` and `how`."""

    def rule(option: Option, source: MigrationInput) -> Row:
        if not on(option.value):
            return make_row(option, EXACT, off)
        return make_row(option, status, target, _text(how, option))

    return rule


def from_tokens(id_source: str) -> bool:
    """An `id_source` is on when the ids come from tokens (a vocabulary or hashing), not given as integers."""
    return id_source != "identity"


def follows_weight_decay(how: str) -> Rule:
    """multiply_weight_decay_factor_by_learning_rate: exact without weight decay (nothing to scale); else
    impossible (`how`), as the target has no weight decay to scale."""

    def rule(option: Option, source: MigrationInput) -> Row:
        optimizer = source.optimizer_for(option.table or "")
        if not getattr(optimizer, "weight_decay_factor", None):
            return make_row(option, EXACT, "(no weight decay)")
        return make_row(option, IMPOSSIBLE, how=how)

    return rule


def row_of(rules: Mapping[str, Rule], option: Option, source: MigrationInput, target: str) -> Row:
    """The row the rule of `option` in `rules` gives (KeyError naming the target and the option without one)."""
    rule = rules.get(option.name)
    if rule is None:
        raise KeyError(f"{target}: no rule for {option.where} option {option.name!r}")
    return rule(option, source)
