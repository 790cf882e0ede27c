"""The docs site in headless Chromium (tools/check_site.py), and the checker itself on a site with known faults.

Needs the `browser` and `docs` extras and a Chromium (`apt-get install -y chromium`); without them these
tests skip and say which is missing. CI runs them in a venv of their own (.ci/run).
"""

import importlib.util
import os
import pathlib
import shutil
import urllib.parse

import pytest

from tools import check_site, site_browser

ROOT = pathlib.Path(__file__).resolve().parents[2]

missing = site_browser.missing_requirements()
if missing is None and importlib.util.find_spec("mkdocs") is None:
    missing = "mkdocs is not installed: pip install -e '.[docs]'"
pytestmark = pytest.mark.skipif(missing is not None, reason=f"the docs site in a browser: {missing}")

GOOD = """\
# Good

A doctest whose long line wraps inside the column:

```python
>>> numbers = [1, 2, 3]
>>> total = sum(number * number for number in numbers) + sum(number for number in numbers) + len(numbers) + 1
>>> total
22

```

```mermaid
flowchart TD
  a[ids] --> b[lookup]
```

Math inline \\(a^2 + b^2\\) and displayed:

\\[
\\sum_k w_k T[i_k]
\\]

![a plot](plot.png)

| a | b |
|---|---|
| 1 | 2 |

[to the anchor](bad.md#kept)
"""

BAD = """\
# Bad

<div style="width: 3000px">a box three thousand pixels wide</div>

WIDE_TABLE

```mermaid
flowchart TD
  a[[[ not mermaid
```

```mermaid
flowchart LR
  LONG_CHAIN
```

```text
  feature "watched"   ──┐                                                        the drawing goes on far to the right
                        ├──>  table tbl_candidate_watched_shared_embedding  [100 x 8]   and wraps at every width
```

Bad math: \\(\\frac{1}{\\)

![from outside](https://example.invalid/plot.png)

![missing](nowhere.png)

[no such anchor](good.md#no-such-anchor) and [no such page](missing.md)

## Kept
"""
WIDE_TABLE = "\n".join(
    "| " + " | ".join(cells) + " |"
    for cells in ([f"c{i}" for i in range(12)], ["---"] * 12, ["a_long_cell_value"] * 12)
)
LONG_CHAIN = " --> ".join(f"{n}[the box number {n} of a long chain of boxes]" for n in "abcde")
BAD = BAD.replace("WIDE_TABLE", WIDE_TABLE).replace("LONG_CHAIN", LONG_CHAIN)


def build(tmp_path: pathlib.Path) -> str:
    """Build a two-page site with the project's mkdocs.yml (its hooks, CSS, extensions): good.md and bad.md."""
    from mkdocs.commands.build import build as mkdocs_build
    from mkdocs.config import load_config

    docs = tmp_path / "docs"
    for folder in ("stylesheets", "javascripts"):
        shutil.copytree(ROOT / "docs" / folder, docs / folder)
    (docs / "index.md").write_text("# Home\n\n[good](good.md) [bad](bad.md)\n", encoding="utf-8")
    (docs / "good.md").write_text(GOOD, encoding="utf-8")
    (docs / "bad.md").write_text(BAD, encoding="utf-8")
    shutil.copy(ROOT / "docs" / "images" / "pipelining.png", docs / "plot.png")
    site = tmp_path / "site"
    config = load_config(
        str(ROOT / "mkdocs.yml"),
        docs_dir=str(docs),
        site_dir=str(site),
        nav=["index.md", "good.md", "bad.md"],
        plugins=["search"],
        strict=False,
    )
    mkdocs_build(config)
    return str(site)


@pytest.fixture(scope="module")
def fixture_results(tmp_path_factory):
    site = build(tmp_path_factory.mktemp("fixture_site"))
    requests = []
    results = check_site.check_site(site, ["good/", "bad/"], requests=requests)
    return {(r.page, r.width): r for r in results}, requests


@pytest.mark.parametrize("width", [1280, 390])
def test_a_good_page_passes(fixture_results, width):
    results, _ = fixture_results
    good = results[("good", width)]
    assert good.failures == []
    assert any(note.startswith("diagram flowchart") for note in good.notes)
    assert any(
        note.startswith("long code lines that wrap: ") and note.endswith(" in 1 code blocks") for note in good.notes
    )


@pytest.mark.parametrize("width", [1280, 390])
def test_each_fault_is_reported(fixture_results, width):
    results, _ = fixture_results
    failures = "\n".join(results[("bad", width)].failures)
    expected = [
        "wider than the column by",  # the 3000 px box
        "a box three thousand pixels wide",
        "Mermaid: not drawn",  # the block with a syntax error
        "px on screen (under 11)",  # the long chain: its text shrinks
        "a text drawing wraps",
        "math not typeset",
        "request to outside 127.0.0.1 (blocked): https://example.invalid/plot.png",
        "image not loaded: https://example.invalid/plot.png",
        "nowhere.png",  # a local image that is not there: HTTP 404, not loaded
        "broken link good/#no-such-anchor: no anchor #no-such-anchor on that page",
        "broken link bad/missing.md: no such page or file",
        "script error",  # Mermaid's parse error
    ]
    for text in expected:
        assert text in failures, f"{text!r} not reported at {width} px:\n{failures}"


def test_a_wide_table_fails_on_a_laptop_and_scrolls_on_a_phone(fixture_results):
    results, _ = fixture_results
    assert any("table scrolls: shows 720 of" in failure for failure in results[("bad", 1280)].failures)
    assert not any("table scrolls" in failure for failure in results[("bad", 390)].failures)
    assert any(
        "tables that scroll sideways (allowed at phone width): 1," in note for note in results[("bad", 390)].notes
    )


def test_every_request_is_recorded_and_only_the_bad_one_left(fixture_results):
    _, requests = fixture_results
    outside = {url for _, _, url in requests if urllib.parse.urlsplit(url).hostname != "127.0.0.1"}
    assert outside == {"https://example.invalid/plot.png"}
    urls = {url for _, _, url in requests}
    assert any(url.endswith("/assets/vendor/mermaid/mermaid.min.js") for url in urls)
    assert any(url.endswith("/assets/vendor/katex/katex.min.js") for url in urls)
    assert not any("fonts.googleapis" in url or "unpkg" in url for url in urls)


def test_the_summary_fails_the_run_and_names_the_known_pages(fixture_results):
    results, _ = fixture_results
    lines, passed = check_site.summary(list(results.values()), known=())
    assert not passed and "bad: FAIL" in "\n".join(lines) and "good: ok" in lines
    lines, passed = check_site.summary(list(results.values()), known=("bad",))
    assert passed and "known: KNOWN_FAILING" in "\n".join(lines)
    lines, passed = check_site.summary(list(results.values()), known=("bad", "good"))
    assert not passed and "good: ok, but listed in KNOWN_FAILING: remove it from the list" in lines


def test_the_site(tmp_path):
    """Every page of the real site, at both widths; KNOWN_FAILING's pages may fail (and must, while listed).

    `DOCS_SITE=site` checks an already built site instead of building one.
    """
    site = os.environ.get("DOCS_SITE")
    if site is None:
        from mkdocs.commands.build import build as mkdocs_build
        from mkdocs.config import load_config

        site = str(tmp_path / "site")
        mkdocs_build(load_config(str(ROOT / "mkdocs.yml"), site_dir=site, strict=True))
    results = check_site.check_site(site)
    lines, passed = check_site.summary(results, check_site.KNOWN_FAILING)
    assert passed, "\n".join(lines)
    assert {r.page for r in results} >= {"index", "concepts", "semantics", "benchmarks", "quickstart", "api/spec"}
