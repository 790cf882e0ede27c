"""Screenshots of the main docs pages at 1280 and 390 px, for a person to look at.

    mkdocs build --strict && python -m tools.screenshot_site site/ --out build/screenshots

For each page and width it writes NAME-WIDTH.png (the first screen, as a reader opens the page) and
NAME-WIDTH-full.png (the whole page). The phone pictures are taken at a device pixel ratio of 2, as a
phone shows them. The folder is not committed (build/ is gitignored).
"""

import argparse
import os
import sys

from tools import site_browser

MAIN_PAGES = ("index", "quickstart", "concepts", "semantics", "benchmarks")


def take(site_dir: str, out_dir: str, pages=MAIN_PAGES, widths=(1280, 390)) -> list[str]:
    """Write the screenshots; returns their paths."""
    from tools.check_site import page_path

    os.makedirs(out_dir, exist_ok=True)
    written = []
    with site_browser.serve(site_dir) as base, site_browser.chromium() as browser:
        for width in widths:
            blocked: list[str] = []
            scale = 2 if width < 600 else 1
            context = site_browser.new_context(browser, width, base, blocked, device_scale_factor=scale)
            for name in pages:
                page = context.new_page()
                page.goto(base + page_path(name), wait_until="networkidle")
                page.wait_for_timeout(500)  # Mermaid draws after the load
                for suffix, full in (("", False), ("-full", True)):
                    path = os.path.join(out_dir, f"{name.replace('/', '_')}-{width}{suffix}.png")
                    page.screenshot(path=path, full_page=full)
                    written.append(path)
                page.close()
            context.close()
            for url in blocked:
                print(f"screenshot_site: blocked a request outside 127.0.0.1: {url}", file=sys.stderr)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("site", nargs="?", default="site", help="the built site (mkdocs build); default: site")
    parser.add_argument("--out", default=os.path.join("build", "screenshots"), help="default: build/screenshots")
    parser.add_argument("--page", action="append", help=f"a page to take (default: {', '.join(MAIN_PAGES)})")
    args = parser.parse_args(argv)
    why = site_browser.missing_requirements()
    if why:
        print(f"screenshot_site: cannot run: {why}", file=sys.stderr)
        return 2
    for path in take(args.site, args.out, tuple(args.page or MAIN_PAGES)):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
