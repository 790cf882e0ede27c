"""The migration report: every option of the source, and how the target takes it.

Each option gets one `Row` with a status:

- `exact`: the target does the same thing with the same numbers;
- `converted`: the target does it after a conversion, which `how` says (a
  coefficient weight per id, an optimizer state written after building,
  preprocessing the caller must run);
- `impossible`: the target has no way to do it; `how` says what will differ.

`Report.check(allow_lossy=False)` raises `LossyMigrationError` naming every
impossible row, so nothing is dropped silently; with `allow_lossy=True` the
report keeps them, and `to_markdown()` puts them first. `to_markdown()`
writes the rows that differ only in their table or feature once, naming
them all (`features user, item, zip`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

__all__ = ["EXACT", "CONVERTED", "IMPOSSIBLE", "STATUSES", "Row", "Report", "LossyMigrationError"]

EXACT = "exact"
CONVERTED = "converted"
IMPOSSIBLE = "impossible"
STATUSES = (EXACT, CONVERTED, IMPOSSIBLE)


class LossyMigrationError(ValueError):
    """A migration would change what the model computes, and `allow_lossy=True` was not passed.

    Attributes:
      target: the target's title.
      rows: the impossible rows.
    """

    def __init__(self, target: str, rows: Sequence[Row]):
        self.target, self.rows = target, tuple(rows)
        super().__init__(self.explain("pass allow_lossy=True"))

    def explain(self, allow: str) -> str:
        """The message, with `allow` saying how to convert anyway (`pass allow_lossy=True`, `add --allow-lossy`)."""
        lines = "\n".join(f"  - {r.where}: {r.option}={r.value}: {r.how}" for r in self.rows)
        return (
            f"Migrating to {self.target} would change what the model computes; {len(self.rows)} option(s) "
            f"have no equivalent there:\n{lines}\n"
            f"Change them in the source, or {allow} to convert anyway: the report then lists what will differ."
        )


@dataclasses.dataclass(frozen=True)
class Row:
    """How one option of the source maps onto the target.

    Attributes:
      where: 'spec', 'table <name>' or 'feature <name>'.
      option: the option's name (an optimizer's hyper-parameter is 'optimizer.<field>').
      value: its value in the source, as text.
      status: 'exact', 'converted' or 'impossible'.
      target: what it becomes in the target ('' when nothing does).
      how: the conversion, or what will differ.
    """

    where: str
    option: str
    value: str
    status: str
    target: str = ""
    how: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(
                f"Row {self.where} / {self.option}: status must be one of {STATUSES}; got {self.status!r}."
            )
        if self.status != EXACT and not self.how:
            raise ValueError(f"Row {self.where} / {self.option}: a {self.status} row must say how (or what differs).")


@dataclasses.dataclass(frozen=True)
class Report:
    """The rows of one migration, in the source's order (spec, then each table, then each feature)."""

    target: str
    source: str
    rows: tuple[Row, ...]
    notes: tuple[str, ...] = ()

    def with_status(self, status: str) -> list[Row]:
        return [row for row in self.rows if row.status == status]

    @property
    def impossible(self) -> list[Row]:
        return self.with_status(IMPOSSIBLE)

    @property
    def lossless(self) -> bool:
        """True when the target computes what the source does (no impossible row)."""
        return not self.impossible

    def row(self, where: str, option: str) -> Row:
        """The row of `option` at `where` (KeyError naming what exists otherwise)."""
        for row in self.rows:
            if row.where == where and row.option == option:
                return row
        raise KeyError(f"No row for {where} / {option} in the {self.target} report.")

    def check(self, *, allow_lossy: bool) -> None:
        """Raises LossyMigrationError naming every impossible row, unless `allow_lossy`."""
        impossible = self.impossible
        if impossible and not allow_lossy:
            raise LossyMigrationError(self.target, impossible)

    def to_markdown(self) -> str:
        """The report as a markdown page: a summary, what will differ, the conversions, then every row."""
        counts = {status: len(self.with_status(status)) for status in STATUSES}
        out = [
            f"# Migration to {self.target}",
            "",
            f"Source: {self.source}",
            "",
            f"{len(self.rows)} options: {counts[EXACT]} exact, {counts[CONVERTED]} converted, "
            f"{counts[IMPOSSIBLE]} impossible.",
            "",
        ]
        if self.impossible:
            out += ["## What will differ", ""]
            out += [f"- **{where}**, `{r.option}` = `{r.value}`: {r.how}" for where, r in _grouped(self.impossible)]
            out.append("")
        converted = self.with_status(CONVERTED)
        if converted:
            out += ["## What to do (conversions)", ""]
            out += [
                f"- **{where}**, `{r.option}` = `{r.value}` → {r.target or '—'}: {r.how}"
                for where, r in _grouped(converted)
            ]
            out.append("")
        if self.notes:
            out += ["## Notes", ""] + [f"- {note}" for note in self.notes] + [""]
        out += [
            "## Every option",
            "",
            "| where | option | value | status | target | how |",
            "|---|---|---|---|---|---|",
        ]
        out += [
            "| " + " | ".join(_cell(c) for c in (where, f"`{r.option}`", r.value, r.status, r.target, r.how)) + " |"
            for where, r in _grouped(self.rows)
        ]
        return "\n".join(out) + "\n"


def _grouped(rows: Sequence[Row]) -> list[tuple[str, Row]]:
    """The rows, those that differ only in where they are (the same option, value and mapping on several
    tables or features) merged into one: ('features a, b, c', the first of them), in the order of the first."""
    groups: dict[tuple[str, ...], list[Row]] = {}
    for row in rows:
        kind, _, name = row.where.partition(" ")
        key = (kind if name else row.where, row.option, row.value, row.status, row.target, row.how)
        groups.setdefault(key, []).append(row)
    out = []
    for members in groups.values():
        first = members[0]
        if len(members) == 1:
            out.append((first.where, first))
            continue
        kind = first.where.partition(" ")[0]
        names = ", ".join(row.where.partition(" ")[2] for row in members)
        out.append((f"{kind}s {names}", first))
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
