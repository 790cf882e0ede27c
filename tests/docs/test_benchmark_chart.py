"""docs/benchmarks.md's tables and chart come from one file of numbers, and say what it says.

docs/plots/make_benchmark_chart.py makes the page's results tables and the two SVG charts from
docs/plots/benchmark_results.csv (the harness's table of one run). These tests fail when the page or the
committed images differ from what the script makes, when the CSV's own ratios do not follow from its
times, and when a figure the page's prose quotes no longer follows from the CSV.
"""

import re
import xml.etree.ElementTree as ET

import pytest

from .scripts import DOCS, load_script

SVG = "{http://www.w3.org/2000/svg}"


chart = load_script("make_benchmark_chart")
ROWS = chart.load()
PAGE = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
CONTENT_WIDTH = {"benchmark_ratios.svg": 688, "benchmark_ratios_narrow.svg": 358}  # the site's column, px


def _by_variant(name):
    return next(r for r in ROWS if r["variant"] == name)


def test_the_page_and_the_images_are_what_the_script_makes():
    assert chart.stale() == []


def test_the_csv_holds_one_run_of_every_variant_with_the_harness_columns():
    assert list(ROWS[0]) == [
        "variant",
        "workload",
        "engine",
        "torch",
        "fbgemm",
        "numpy",
        "engine / best peer",
        "bound",
        "engine / bound",
        "engine back to back",
        "back to back / bound",
        "fwd engine",
        "fwd torch",
        "fwd engine / torch",
        "peak RSS MB",
    ]
    names = [r["variant"] for r in ROWS]
    assert len(names) == len(set(names)) == 28
    assert set(chart.SUMMARY_VARIANTS) <= set(names)


def _quotient_range(a: str, b: str, digits_a: int, digits_b: int) -> tuple[float, float]:
    """The interval a / b can lie in, given that a and b were rounded to these many decimals."""
    ha, hb = 0.5 * 10**-digits_a, 0.5 * 10**-digits_b
    return (float(a) - ha) / (float(b) + hb), (float(a) + ha) / (float(b) - hb)


def _digits(cell: str) -> int:
    return len(cell.split(".")[1]) if "." in cell else 0


@pytest.mark.parametrize(
    "ratio, numerator, denominators",
    [
        ("engine / best peer", "engine", ("torch", "fbgemm", "numpy")),
        ("engine / bound", "engine", ("bound",)),
        ("back to back / bound", "engine back to back", ("bound",)),
        ("fwd engine / torch", "fwd engine", ("fwd torch",)),
    ],
)
def test_each_ratio_of_the_csv_follows_from_its_times(ratio, numerator, denominators):
    """The harness divides unrounded times: each printed ratio must lie in the interval the rounded
    times allow (the best peer being the fastest that ran), so the CSV is one consistent run."""
    for row in ROWS:
        shown = row[ratio]
        others = [row[d] for d in denominators if chart.number(row[d]) is not None]
        if shown == "-":
            assert chart.number(row[numerator]) is None or not others, row["variant"]
            continue
        best = min(others, key=float)
        low, high = _quotient_range(row[numerator], best, _digits(row[numerator]), _digits(best))
        assert low - 0.005 <= float(shown) <= high + 0.005, (row["variant"], ratio, shown, low, high)


def test_the_chart_ratios():
    main = chart.ratios(_by_variant("main-uniform"))
    assert main["torch"] == pytest.approx(5.8 / 50.5)
    assert main["fbgemm"] == pytest.approx(5.8 / 31.6)
    assert main["bound"] == 0.86  # the harness's own, not recomputed
    assert chart.ratios(_by_variant("ftrl")) == {"torch": None, "fbgemm": None, "bound": 1.06}
    assert chart.ratios(_by_variant("v10m"))["fbgemm"] is None


@pytest.mark.parametrize("name", sorted(CONTENT_WIDTH))
def test_the_chart_is_a_small_svg_with_a_marker_per_ratio_and_text_legible_at_the_column_width(name):
    path = DOCS / "images" / name
    assert path.stat().st_size < 40_000
    root = ET.fromstring(path.read_text(encoding="utf-8"))
    width = float(root.get("width"))
    assert width == CONTENT_WIDTH[name]  # shown at its own size: one SVG unit is one CSS pixel
    sizes = [float(t.get("font-size")) for t in root.iter(SVG + "text")]
    assert min(sizes) >= 12
    shapes = (SVG + "circle", SVG + "rect", SVG + "polygon")
    markers = [e for e in root.iter() if e.tag in shapes and e.find(SVG + "title") is not None]
    legend = len(chart.SERIES)
    expected = sum(v is not None for r in ROWS for v in chart.ratios(r).values())
    assert len(markers) == expected + legend
    titles = {m.find(SVG + "title").text for m in markers}
    assert "sequence: engine back to back / bound 2.77" in titles
    assert "main-uniform: engine / FBGEMM 0.18" in titles
    labels = [t.text for t in root.iter(SVG + "text")]
    assert [v for v in labels if v in {r["variant"] for r in ROWS}] == [r["variant"] for r in ROWS]


def test_the_page_shows_both_charts_with_the_same_description():
    shown = re.findall(r"!\[([^\]]+)\]\(images/(benchmark_ratios(?:_narrow)?\.svg)\)", PAGE)
    assert [name for _, name in shown] == ["benchmark_ratios.svg", "benchmark_ratios_narrow.svg"]
    assert shown[0][0] == shown[1][0]


def test_the_figures_the_prose_quotes_follow_from_the_csv():
    training = [r for r in ROWS if not r["variant"].startswith("fwd-")]
    best = [float(r["engine / best peer"]) for r in training]
    assert f"{min(best):.2f}-{max(best):.2f}x the time of the fastest peer" in PAGE.replace("\n  ", " ")
    b2b = [float(r["back to back / bound"]) for r in ROWS]
    within = max(v for v in b2b if v < 1.2)
    count = sum(v <= within for v in b2b)
    assert f"{count} of the {len(ROWS)} variants run back to back within {within:.2f}x" in PAGE.replace("\n", " ")
    lookup = {r["variant"]: r["fwd engine / torch"] for r in ROWS}
    assert (lookup["fwd-v1m"], lookup["fwd-v10m"]) == ("1.00", "0.95")


def test_a_ratio_off_the_axis_is_an_error():
    row = dict(_by_variant("main-uniform"), torch="1000.0")
    with pytest.raises(ValueError, match="main-uniform: torch ratio 0.0058 is off the axis"):
        chart.chart_svg([row], chart.WIDE)


def test_render_page_refuses_a_page_without_its_tables():
    with pytest.raises(ValueError, match="'summary'"):
        chart.render_page("# Benchmarks\n", ROWS)


def test_the_history_left_the_page():
    for phrase in ("session", "targets of issue 6", "What changed in"):
        assert phrase not in PAGE, phrase
