"""The built docs site in a real browser: served on 127.0.0.1, opened in Debian's headless Chromium.

Shared by tools/check_site.py (the checks) and tools/screenshot_site.py (pictures for a person). The
browser is driven by Playwright for Python (the `browser` extra), pointed at the system Chromium
(`apt-get install chromium`): Playwright never downloads a browser here. Playwright because one API gives
what the checks need: every request of a page and of its workers, seen and stopped before it leaves the
machine (`BrowserContext.route`), page errors, phone emulation, waiting for the page to settle, and
clipboard access to press the copy button as a reader does.
"""

import contextlib
import functools
import http.server
import os
import shutil
import threading
import urllib.parse

# The flags this machine needs (no sandbox as root, no GPU, no QUIC, and nothing that phones home). Playwright
# adds --headless and gives each launch a new, empty --user-data-dir of its own.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# The two widths every page is looked at: a laptop and a phone (an iPhone 12-15's CSS width).
VIEWPORTS = {
    1280: {"viewport": {"width": 1280, "height": 800}},
    390: {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True},
}


def find_chromium() -> str | None:
    """The Chromium executable: $CHROMIUM, else Debian's, else any `chromium` on PATH; None without one."""
    for candidate in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def missing_requirements() -> str | None:
    """Why the browser tools cannot run here, or None if they can."""
    try:
        import playwright.sync_api  # noqa: F401  (only asked whether it imports)
    except ImportError:
        return "Playwright is not installed: pip install -e '.[browser]'"
    if find_chromium() is None:
        return "no Chromium: apt-get install -y chromium (or set CHROMIUM to its path)"
    return None


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # the base class prints every request
        pass


@contextlib.contextmanager
def serve(site_dir: str):
    """Serve `site_dir` on 127.0.0.1 (a free port) in a thread; yields the base URL, ending in '/'."""
    handler = functools.partial(_QuietHandler, directory=os.path.abspath(site_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextlib.contextmanager
def chromium():
    """A headless Chromium (the system's) under Playwright; yields the Browser."""
    from playwright.sync_api import sync_playwright  # the `browser` extra: only these tools need it

    executable = find_chromium()
    if executable is None:
        raise RuntimeError(missing_requirements())
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def is_local(url: str, base: str) -> bool:
    """True for the served site's own URLs and for data:/blob: URLs, which never leave the browser."""
    if url.startswith(("data:", "blob:")):
        return True
    return urllib.parse.urlsplit(url).netloc == urllib.parse.urlsplit(base).netloc


def new_context(browser, width: int, base: str, blocked: list, **options):
    """A browser context at one of VIEWPORTS' widths that lets no request leave 127.0.0.1.

    A request for any other address is aborted before it is sent, and its URL appended to `blocked`.
    """
    context = browser.new_context(**VIEWPORTS[width], **options)

    def route(route, request):
        if is_local(request.url, base):
            route.continue_()
        else:
            blocked.append(request.url)
            route.abort()

    context.route("**/*", route)
    return context


def site_pages(site_dir: str) -> list[str]:
    """Every HTML page of a built site, as URL paths relative to its top ('' is the home page)."""
    pages = []
    for directory, folders, files in os.walk(site_dir):
        folders[:] = sorted(f for f in folders if not (directory == site_dir and f in ("assets", "search")))
        relative = os.path.relpath(directory, site_dir).replace(os.sep, "/")
        prefix = "" if relative == "." else relative + "/"
        if "index.html" in files:
            pages.append(prefix)
        pages += [prefix + f for f in sorted(files) if f.endswith(".html") and f != "index.html"]
    return sorted(pages)


def page_name(path: str) -> str:
    """A page's short name: 'index' for the home page, else its path without the trailing '/'."""
    return path.rstrip("/") or "index"
