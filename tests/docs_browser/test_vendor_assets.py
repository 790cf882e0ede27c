"""Mermaid and KaTeX for the site (docs/_ext/vendor_assets.py): pinned, checked, cached, never half-unpacked."""

import hashlib
import io
import os
import tarfile

import pytest

from tests.docs_browser.hooks import load

vendor = load("vendor_assets")


def tarball(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def fake_package(monkeypatch):
    """A pinned package 'demo' whose tarball the registry would serve; returns (tarball, downloads)."""
    data = tarball(
        {
            "package/dist/demo.min.js": b"js",
            "package/dist/demo.js": b"unused",
            "package/dist/fonts/A.woff2": b"font",
            "package/dist/fonts/sub/B.woff2": b"nested: not taken",
            "package/LICENSE": b"MIT",
        }
    )
    wanted = {"package/dist/demo.min.js": "demo.min.js", "package/dist/fonts/": "fonts/", "package/LICENSE": "LICENSE"}
    monkeypatch.setitem(vendor.PINNED, "demo", ("1.0.0", hashlib.sha256(data).hexdigest(), wanted))
    downloads = []

    class Response(io.BytesIO):
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def urlopen(url, timeout):
        downloads.append(url)
        return Response(data)

    monkeypatch.setattr(vendor.urllib.request, "urlopen", urlopen)
    return data, downloads


def listing(folder):
    return sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, fs in os.walk(folder) for f in fs)


def test_a_package_is_downloaded_once_then_read_from_the_cache(tmp_path, fake_package):
    _, downloads = fake_package
    folder = vendor.ensure(str(tmp_path), "demo")
    assert folder == str(tmp_path / "demo-1.0.0")
    assert listing(folder) == ["LICENSE", "demo.min.js", os.path.join("fonts", "A.woff2")]
    assert (tmp_path / "demo-1.0.0" / "demo.min.js").read_bytes() == b"js"
    assert downloads == ["https://registry.npmjs.org/demo/-/demo-1.0.0.tgz"]
    assert vendor.ensure(str(tmp_path), "demo") == folder
    assert len(downloads) == 1


def test_a_tarball_with_another_sha256_is_refused_and_nothing_is_unpacked(tmp_path, fake_package, monkeypatch):
    version, _, wanted = vendor.PINNED["demo"]
    monkeypatch.setitem(vendor.PINNED, "demo", (version, "0" * 64, wanted))
    with pytest.raises(vendor.PluginError, match="sha256"):
        vendor.ensure(str(tmp_path), "demo")
    assert list(tmp_path.iterdir()) == []


def test_a_tarball_without_a_needed_file_leaves_no_folder(tmp_path, fake_package, monkeypatch):
    version, sha256, wanted = vendor.PINNED["demo"]
    monkeypatch.setitem(vendor.PINNED, "demo", (version, sha256, {**wanted, "package/dist/gone.js": "gone.js"}))
    with pytest.raises(vendor.PluginError, match="gone.js"):
        vendor.ensure(str(tmp_path), "demo")
    assert list(tmp_path.iterdir()) == []


def test_no_network_is_a_clear_error(tmp_path, monkeypatch):
    def urlopen(url, timeout):
        raise OSError("no route to host")

    monkeypatch.setattr(vendor.urllib.request, "urlopen", urlopen)
    with pytest.raises(vendor.PluginError, match=r"cannot download .*mermaid-11\.17\.2\.tgz .*no route to host"):
        vendor.ensure(str(tmp_path), "mermaid")


def test_the_cache_folder_is_beside_mkdocs_yml_unless_the_environment_says(monkeypatch, tmp_path):
    monkeypatch.delenv("DOCS_VENDOR_CACHE", raising=False)
    assert vendor.cache_root("/repo/mkdocs.yml") == os.path.join("/repo", ".cache", "docs-vendor")
    monkeypatch.setenv("DOCS_VENDOR_CACHE", str(tmp_path))
    assert vendor.cache_root("/repo/mkdocs.yml") == str(tmp_path)


def test_pins_are_exact_versions_with_a_sha256():
    for name, (version, sha256, wanted) in vendor.PINNED.items():
        assert version.count(".") == 2 and version.replace(".", "").isdigit(), name
        assert len(sha256) == 64 and int(sha256, 16) >= 0, name
        assert "package/LICENSE" in wanted, name  # the licence travels with the files
