"""The picture and the table of docs/benchmarks.md's "Program level", from one file of numbers.

docs/plots/program_results.csv is the CSV that `python -m benchmarks programs` wrote for the run the page
reports (one row per program and framework: median examples/s over the rounds, min, max, ours over this).
From it this script makes:

- the table between `<!-- generated: programs ... -->` and `<!-- end generated: programs -->` in
  docs/benchmarks.md;
- the picture, ours over TensorFlow's CPU path per program, drawn with matplotlib (`pip install -e
  '.[plot]'`) in make_plots.py's two layouts (docs/images/program_ratios.png for the content column at
  1280 px, program_ratios-phone.png for a phone), its text 11 px or more on screen.

Run from the repository top after changing the CSV; tests/docs/test_program_chart.py fails while the page
or the images differ from what this makes:

    python docs/plots/make_program_chart.py          # rewrite the page's table and the two PNGs
    python docs/plots/make_program_chart.py --check  # exit 1 if the table would change
"""

import contextlib
import csv
import importlib.util
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS = os.path.normpath(os.path.join(HERE, os.pardir))
RESULTS = os.path.join(HERE, "program_results.csv")
PAGE = os.path.join(DOCS, "benchmarks.md")
IMAGES = os.path.join(DOCS, "images")
FIGURE = "program_ratios"


def _make_plots():
    """make_plots.py (its layouts and text sizes), imported by file: docs/plots is not a package."""
    spec = importlib.util.spec_from_file_location("make_plots", os.path.join(HERE, "make_plots.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# What each program is, for the picture (wide, phone) and the table.
PROGRAMS = {
    "migration": ("TPUEstimator, migration guide, B = 64", "migration\nTPUEstimator, B = 64"),
    "criteo": ("TPUEstimator, Criteo-like, B = 4096", "criteo\nTPUEstimator, B = 4096"),
    "keras256": ("Keras fit + TFRS layer, B = 256", "Keras + TFRS\nB = 256"),
    "keras4096": ("Keras fit + TFRS layer, B = 4096", "Keras + TFRS\nB = 4096"),
}
FRAMEWORKS = {
    ("estimator", "ours"): "ours (TF bridge)",
    ("estimator", "tf"): "TF 2.15 TPUEstimator (CPU)",
    ("estimator", "torchrec"): "TorchRec + FBGEMM",
    ("keras", "ours"): "ours (drop-in mode)",
    ("keras", "tf"): "TF 2.15 Keras + TFRS (CPU)",
}


def load(path: str = RESULTS) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def ratios(rows: list[dict[str, str]]) -> dict[str, float]:
    """Ours over TensorFlow's CPU path per program (median examples/s over median examples/s), in CSV order."""
    return {r["program"]: float(r["ours_over_this"]) for r in rows if r["framework"] == "tf" and r["ours_over_this"]}


def table(rows: list[dict[str, str]]) -> str:
    lines = [
        "| program | framework | examples/s (median) | min - max | ours / this |",
        "|---|---|---:|---:|---:|",
    ]
    for r in rows:
        kind = "keras" if r["program"].startswith("keras") else "estimator"
        name = FRAMEWORKS[(kind, r["framework"])]
        if not r["examples_per_s"]:
            lines.append(f"| `{r['program']}` | {name} | n/a: {r['error']} | | |")
            continue
        spread = f"{float(r['min']):,.0f} - {float(r['max']):,.0f}"
        lines.append(
            f"| `{r['program']}` | {name} | {float(r['examples_per_s']):,.0f} | {spread} "
            f"| {float(r['ours_over_this']):.2f}x |"
        )
    return "\n".join(lines)


def page_with_table(page: str, rows: list[dict[str, str]]) -> str:
    begin = "<!-- generated: programs (docs/plots/make_program_chart.py, from program_results.csv) -->"
    end = "<!-- end generated: programs -->"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pattern.search(page):
        raise ValueError(f"docs/benchmarks.md has no {begin} ... {end} block")
    return pattern.sub(lambda _: f"{begin}\n\n{table(rows)}\n\n{end}", page)


@contextlib.contextmanager
def figures(rows: list[dict[str, str]]):
    """The picture in each of make_plots' layouts, as {layout: figure}, with its text sizes; closed on exit."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots = _make_plots()
    found = ratios(rows)
    drawn = {}
    try:
        for layout in plots.LAYOUTS:
            with plt.rc_context(plots._font_sizes(layout)):  # noqa: SLF001  (make_plots' text sizes, shared)
                drawn[layout] = _figure(plt, plots, layout, found)
        yield drawn
    finally:
        for fig in drawn.values():
            plt.close(fig)


def _figure(plt, plots, layout, found: dict[str, float]):
    names = list(found)
    values = [found[n] for n in names]
    fig, ax = plots._figure(plt, layout, 380 if layout.narrow else 300)  # noqa: SLF001  (make_plots' figure)
    y = list(range(len(names)))[::-1]
    colors = ["tab:blue" if v >= 1.0 else "tab:orange" for v in values]
    ax.barh(y, values, color=colors, height=0.6)
    ax.axvline(1.0, color="0.3", lw=1.2, ls="--")
    for yi, v in zip(y, values):
        ax.text(v + 0.03, yi, f"{v:.2f}x", va="center", ha="left", bbox={"color": "white", "pad": 1})
    ax.set_yticks(y, [PROGRAMS[n][1 if layout.narrow else 0] for n in names])
    ax.set_xlim(0, max(1.6, max(values) + 0.35))
    if layout.narrow:
        ax.set_title("Ours over TF 2.15's CPU path")
        ax.set_xlabel("examples/s, ours / TF")
    else:
        ax.set_title("Whole programs, unmodified: ours over TF 2.15's own CPU path")
        ax.set_xlabel("examples/s, ours / TF (medians; > 1: ours is faster)")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return fig


def draw(rows: list[dict[str, str]], out_dir: str = IMAGES) -> list[str]:
    plots = _make_plots()
    paths = []
    with figures(rows) as drawn:
        for layout, fig in drawn.items():
            paths.append(os.path.join(out_dir, f"{FIGURE}{layout.suffix}.png"))
            fig.savefig(paths[-1], dpi=plots.LOGICAL_DPI * plots.DENSITY)
    return paths


def main(argv: list[str]) -> int:
    rows = load()
    with open(PAGE, encoding="utf-8") as f:
        page = f.read()
    new = page_with_table(page, rows)
    if "--check" in argv:
        if new != page:
            print("docs/benchmarks.md's programs table is stale: run python docs/plots/make_program_chart.py")
            return 1
        return 0
    with open(PAGE, "w", encoding="utf-8") as f:
        f.write(new)
    for path in draw(rows):
        print("wrote", os.path.normpath(path))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
