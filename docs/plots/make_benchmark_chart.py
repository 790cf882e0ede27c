"""The results tables and the chart of docs/benchmarks.md, from one file of numbers.

docs/plots/benchmark_results.csv holds the table `python -m benchmarks` printed for the run the page
reports, one row per variant, its cells as printed (the harness's column names; "n/a" where a peer did
not run, "-" where a ratio has no operands). Everything on the page that shows those numbers is made from
it here, so no figure is typed twice:

- the tables between `<!-- generated: NAME -->` and `<!-- end generated: NAME -->` in docs/benchmarks.md
  (the summary, step times, the bound, the lookup alone, the workloads);
- the chart, an SVG drawn without any plotting library in two layouts: docs/images/benchmark_ratios.svg
  for the content column at 1280 px (688 px wide) and benchmark_ratios_narrow.svg for a phone (358 px).
  Per variant it puts the engine's time over torch's and over FBGEMM's (computed from the rounded
  milliseconds of the CSV) and the harness's "back to back / bound" on one logarithmic axis.

Run from the repository top after changing the CSV; tests/docs/test_benchmark_chart.py fails while the
page or the images differ from what this writes:

    python docs/plots/make_benchmark_chart.py          # rewrite the page's tables and the two SVGs
    python docs/plots/make_benchmark_chart.py --check  # exit 1 if anything would change
"""

import csv
import math
import os
import re
import sys
from dataclasses import dataclass
from xml.sax.saxutils import escape

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS = os.path.normpath(os.path.join(HERE, os.pardir))
RESULTS = os.path.join(HERE, "benchmark_results.csv")
PAGE = os.path.join(DOCS, "benchmarks.md")
IMAGES = os.path.join(DOCS, "images")

# The headline variants of the page's first table; the chart and the detail tables show every variant.
SUMMARY_VARIANTS = (
    "main-uniform",
    "main-zipf",
    "adam-lazy",
    "d16",
    "d256",
    "v10m",
    "criteo26",
    "sequence",
    "fwd-v1m",
)


def load(path: str = RESULTS) -> list[dict[str, str]]:
    """The CSV's rows, each a dict of column name -> cell text, in the harness's order."""
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def number(cell: str) -> float | None:
    """A cell's value, or None for "n/a", "-", "missing", "disagrees"."""
    try:
        return float(cell)
    except ValueError:
        return None


def ratios(row: dict[str, str]) -> dict[str, float | None]:
    """The chart's three ratios for one variant: engine / torch, engine / FBGEMM (None if the peer did not
    run), and the harness's engine back to back / bound."""
    engine = number(row["engine"])
    out: dict[str, float | None] = {}
    for peer in ("torch", "fbgemm"):
        other = number(row[peer])
        out[peer] = engine / other if engine is not None and other else None
    out["bound"] = number(row["back to back / bound"])
    return out


# ---- the page's tables ----------------------------------------------------------------------------------

# Each table: (header, CSV column) per column; the variant's name is shown as code, numbers right-aligned.
TABLES: dict[str, list[tuple[str, str]]] = {
    "summary": [
        ("variant", "variant"),
        ("engine, ms", "engine"),
        ("torch, ms", "torch"),
        ("FBGEMM, ms", "fbgemm"),
        ("engine / best peer", "engine / best peer"),
        ("back to back / bound", "back to back / bound"),
    ],
    "step": [
        ("variant", "variant"),
        ("engine", "engine"),
        ("torch", "torch"),
        ("FBGEMM", "fbgemm"),
        ("numpy", "numpy"),
        ("engine / best peer", "engine / best peer"),
    ],
    "bound": [
        ("variant", "variant"),
        ("bound, ms", "bound"),
        ("engine / bound", "engine / bound"),
        ("engine back to back, ms", "engine back to back"),
        ("back to back / bound", "back to back / bound"),
    ],
    "lookup": [
        ("variant", "variant"),
        ("engine, ms", "fwd engine"),
        ("torch, ms", "fwd torch"),
        ("engine / torch", "fwd engine / torch"),
    ],
    "workloads": [("variant", "variant"), ("workload", "workload"), ("peak RSS, MB", "peak RSS MB")],
}


def table(name: str, rows: list[dict[str, str]]) -> str:
    """One of the page's tables (TABLES[name]) as Markdown."""
    columns = TABLES[name]
    if name == "summary":
        rows = [r for v in SUMMARY_VARIANTS for r in rows if r["variant"] == v]
    lines = ["| " + " | ".join(header for header, _ in columns) + " |"]
    lines.append("|" + "|".join("---" if key in ("variant", "workload") else "---:" for _, key in columns) + "|")
    for row in rows:
        cells = [f"`{row[key]}`" if key == "variant" else row[key] for _, key in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def marker(name: str, end: bool = False) -> str:
    """The HTML comment that opens (or closes) a generated table in the page."""
    if end:
        return f"<!-- end generated: {name} -->"
    return f"<!-- generated: {name} (docs/plots/make_benchmark_chart.py, from benchmark_results.csv) -->"


def render_page(text: str, rows: list[dict[str, str]]) -> str:
    """The page with every generated table replaced by its current form; each must be there once."""
    for name in TABLES:
        pattern = re.compile(re.escape(marker(name)) + r"\n.*?" + re.escape(marker(name, end=True)), re.S)
        found = len(pattern.findall(text))
        if found != 1:
            raise ValueError(f"docs/benchmarks.md must hold the generated table {name!r} once; found {found}")
        generated = f"{marker(name)}\n\n{table(name, rows)}\n\n{marker(name, end=True)}"
        text = pattern.sub(lambda _, generated=generated: generated, text)
    return text


# ---- the chart ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """The chart's geometry, in px at the width it is shown (the SVG's own units)."""

    width: int
    title: tuple[str, ...]  # a line each
    axis_note: str  # under the axis
    font: float  # every text; the smallest shown on the page
    label_width: int  # the column of variant names
    row_height: int
    legend_rows: tuple[tuple[str, ...], ...]  # the legend's keys (SERIES), a line each
    tick_labels: tuple[float, ...]  # the ticks that get a number (every tick gets a line)


# The content column of the site at a 1280 px window, and on a 390 px phone.
WIDE = Layout(
    width=688,
    title=("Engine time ÷ reference time, per variant (log scale)",),
    axis_note="left of 1: the engine is faster (or under the bound)",
    font=13,
    label_width=160,
    row_height=19,
    legend_rows=(("torch", "fbgemm", "bound"),),
    tick_labels=(0.05, 0.1, 0.2, 0.5, 1, 2, 4),
)
NARROW = Layout(
    width=358,
    title=("Engine time ÷ reference time,", "per variant (log scale)"),
    axis_note="left of 1: the engine is faster",
    font=12,
    label_width=144,
    row_height=20,
    legend_rows=(("torch", "fbgemm"), ("bound",)),
    tick_labels=(0.1, 0.2, 0.5, 1, 2, 4),
)

LOW, HIGH = 0.035, 5.0  # the axis; a ratio outside it is an error, not a marker off the chart
TICKS = (0.05, 0.1, 0.2, 0.5, 1, 2, 4)
SERIES = {  # key: (legend text, colour, shape)
    "torch": ("engine / torch", "#d95f02", "circle"),
    "fbgemm": ("engine / FBGEMM", "#1b7e5f", "square"),
    "bound": ("engine back to back / bound", "#3559c7", "diamond"),
}
FONT = "DejaVu Sans, Verdana, Arial, sans-serif"


def _x(layout: Layout, value: float) -> float:
    left, right = layout.label_width, layout.width - 14
    return left + (right - left) * math.log(value / LOW) / math.log(HIGH / LOW)


def _shape(kind: str, x: float, y: float, colour: str, title: str) -> str:
    """A marker (circle, square or diamond) centred on (x, y), its value as a tooltip."""
    if kind == "circle":
        tag, where = "circle", f'cx="{x:.1f}" cy="{y:.1f}" r="5"'
    elif kind == "square":
        tag, where = "rect", f'x="{x - 4.5:.1f}" y="{y - 4.5:.1f}" width="9" height="9"'
    else:
        corners = ((x, y - 6), (x + 6, y), (x, y + 6), (x - 6, y))
        tag, where = "polygon", 'points="' + " ".join(f"{cx:.1f},{cy:.1f}" for cx, cy in corners) + '"'
    return f'<{tag} {where} fill="{colour}" stroke="#fff" stroke-width="1"><title>{escape(title)}</title></{tag}>'


def _text(x: float, y: float, text: str, size: float, anchor: str = "start", extra: str = "") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size:g}" text-anchor="{anchor}"{extra}>{escape(text)}</text>'


def chart_svg(rows: list[dict[str, str]], layout: Layout) -> str:
    """The chart as an SVG document: a row per variant, a marker per ratio, 1 marked."""
    f = layout.font
    bands: list[str] = []  # a light band behind every other row, drawn first
    out: list[str] = []
    y = 0.0
    for line in layout.title:
        y += f + 6
        out.append(_text(6, y, line, f + 1, extra=' font-weight="bold"'))
    for keys in layout.legend_rows:  # the legend, each key a marker and its text
        y += f + 10
        x = 14.0
        for key in keys:
            text, colour, shape = SERIES[key]
            out.append(_shape(shape, x, y - f * 0.35, colour, text))
            out.append(_text(x + 10, y, text, f))
            x += 10 + 0.64 * f * len(text) + 24
    top = y + 2 * f + 18  # the numbers of the top axis, then the rows
    bottom = top + 6 + layout.row_height * len(rows)
    for tick in TICKS:
        x = _x(layout, tick)
        colour, width = ("#333", 1.5) if tick == 1 else ("#d0d0d0", 1)
        ends = f'x1="{x:.1f}" y1="{top - f:.1f}" x2="{x:.1f}" y2="{bottom:.1f}"'
        out.append(f'<line {ends} stroke="{colour}" stroke-width="{width}"/>')
        if tick in layout.tick_labels:
            for ty in (top - f - 4, bottom + f + 4):
                out.append(_text(x, ty, f"{tick:g}", f, "middle"))
    for i, row in enumerate(rows):
        cy = top + 6 + layout.row_height * (i + 0.5)
        if i % 2 == 0:
            band = f'y="{cy - layout.row_height / 2:.1f}" width="{layout.width}" height="{layout.row_height}"'
            bands.append(f'<rect x="0" {band} fill="#f2f4f7"/>')
        out.append(_text(layout.label_width - 8, cy + f * 0.35, row["variant"], f, "end"))
        for key, value in sorted(ratios(row).items(), key=lambda kv: kv[0] != "bound"):
            if value is not None:
                if not LOW <= value <= HIGH:
                    raise ValueError(f"{row['variant']}: {key} ratio {value:.3g} is off the axis ({LOW}-{HIGH})")
                text, colour, shape = SERIES[key]
                out.append(_shape(shape, _x(layout, value), cy, colour, f"{row['variant']}: {text} {value:.2f}"))
    out.append(_text(layout.width / 2, bottom + 2 * f + 12, layout.axis_note, f, "middle"))
    height = math.ceil(bottom + 2 * f + 20)
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{layout.width}" height="{height}" '
        f'viewBox="0 0 {layout.width} {height}" font-family="{FONT}" fill="#1a1a1a">\n'
        "<title>The engine's step time over torch's, over FBGEMM's, and back to back over the bandwidth "
        "bound, for every variant of docs/benchmarks.md</title>\n"
        f'<rect width="{layout.width}" height="{height}" fill="#fff"/>\n'
    )
    return head + "\n".join(bands + out) + "\n</svg>\n"


# ---- writing ----------------------------------------------------------------------------------------------


def outputs(rows: list[dict[str, str]] | None = None) -> dict[str, str]:
    """Every file this script writes (path -> text): the page and the two SVGs."""
    rows = load() if rows is None else rows
    with open(PAGE, encoding="utf-8") as f:
        page = f.read()
    return {
        PAGE: render_page(page, rows),
        os.path.join(IMAGES, "benchmark_ratios.svg"): chart_svg(rows, WIDE),
        os.path.join(IMAGES, "benchmark_ratios_narrow.svg"): chart_svg(rows, NARROW),
    }


def stale() -> list[str]:
    """The files that differ from what this script writes."""
    changed = []
    for path, text in outputs().items():
        if not os.path.isfile(path):
            changed.append(path)
            continue
        with open(path, encoding="utf-8") as f:
            if f.read() != text:
                changed.append(path)
    return changed


def main(argv: list[str]) -> int:
    """Write the page's tables and the charts, or with --check only say which would change."""
    if "--check" in argv[1:]:
        changed = stale()
        for path in changed:
            print("out of date:", os.path.relpath(path))
        return 1 if changed else 0
    for path, text in outputs().items():
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        print("wrote", os.path.relpath(path))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
