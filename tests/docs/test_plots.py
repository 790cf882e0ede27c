"""The numbers behind the plots of docs/semantics.md, recomputed with the engine.

docs/plots/make_plots.py computes the data of each plot with the project's
own engine, then draws it. These tests run the data part (matplotlib is not
needed) and check the numbers that docs/semantics.md quotes, so the page and
the committed PNGs cannot drift from the engine without a test failing.
"""

import pathlib

import pytest

from .scripts import DOCS, load_script

make_plots = load_script("make_plots")
SEMANTICS = (DOCS / "semantics.md").read_text(encoding="utf-8")
SCRIPT = "python docs/plots/make_plots.py"


def test_lazy_adam_numbers_match_the_page():
    data = make_plots.lazy_adam_data()
    summary = data["summary"]
    assert summary == {
        "sightings": 10,
        "lazy_rare_after_first_sighting": 0.032,
        "non_lazy_rare_after_first_sighting": 0.304,
        "lazy_rare_final": 0.537,
        "non_lazy_rare_final": 0.946,
        "frequent_final": 1.0,
        "frequent_rows_equal": True,
    }
    for key in (
        "lazy_rare_after_first_sighting",
        "non_lazy_rare_after_first_sighting",
        "lazy_rare_final",
        "non_lazy_rare_final",
    ):
        assert f"{summary[key]:.3f}" in SEMANTICS, key
    assert len(data["steps"]) == len(data["lazy"]["rare"]) == 300


def test_lazy_adam_moves_the_rare_row_only_when_it_is_seen():
    data = make_plots.lazy_adam_data()
    rare = data["lazy"]["rare"]
    changed = [step for step in range(1, len(rare)) if rare[step] != rare[step - 1]]
    assert changed == list(range(30, 300, 30))  # steps 31, 61, ... (0-based 30, 60, ...)
    non_lazy = data["non_lazy"]["rare"]
    assert sum(non_lazy[s] != non_lazy[s - 1] for s in range(1, 30)) == 29  # moves between sightings


def test_pipelining_numbers_match_the_page():
    summary = make_plots.pipelining_data()["summary"]
    assert summary[4.0]["steps_to_1e-4"] == {"off": 15, "on": 12}
    assert summary[12.0]["steps_to_1e-4"] == {"off": 5, "on": 24}
    assert summary[20.0]["steps_to_1e-4"] == {"off": 4, "on": None}
    assert [summary[lr]["diverged"] for lr in (4.0, 12.0, 20.0)] == [
        {"off": False, "on": False},
        {"off": False, "on": False},
        {"off": False, "on": True},
    ]
    assert summary["growth_on_at_highest_rate"] == 60000.0
    assert "| 4 | 15 | 12 |" in SEMANTICS
    assert "| 12 | 5 | 24 |" in SEMANTICS
    assert "| 20 | 4 | never: the loss grows about 60000-fold in 60 steps |" in SEMANTICS


def _png_size(data: bytes) -> tuple[int, int]:
    """(width, height) of a PNG, from its IHDR chunk."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _png_text(data: bytes) -> dict[str, str]:
    """A PNG's tEXt chunks (matplotlib writes "Software": the version that drew it)."""
    texts, at = {}, 8
    while at < len(data):
        length, kind = int.from_bytes(data[at : at + 4], "big"), data[at + 4 : at + 8]
        if kind == b"tEXt":
            key, _, value = data[at + 8 : at + 8 + length].partition(b"\0")
            texts[key.decode("latin-1")] = value.decode("latin-1")
        at += 12 + length
    return texts


def check_committed_png(file: str, layout, page: str) -> None:
    """A committed picture is a small PNG at `make_plots.DENSITY` times its width on `page`, which gives the
    browser both widths (so it is drawn at its density) and, for the phone layout, its media query."""
    data = (DOCS / "images" / file).read_bytes()
    width, _ = _png_size(data)
    assert width == layout.width_px * make_plots.DENSITY, file
    assert len(data) < 150_000, file
    candidate = f'srcset="../images/{file} {width}w" sizes="{layout.width_px}px"'
    assert candidate in page, candidate
    if layout.suffix == make_plots.PHONE.suffix:  # `layout` may come from another load of the script
        assert f'<source media="{make_plots.PHONE_MEDIA}" {candidate}>' in page


@pytest.mark.parametrize("layout", make_plots.LAYOUTS, ids=lambda layout: layout.suffix or "wide")
@pytest.mark.parametrize("name", make_plots.FIGURES)
def test_the_committed_plots_are_small_pngs_that_the_page_shows_at_their_width(name, layout):
    check_committed_png(f"{name}{layout.suffix}.png", layout, SEMANTICS)


def test_every_text_in_the_plots_is_at_least_11_px_on_the_page():
    pytest.importorskip("matplotlib", reason="needs matplotlib: the `plot` extra, pip install -e '.[plot]'")
    from matplotlib.text import Text

    for layout in make_plots.LAYOUTS:
        with make_plots.figures(layout) as drawn:
            for name, fig in drawn.items():
                fig.canvas.draw()  # creates the tick labels
                texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
                assert len(texts) > 10, name
                for text in texts:
                    px = make_plots.on_screen_px(layout, text.get_fontsize())
                    assert px >= 11, (name, layout.suffix, text.get_text(), px)


def _coarse(path, block=16):
    """The PNG's grey levels averaged over blocks of block x block pixels."""
    import matplotlib.image

    grey = matplotlib.image.imread(path)[..., :3].mean(axis=2)
    h, w = (grey.shape[0] // block) * block, (grey.shape[1] // block) * block
    return grey[:h, :w].reshape(h // block, block, w // block, block).mean(axis=(1, 3))


def test_the_committed_plots_are_what_the_script_draws(tmp_path):
    pytest.importorskip("matplotlib", reason="needs matplotlib: the `plot` extra, pip install -e '.[plot]'")
    paths = make_plots.draw(str(tmp_path))
    names = [f"{name}{layout.suffix}.png" for layout in make_plots.LAYOUTS for name in make_plots.FIGURES]
    assert [pathlib.Path(p).name for p in paths] == names
    for path in paths:
        committed = DOCS / "images" / pathlib.Path(path).name
        drawn, kept = pathlib.Path(path).read_bytes(), committed.read_bytes()
        assert _png_size(drawn) == _png_size(kept), f"{committed.name}: run {SCRIPT}"
        if _png_text(drawn)["Software"] == _png_text(kept)["Software"]:
            assert drawn == kept, f"{committed.name} is not what the script draws now: run {SCRIPT}"
            continue
        # Another matplotlib (or FreeType) draws text with other glyphs and metrics, and constrained layout moves
        # the axes by a pixel or two, so pixels differ everywhere (a mean of 0.018-0.021 between matplotlib 3.10
        # and 3.11 for the same numbers); averaged over 16 x 16 blocks they agree (0.003-0.005).
        difference = abs(_coarse(path) - _coarse(committed)).mean()
        assert difference < 0.01, f"{committed.name} differs from what the script draws: run {SCRIPT}"
