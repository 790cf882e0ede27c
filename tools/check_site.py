"""Check the built docs site as a reader sees it: every page, in headless Chromium, at 1280 and 390 px.

    mkdocs build --strict && python -m tools.check_site site/

For each page at each width it fails on:

- an element wider than the content column, or a box that hides part of its content (a code block that
  scrolls or cuts). Tables are the one exception, and only at phone width: Material lets a wide table
  scroll sideways in its own box, by design; they are counted in a note. At 1280 px a table must fit;
- a text drawing (box-drawing or arrow characters, aligned columns) whose lines wrap: long code lines
  wrap by design (docs/stylesheets/extra.css) and are counted in a note;
- a Mermaid block not drawn as an SVG, drawn past the column, or with text under MIN_DIAGRAM_TEXT_PX;
- math (pymdownx.arithmatex) not typeset by KaTeX;
- an image that did not load;
- a request for anything but the site on 127.0.0.1 (aborted before it leaves, and recorded), a local
  request that fails, a script error;
- an internal link to a page, file or anchor that does not exist;
- a doctest block whose copy text (`data-copy`, docs/_ext/copy_code.py) is missing or is not Python, and,
  at 1280 px, the copy button of the page's first doctest block putting anything else on the clipboard.

It prints a summary per page and exits 1 if any page fails, except the pages in KNOWN_FAILING: those are
checked and printed the same way, marked "known", and do not fail the run, until they pass: then the run
fails, asking that the page leave the list. `--requests FILE` writes every request the pages made.
"""

import argparse
import html.parser
import json
import os
import sys
import time
import urllib.parse
from dataclasses import dataclass, field

from tools import site_browser

# Pages whose failures are known and being fixed elsewhere (issue 21, phase 2): their content is not this
# tool's to change. Empty this list as they pass.
KNOWN_FAILING: tuple[str, ...] = ()

MIN_DIAGRAM_TEXT_PX = 11.0  # Material's body text is 16 px; below 11 px a label is hard to read
SETTLE_SECONDS = 20  # the longest a page may take to draw its diagrams
HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass
class PageResult:
    """What one page showed at one width: failures fail the run, notes are only printed."""

    page: str
    width: int
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class _Ids(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("id", "name") and value:
                self.ids.add(value)


class SiteFiles:
    """The built site on disk, to resolve internal links and anchors."""

    def __init__(self, site_dir: str):
        self.root = os.path.abspath(site_dir)
        self._ids: dict[str, set[str]] = {}

    def target(self, path: str) -> str | None:
        """The file a URL path serves, or None."""
        local = os.path.join(self.root, *[p for p in urllib.parse.unquote(path).split("/") if p])
        if os.path.isdir(local):
            local = os.path.join(local, "index.html")
        return local if os.path.isfile(local) else None

    def ids(self, file: str) -> set[str]:
        if file not in self._ids:
            parser = _Ids()
            with open(file, encoding="utf-8") as f:
                parser.feed(f.read())
            self._ids[file] = parser.ids
        return self._ids[file]

    def broken(self, url: str, base: str) -> str | None:
        """Why an internal link does not resolve, or None if it does (or is not internal)."""
        if not site_browser.is_local(url, base) or url.startswith(("data:", "blob:")):
            return None
        parts = urllib.parse.urlsplit(url)
        file = self.target(parts.path)
        if file is None:
            return "no such page or file"
        fragment = urllib.parse.unquote(parts.fragment)
        if fragment and file.endswith(".html") and fragment not in self.ids(file):
            return f"no anchor #{fragment} on that page"
        return None


def describe(item: dict) -> str:
    return f"<{item['tag']}> {item['text']!r}"


def judge(result: PageResult, found: dict, base: str, files: SiteFiles) -> None:
    """Turn a page's measurements (tools/page_checks.js) into failures and notes."""
    phone = result.width < 600
    if found["pageWidth"] > found["viewportWidth"] + 1:
        result.failures.append(f"page scrolls sideways: {found['pageWidth']} px wide in {found['viewportWidth']} px")
    scrolling_tables = []  # allowed at phone width only
    for item in found["overflow"]:
        if phone and item["table"]:
            scrolling_tables.append(item["width"])
        else:
            result.failures.append(f"wider than the column by {item['past']} px ({item['width']} px): {describe(item)}")
    for item in found["cut"]:
        if phone and item["table"]:
            scrolling_tables.append(item["needs"])
            continue
        what = "table scrolls" if item["table"] else "content cut off / scrolls"
        result.failures.append(f"{what}: shows {item['shown']} of {item['needs']} px: {describe(item)}")
    if scrolling_tables:
        result.notes.append(
            f"tables that scroll sideways (allowed at phone width): {len(scrolling_tables)}, "
            f"the widest {max(scrolling_tables)} px in {found['viewportWidth']}"
        )
    wrapped = [item for item in found["wrapped"] if not item["drawing"]]
    if wrapped:
        count = sum(item["count"] for item in wrapped)
        result.notes.append(f"long code lines that wrap: {count}, in {len(wrapped)} code blocks")
    for item in found["wrapped"]:
        if item["drawing"]:
            result.failures.append(f"a text drawing wraps ({item['count']} of {item['lines']} lines): {describe(item)}")
    for item in found["mermaid"]:
        result.failures.append(f"Mermaid: {item['problem']}: {describe(item)}")
    for item in found["diagrams"]:
        result.notes.append(f"diagram {item['label']}: {item['width']} px wide, smallest text {item['textPx']} px")
    for item in found["math"]:
        result.failures.append(f"math not typeset: {describe(item)}")
    for image in found["images"]:
        if not image["loaded"]:
            result.failures.append(f"image not loaded: {image['src']}")
        elif image["natural"] and image["shown"] < 0.75 * image["natural"]:
            percent = round(100 * image["shown"] / image["natural"])
            result.notes.append(f"image shown at {percent}% of its size (its text shrinks too): {image['src']}")
    for link in found["links"]:
        why = files.broken(link, base)
        if why:
            result.failures.append(f"broken link {link.removeprefix(base)}: {why}")
    for block in found["copies"]:
        if block["copy"] is None:
            result.failures.append(f"doctest block without copy text: {block['text']!r}")
            continue
        try:
            compile(block["copy"], "<copied code>", "exec")
        except SyntaxError as error:
            result.failures.append(f"copied code is not Python ({error.msg}): {block['text']!r}")


def check_page(context, base: str, path: str, width: int, files: SiteFiles, blocked: list, requests: list):
    """Open one page in `context` and check it."""
    result = PageResult(site_browser.page_name(path), width)
    errors: list[str] = []
    failed: list[str] = []
    page = context.new_page()
    page.on("pageerror", lambda error: errors.append(f"script error: {error}"))
    page.on("request", lambda request: requests.append((result.page, width, request.url)))
    page.on("requestfailed", lambda request: failed.append(request.url))
    page.on("response", lambda response: response.status >= 400 and failed.append(f"{response.url} {response.status}"))
    first_blocked = len(blocked)
    try:
        page.goto(base + path, wait_until="load")
        wait_for_diagrams(page, errors)
        page.wait_for_load_state("networkidle")
        with open(os.path.join(HERE, "page_checks.js"), encoding="utf-8") as f:
            found = page.evaluate(f.read(), MIN_DIAGRAM_TEXT_PX)
        judge(result, found, base, files)
        if width >= 1000:
            check_copy_button(page, result)
    finally:
        page.close()
    outside = blocked[first_blocked:]
    result.failures += [f"request to outside 127.0.0.1 (blocked): {url}" for url in outside]
    result.failures += [f"request failed: {url}" for url in failed if url not in outside]
    result.failures += errors
    return result


def wait_for_diagrams(page, errors: list) -> None:
    """Wait until Material has drawn every Mermaid block, or a script error stopped it (then the blocks
    left undrawn have stayed so for a second), or SETTLE_SECONDS have passed."""
    start = time.monotonic()
    left, since = None, start
    while time.monotonic() - start < SETTLE_SECONDS:
        now_left = page.evaluate("document.querySelectorAll('[data-check-mermaid]').length")
        if now_left == 0:
            return
        if now_left != left:
            left, since = now_left, time.monotonic()
        elif errors and time.monotonic() - since > 1:
            return
        page.wait_for_timeout(100)


def check_copy_button(page, result: PageResult) -> None:
    """Press the copy button of the page's first doctest block: the clipboard must get the block's code."""
    block = page.locator("pre[data-copy]")
    if block.count() == 0:
        return
    expected = block.first.get_attribute("data-copy").rstrip()
    page.evaluate("navigator.clipboard.writeText('')")
    block.first.locator("xpath=..").locator("button[data-md-type=copy]").first.click()
    copied = page.evaluate("navigator.clipboard.readText()")
    if copied != expected:
        result.failures.append(f"copy button put {copied[:70]!r} on the clipboard, not the block's code")


def page_path(name: str) -> str:
    """The URL path of a page given by its short name (site_browser.page_name), e.g. 'api/spec' -> 'api/spec/'."""
    name = name.strip("/")
    if name in ("", "index"):
        return ""
    return name if name.endswith(".html") else name + "/"


def check_site(site_dir: str, pages: list[str] | None = None, widths=(1280, 390), requests: list | None = None):
    """Check every page (or `pages`, URL paths) of a built site at each width; returns the PageResults."""
    files = SiteFiles(site_dir)
    pages = site_browser.site_pages(site_dir) if pages is None else pages
    requests = [] if requests is None else requests
    results = []
    with site_browser.serve(site_dir) as base, site_browser.chromium() as browser:
        for width in widths:
            blocked: list[str] = []
            permissions = ["clipboard-read", "clipboard-write"] if width >= 1000 else []
            context = site_browser.new_context(browser, width, base, blocked, permissions=permissions)
            with open(os.path.join(HERE, "page_init.js"), encoding="utf-8") as f:
                context.add_init_script(f.read())
            for path in pages:
                results.append(check_page(context, base, path, width, files, blocked, requests))
            context.close()
    return results


def summary(results: list[PageResult], known: tuple[str, ...]) -> tuple[list[str], bool]:
    """The printed report, and whether the run passes."""
    lines, passed = [], True
    for name in sorted({r.page for r in results}, key=lambda n: (n != "index", n)):
        mine = [r for r in results if r.page == name]
        count = sum(len(r.failures) for r in mine)
        is_known = name in known
        if count and not is_known:
            passed = False
        if not count and is_known:
            passed = False
        state = "ok" if not count else f"FAIL ({count})" + (" known: KNOWN_FAILING" if is_known else "")
        if not count and is_known:
            state = "ok, but listed in KNOWN_FAILING: remove it from the list"
        lines.append(f"{name}: {state}")
        for r in mine:
            for failure in r.failures:
                lines.append(f"    [{r.width} px] {failure}")
            for note in r.notes:
                lines.append(f"    [{r.width} px] note: {note}")
    failing = sorted({r.page for r in results if r.failures})
    lines.append("")
    lines.append(
        f"{len({r.page for r in results})} pages at {sorted({r.width for r in results}, reverse=True)} px: "
        f"{len(failing)} failing ({len([p for p in failing if p in known])} of them known)"
    )
    if failing:
        lines.append("failing: " + " ".join(failing))
    return lines, passed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("site", nargs="?", default="site", help="the built site (mkdocs build); default: site")
    parser.add_argument("--page", action="append", help="check only this page (e.g. index, concepts, api/spec)")
    parser.add_argument("--width", action="append", type=int, choices=sorted(site_browser.VIEWPORTS))
    parser.add_argument("--known-failing", nargs="*", default=None, help="override KNOWN_FAILING (page names)")
    parser.add_argument("--requests", help="write every request the pages made to this JSON file")
    args = parser.parse_args(argv)
    why = site_browser.missing_requirements()
    if why:
        print(f"check_site: cannot run: {why}", file=sys.stderr)
        return 2
    if not os.path.isfile(os.path.join(args.site, "index.html")):
        print(f"check_site: {args.site} has no index.html: build the site first (mkdocs build)", file=sys.stderr)
        return 2
    start, requests = time.monotonic(), []
    pages = None if args.page is None else [page_path(p) for p in args.page]
    results = check_site(args.site, pages, tuple(args.width or (1280, 390)), requests)
    known = KNOWN_FAILING if args.known_failing is None else tuple(args.known_failing)
    lines, passed = summary(results, known)
    print("\n".join(lines))
    print(f"{len(requests)} requests, all to 127.0.0.1 unless listed above; {time.monotonic() - start:.0f} s")
    if args.requests:
        with open(args.requests, "w", encoding="utf-8") as f:
            json.dump([{"page": p, "width": w, "url": u} for p, w, u in requests], f, indent=1)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
