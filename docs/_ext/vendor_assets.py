"""A mkdocs hook: Mermaid and KaTeX served with the site, from pinned npm releases.

Material for MkDocs loads mermaid.js from a CDN when a page has a diagram, so
offline (or behind a firewall) diagrams stay raw text; KaTeX usually comes
from a CDN too. This hook makes the site self-contained without committing
megabytes of JavaScript:

- `on_config`: each pinned package is downloaded once from the npm registry,
  its tarball checked against the sha256 below, and the few files the site
  needs are unpacked into a cache folder (`.cache/docs-vendor/` beside
  mkdocs.yml, gitignored; `DOCS_VENDOR_CACHE` overrides it). A later build
  reads the cache and needs no network.
- `on_files`: those files join the site under `assets/vendor/`.
- `on_post_page`: a page with a Mermaid block gets a `<script>` for the local
  mermaid.js (Material then uses it instead of the CDN's); a page with math
  (pymdownx.arithmatex) gets KaTeX and `javascripts/katex.js`, which renders it.
  Only the pages that need them load them (mermaid.min.js is 3.5 MB). This
  relies on full page loads: with Material's `navigation.instant` on, the
  scripts would have to go in `extra_javascript` instead.

Used by mkdocs.yml (`hooks:`). To move to a new release, change its version
and sha256 (`sha256sum` of the registry's .tgz) below.
"""

import hashlib
import io
import os
import shutil
import tarfile
import tempfile
import urllib.request

try:
    from mkdocs.exceptions import PluginError
    from mkdocs.structure.files import File
    from mkdocs.utils import get_relative_url
except ImportError:  # pytest imports this file for its doctests where the docs extra is not installed
    PluginError = RuntimeError

REGISTRY = "https://registry.npmjs.org"
SITE_FOLDER = "assets/vendor"

# name: (version, sha256 of the registry's tarball, {file in the tarball: file under assets/vendor/<name>/})
PINNED = {
    # Material 9.8 is written against Mermaid 11 (it would fetch mermaid@11 from a CDN).
    "mermaid": (
        "11.17.2",
        "6ad2f42c3fc26bbf9e45cbb6d11898972573ea52b33a5f4ff51952899f950ffd",
        {"package/dist/mermaid.min.js": "mermaid.min.js", "package/LICENSE": "LICENSE"},
    ),
    "katex": (
        "0.19.1",
        "24da5a599eb2fcede2e270b99a6ff48bca816beecc95feeb84e8cccbd1bb34fd",
        {
            "package/dist/katex.min.js": "katex.min.js",
            "package/dist/katex.min.css": "katex.min.css",
            "package/dist/fonts/": "fonts/",  # a folder: every font the stylesheet names
            "package/LICENSE": "LICENSE",
        },
    ),
}

# What a page that needs a package gets: stylesheets into <head>, scripts at the end of <body>.
MERMAID_SCRIPTS = ["assets/vendor/mermaid/mermaid.min.js"]
KATEX_STYLESHEETS = ["assets/vendor/katex/katex.min.css"]
KATEX_SCRIPTS = ["assets/vendor/katex/katex.min.js", "javascripts/katex.js"]


def cache_root(config_file_path: str) -> str:
    """The folder that holds the unpacked packages."""
    default = os.path.join(os.path.dirname(os.path.abspath(config_file_path)), ".cache", "docs-vendor")
    return os.environ.get("DOCS_VENDOR_CACHE", default)


def package_dir(root: str, name: str) -> str:
    version = PINNED[name][0]
    return os.path.join(root, f"{name}-{version}")


def fetch_tarball(name: str) -> bytes:
    """Download a pinned package's tarball and check its sha256."""
    version, sha256, _ = PINNED[name]
    url = f"{REGISTRY}/{name}/-/{name}-{version}.tgz"
    try:
        with urllib.request.urlopen(url, timeout=120) as response:
            data = response.read()
    except OSError as error:
        raise PluginError(
            f"vendor_assets: cannot download {url} ({error}); the docs need {name} {version} once, "
            f"from the npm registry, into the cache (DOCS_VENDOR_CACHE or .cache/docs-vendor/)"
        ) from error
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        raise PluginError(f"vendor_assets: {url} has sha256 {got}, expected {sha256}: not unpacked")
    return data


def unpack(name: str, data: bytes, target: str) -> None:
    """Unpack the files the site needs into `target`, atomically (a whole folder or none)."""
    _, _, wanted = PINNED[name]
    os.makedirs(os.path.dirname(target), exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=f".{name}-", dir=os.path.dirname(target))
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar.getmembers():
                destination = destination_of(member.name, wanted)
                if destination is None or not member.isfile():
                    continue
                path = os.path.join(scratch, destination)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with tar.extractfile(member) as source, open(path, "wb") as out:
                    shutil.copyfileobj(source, out)
        missing = [f for f in wanted.values() if not os.path.exists(os.path.join(scratch, f))]
        if missing:
            raise PluginError(f"vendor_assets: {name} {PINNED[name][0]} has no {missing}")
        try:
            os.replace(scratch, target)
        except OSError:
            if not os.path.isdir(target):  # else another build unpacked it first: the same files
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def destination_of(member: str, wanted: dict) -> str | None:
    """Where a tarball member goes under the package's folder, or None if the site does not need it.

    >>> wanted = {"package/dist/katex.min.js": "katex.min.js", "package/dist/fonts/": "fonts/"}
    >>> destination_of("package/dist/fonts/KaTeX_Main-Regular.woff2", wanted)
    'fonts/KaTeX_Main-Regular.woff2'
    >>> destination_of("package/dist/katex.js", wanted) is None
    True
    """
    for source, destination in wanted.items():
        if member == source:
            return destination
        if source.endswith("/") and member.startswith(source) and "/" not in member[len(source) :]:
            return destination + member[len(source) :]
    return None


def ensure(root: str, name: str) -> str:
    """The package's unpacked folder, downloading it first if the cache does not have it."""
    target = package_dir(root, name)
    if not os.path.isdir(target):
        unpack(name, fetch_tarball(name), target)
    return target


_folders: dict[str, str] = {}  # name -> unpacked folder, set by on_config for on_files


def on_config(config):
    root = cache_root(config.config_file_path)
    _folders.update({name: ensure(root, name) for name in PINNED})
    return config


def on_files(files, config):
    for name, folder in _folders.items():
        for directory, _, names in os.walk(folder):
            for file_name in sorted(names):
                path = os.path.join(directory, file_name)
                uri = f"{SITE_FOLDER}/{name}/" + os.path.relpath(path, folder).replace(os.sep, "/")
                files.append(File.generated(config, uri, abs_src_path=path))
    return files


def on_post_page(output, page, config):
    stylesheets, scripts = [], []
    if 'class="mermaid"' in output:
        scripts += MERMAID_SCRIPTS
    if 'class="arithmatex"' in output:
        stylesheets += KATEX_STYLESHEETS
        scripts += KATEX_SCRIPTS
    if stylesheets:
        links = "".join(f'<link rel="stylesheet" href="{get_relative_url(s, page.url)}">' for s in stylesheets)
        output = output.replace("</head>", links + "</head>", 1)
    if scripts:
        tags = "".join(f'<script src="{get_relative_url(s, page.url)}"></script>' for s in scripts)
        output = output.replace("</body>", tags + "</body>", 1)
    return output
