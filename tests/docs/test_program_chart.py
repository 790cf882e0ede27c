"""docs/benchmarks.md's "Program level" picture and table come from one file of numbers, and say what it says.

docs/plots/make_program_chart.py makes the table and the two PNGs from docs/plots/program_results.csv (the
CSV of one `python -m benchmarks programs` run). These tests fail when the page or the committed pictures
differ from what the script makes, or when the CSV's ratios do not follow from its medians.
"""

import pathlib

import pytest

from .scripts import DOCS, load_script
from .test_plots import _coarse, _png_size, _png_text, check_committed_png

chart = load_script("make_program_chart")
plots = load_script("make_plots")
ROWS = chart.load()
PAGE = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
SCRIPT = "python docs/plots/make_program_chart.py"


def test_the_pages_table_is_what_the_script_makes():
    assert chart.page_with_table(PAGE, ROWS) == PAGE, f"the programs table is stale: run {SCRIPT}"


def test_the_csv_ratios_follow_from_its_medians():
    medians = {(r["program"], r["framework"]): float(r["examples_per_s"]) for r in ROWS}
    assert set(chart.ratios(ROWS)) == {"migration", "criteo", "keras256", "keras4096"}
    for (program, framework), median in medians.items():
        row = next(r for r in ROWS if (r["program"], r["framework"]) == (program, framework))
        assert float(row["ours_over_this"]) == pytest.approx(medians[(program, "ours")] / median, rel=1e-9)
        assert float(row["min"]) <= median <= float(row["max"])


@pytest.mark.parametrize("layout", plots.LAYOUTS, ids=lambda layout: layout.suffix or "wide")
def test_the_committed_pictures_are_small_pngs_that_the_page_shows_at_their_width(layout):
    check_committed_png(f"{chart.FIGURE}{layout.suffix}.png", layout, PAGE)


def test_every_text_in_the_picture_is_at_least_11_px_on_the_page():
    pytest.importorskip("matplotlib", reason="needs matplotlib: the `plot` extra, pip install -e '.[plot]'")
    from matplotlib.text import Text

    with chart.figures(ROWS) as drawn:
        for layout, fig in drawn.items():
            fig.canvas.draw()
            texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
            assert len(texts) > 10, layout
            for text in texts:
                px = plots.on_screen_px(layout, text.get_fontsize())
                assert px >= 11, (layout.suffix, text.get_text(), px)


def test_the_committed_pictures_are_what_the_script_draws(tmp_path):
    pytest.importorskip("matplotlib", reason="needs matplotlib: the `plot` extra, pip install -e '.[plot]'")
    for path in chart.draw(ROWS, str(tmp_path)):
        committed = DOCS / "images" / pathlib.Path(path).name
        drawn, kept = pathlib.Path(path).read_bytes(), committed.read_bytes()
        assert _png_size(drawn) == _png_size(kept), f"{committed.name}: run {SCRIPT}"
        if _png_text(drawn)["Software"] == _png_text(kept)["Software"]:
            assert drawn == kept, f"{committed.name} is not what the script draws now: run {SCRIPT}"
            continue
        # Another matplotlib draws text with other glyphs and metrics (see test_plots.py): compare coarsely.
        assert abs(_coarse(path) - _coarse(committed)).mean() < 0.01, f"{committed.name}: run {SCRIPT}"
