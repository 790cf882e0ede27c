"""`tf.estimator.WarmStartSettings`: what a fresh model_dir takes from another checkpoint.

TensorFlow's fields and defaults (tensorflow_estimator 2.15), and its
selection rules (`warm_starting_util.warm_start`):

- `vars_to_warm_start` a regular expression (default `'.*'`): the
  *trainable* variables whose names it matches from their start
  (`re.match`): embedding tables and the dense state. Optimizer slots and
  `global_step` are not trainable, so they start fresh;
- a list of regular expressions: any variable they match, slots and
  `global_step` included;
- None: nothing (TensorFlow then warm-starts only the variables with a
  vocabulary in `var_name_to_vocab_info`, which this runner does not remap);
- `var_name_to_prev_var_name`: `{name here: name in the checkpoint}` for
  variables renamed since; a name it lists that nothing warm-starts is
  TensorFlow's ValueError.

Two fields are this project's, for checkpoints of a TPU job whose
`partition_strategy` was `'mod'` (see docs/checkpoints.md): `num_hosts`,
how many hosts wrote it (TensorFlow's TPU saves keep one row slice per
host, which tells it; a table saved whole needs it), and
`partition_strategy`, the source's (default: the EmbeddingConfigSpec's).

>>> settings = WarmStartSettings("gs://bucket/run", vars_to_warm_start=".*embedding.*")
>>> settings.vars_to_warm_start, settings.var_name_to_prev_var_name, settings.num_hosts
('.*embedding.*', {}, None)
"""

from __future__ import annotations

import collections
import os
import re
from typing import Any

__all__ = ["WarmStartSettings", "warm_start_settings", "selects"]


class WarmStartSettings(
    collections.namedtuple(
        "WarmStartSettings",
        (
            "ckpt_to_initialize_from",
            "vars_to_warm_start",
            "var_name_to_vocab_info",
            "var_name_to_prev_var_name",
            "num_hosts",
            "partition_strategy",
        ),
    )
):
    """`tf.estimator.WarmStartSettings` (+ `num_hosts`, `partition_strategy` for `mod` TPU checkpoints).

    Args:
      ckpt_to_initialize_from: a checkpoint prefix, a directory (its latest
        checkpoint: TensorFlow's or this runner's), or a SavedModel directory.
      vars_to_warm_start: a regex, a list of regexes, or None (see the module).
      var_name_to_vocab_info: vocabulary remapping; must be empty here.
      var_name_to_prev_var_name: `{current name: name in the checkpoint}`.
      num_hosts: the host count of the TPU job that wrote a `mod` checkpoint.
      partition_strategy: 'div' or 'mod', the source's (None: this program's).
    """

    def __new__(
        cls,
        ckpt_to_initialize_from,
        vars_to_warm_start=".*",
        var_name_to_vocab_info=None,
        var_name_to_prev_var_name=None,
        num_hosts=None,
        partition_strategy=None,
    ):
        if not ckpt_to_initialize_from:
            raise ValueError("`ckpt_to_initialize_from` MUST be set in WarmStartSettings")
        if isinstance(ckpt_to_initialize_from, bytes):
            try:
                ckpt_to_initialize_from = ckpt_to_initialize_from.decode()
            except UnicodeDecodeError as error:  # TensorFlow lets Python's own error out
                raise ValueError(
                    f"Argument `ckpt_to_initialize_from` (warm_start_from) must be a path; bytes are "
                    f"read as UTF-8 ({error}). Received: {ckpt_to_initialize_from!r}."
                ) from None
        if not isinstance(ckpt_to_initialize_from, (str, os.PathLike)):
            raise TypeError(
                f"`ckpt_to_initialize_from` must be a path (str). Received: {type(ckpt_to_initialize_from).__name__}."
            )
        if isinstance(vars_to_warm_start, (list, tuple)):
            if not all(isinstance(v, str) for v in vars_to_warm_start):
                raise ValueError(
                    "If `vars_to_warm_start` is a list, it must be all `Variable` or all `str`.  Given "
                    f"types are {[type(v) for v in vars_to_warm_start]}"
                )
            vars_to_warm_start = list(vars_to_warm_start)
        elif vars_to_warm_start is not None and not isinstance(vars_to_warm_start, str):
            raise ValueError(
                f"`vars_to_warm_start must be a `list` or `str`.  Given type is {type(vars_to_warm_start)}"
            )
        for pattern in [vars_to_warm_start] if isinstance(vars_to_warm_start, str) else vars_to_warm_start or []:
            try:
                re.compile(pattern)
            except re.error as error:
                raise ValueError(f"`vars_to_warm_start`: {pattern!r} is not a regular expression ({error}).") from None
        if var_name_to_vocab_info:
            raise NotImplementedError(
                "WarmStartSettings: `var_name_to_vocab_info` (remapping rows to a new vocabulary) is not supported "
                f"by this runner. Received entries for {sorted(var_name_to_vocab_info)}. Remap the table with numpy "
                "(tf.train.load_variable) and warm-start from a checkpoint in the new vocabulary."
            )
        mapping = dict(var_name_to_prev_var_name or {})
        for key, value in mapping.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(
                    "`var_name_to_prev_var_name` must map variable names (str) to names (str). "
                    f"Received: {key!r}: {value!r}."
                )
        if num_hosts is not None and (isinstance(num_hosts, bool) or not isinstance(num_hosts, int) or num_hosts < 1):
            raise ValueError(f"WarmStartSettings: `num_hosts` must be an int >= 1 or None. Received: {num_hosts!r}.")
        if partition_strategy not in (None, "div", "mod"):
            raise ValueError(
                "WarmStartSettings: `partition_strategy` must be 'div', 'mod' or None (the "
                f"EmbeddingConfigSpec's). Received: {partition_strategy!r}."
            )
        return super().__new__(
            cls, os.fspath(ckpt_to_initialize_from), vars_to_warm_start, {}, mapping, num_hosts, partition_strategy
        )


def warm_start_settings(warm_start_from: Any) -> WarmStartSettings | None:
    """TensorFlow's `_get_default_warm_start_settings`: a path -> WarmStartSettings(path); settings as given.

    TensorFlow's own `tf.estimator.WarmStartSettings` objects are taken too
    (any object with its four fields).
    """
    if warm_start_from is None:
        return None
    if isinstance(warm_start_from, (str, bytes, os.PathLike)):
        return WarmStartSettings(warm_start_from)
    if isinstance(warm_start_from, WarmStartSettings):
        return warm_start_from
    if all(hasattr(warm_start_from, f) for f in WarmStartSettings._fields[:4]):
        return WarmStartSettings(*(getattr(warm_start_from, f) for f in WarmStartSettings._fields[:4]))
    raise ValueError(f"warm_start_from must be a string or a WarmStartSettings, instead got {type(warm_start_from)}")


def selects(settings: WarmStartSettings, name: str, *, trainable: bool) -> bool:
    """Whether `settings.vars_to_warm_start` selects the variable `name` (a slot or the step is not trainable)."""
    patterns = settings.vars_to_warm_start
    if patterns is None:
        return False
    if isinstance(patterns, str):
        return trainable and re.match(patterns, name) is not None
    return any(re.match(pattern, name) is not None for pattern in patterns)
