"""The numbers behind the plots of docs/semantics.md, recomputed with the engine.

docs/plots/make_plots.py computes the data of each plot with the project's
own engine, then draws it. These tests run the data part (matplotlib is not
needed) and check the numbers that docs/semantics.md quotes, so the page and
the committed PNGs cannot drift from the engine without a test failing.
"""

import importlib.util
import pathlib

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"


def _load():
    spec = importlib.util.spec_from_file_location("make_plots", DOCS / "plots" / "make_plots.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_plots = _load()
SEMANTICS = (DOCS / "semantics.md").read_text(encoding="utf-8")


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


def test_the_committed_plots_exist_and_are_small_pngs():
    for name in ("lazy_adam.png", "pipelining.png"):
        path = DOCS / "images" / name
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert path.stat().st_size < 200_000, name
        assert f"images/{name}" in SEMANTICS, name


def test_drawing(tmp_path):
    pytest.importorskip("matplotlib", reason="needs matplotlib: the `plot` extra, pip install -e '.[plot]'")
    paths = make_plots.draw(str(tmp_path))
    assert [pathlib.Path(p).name for p in paths] == ["lazy_adam.png", "pipelining.png"]
    assert all(pathlib.Path(p).stat().st_size > 10_000 for p in paths)
