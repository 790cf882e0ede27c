"""The docs describe the project as it is, and every hint can be run anywhere.

- No page (docs/, README.md) narrates its own history: no commit hashes, no
  issue numbers, no dates, no "was 0.41x" figures, no "this session". That
  history is CHANGELOG.md's.
- No test, benchmark, tool or page names a path of one machine (a venv or
  a shared folder): each says how to run it in any checkout.
- The project is on no package index, so no page or message suggests
  `pip install 'tpu-embedding-shim[...]'`; a hint names the packages, and
  each pin it gives is pyproject.toml's.
"""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
SOURCES = sorted(
    path
    for folder in ("tpu_embedding_shim", "benchmarks", "tools", "tests")
    for path in (ROOT / folder).rglob("*.py")
    if path.is_file()
)


def _name(path: pathlib.Path) -> str:
    return path.relative_to(ROOT).as_posix()


HISTORY = {
    "a commit hash": r"(?<![\w-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)(?:[0-9a-f]{7,10}|[0-9a-f]{40})(?![\w.-])",
    "an issue number": r"(?i)\bissues?\s+#?\d+",
    "a date": r"\b20\d\d-\d\d-\d\d\b|\b(?:January|February|March|April|May|June|July|August|September|October"
    r"|November|December) (?:\d{1,2}, )?20\d\d\b",
    "a former figure": r"\bwas\s+~?[\d.]+(?:-[\d.]+)?\s*(?:x|ms|s|%)(?!\w)|\(was\s+[\d.]",
    "a session of work": r"(?i)\b(?:this|last|previous) session\b|\bthis issue\b",
}


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_a_page_describes_the_project_as_it_is(page):
    text = page.read_text(encoding="utf-8")
    found = [
        f"{what}: {match.group(0)!r} (line {text.count(chr(10), 0, match.start()) + 1})"
        for what, pattern in HISTORY.items()
        for match in re.finditer(pattern, text)
    ]
    assert not found, f"{_name(page)} narrates history (CHANGELOG.md's): {found}"


def test_the_history_patterns_catch_what_they_are_for():
    samples = {
        "a commit hash": "measured at 20f80ed, the machine idle",
        "an issue number": "done (Issue 20)",
        "a date": "on 2026-11-24, at the same commit",
        "a former figure": "0.58x (was 0.41x)",
        "a session of work": "until this session splits read past the arrays",
    }
    for what, sample in samples.items():
        assert re.search(HISTORY[what], sample), what
    for innocent in ("users__embedding-3f1c0b9e2a47.npy", "crc 0x82f63b78", "(was the checkpoint written?)"):
        assert not any(re.search(pattern, innocent) for pattern in HISTORY.values()), innocent


MACHINE_PATH = re.compile("/" + r"work/|/home/\w|/root/\w")


@pytest.mark.parametrize("path", [*SOURCES, *PAGES], ids=_name)
def test_no_file_names_a_path_of_one_machine(path):
    if path == pathlib.Path(__file__).resolve():
        return
    lines = [
        f"line {number}: {line.strip()}"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if MACHINE_PATH.search(line)
    ]
    assert not lines, f"{_name(path)} names one machine's paths; say how to run it in any checkout: {lines}"


FROM_AN_INDEX = re.compile(r"pip install\s+['\"]?" + "tpu-embedding-shim" + r"\[")


@pytest.mark.parametrize("path", [*SOURCES, *PAGES], ids=_name)
def test_no_hint_installs_the_project_from_a_package_index(path):
    if path == pathlib.Path(__file__).resolve():
        return
    found = FROM_AN_INDEX.findall(path.read_text(encoding="utf-8"))
    assert not found, (
        f"{_name(path)}: the project is on no package index; name the packages "
        "(`pip install numba`) or the checkout (`pip install -e '.[fast]'`)"
    )


def _pyproject_pins() -> dict[str, set[str]]:
    """Every requirement in pyproject.toml's extras: {normalized name: {'==2.15.1', '>=0.59', ...}}."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    pins: dict[str, set[str]] = {}
    for requirement in re.findall(r'"([A-Za-z0-9_.\[\]-]+(?:==|>=)[^";]+)', section):
        name, operator, version = re.match(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?(==|>=)(.+)", requirement).groups()
        pins.setdefault(_normalized(name), set()).add(operator + version.strip())
    return pins


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


PIN = re.compile(r"(?<![\w.-])([A-Za-z][A-Za-z0-9_.-]*)(==|>=)(\d[\w.]*)")


def _hint_pins(text: str):
    """(name, pin) of every `name==version` / `name>=version` on a line that runs `pip install`."""
    for line in text.splitlines():
        if "pip install" in line:
            for name, operator, version in PIN.findall(line):
                yield name, operator + version.rstrip(".")


def test_the_pin_parser_reads_pyproject():
    pins = _pyproject_pins()
    assert pins["tensorflow-cpu"] == {"==2.15.1", "==2.21.0"} and pins["mpi4py"] == {"==4.1.2"}
    assert pins["numba"] == {">=0.59"} and pins["torch"] == {"==2.13.0"}
    assert list(_hint_pins("pip install mpi4py==4.1.2 mpich==5.0.2 threadpoolctl")) == [
        ("mpi4py", "==4.1.2"),
        ("mpich", "==5.0.2"),
    ]


@pytest.mark.parametrize("path", [*SOURCES, *PAGES], ids=_name)
def test_every_pin_a_hint_names_is_pyprojects(path):
    if path == pathlib.Path(__file__).resolve():
        return
    pins = _pyproject_pins()
    wrong = [
        f"{name}{pin} (pyproject.toml: {sorted(pins[_normalized(name)])})"
        for name, pin in _hint_pins(path.read_text(encoding="utf-8"))
        if _normalized(name) in pins and pin not in pins[_normalized(name)]
    ]
    assert not wrong, f"{_name(path)} pins what pyproject.toml does not: {wrong}"
