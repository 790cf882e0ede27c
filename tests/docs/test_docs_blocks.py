"""Every ```python block in docs/ is a doctest, so every one of them runs.

pytest runs docs/*.md with `--doctest-glob=*.md`, but doctest only sees
`>>>` prompts: a ```python block written as plain code would be shown on
the site and never run. Such a block must become a doctest, or take a fence
that does not claim to be runnable Python (```text, ```bash, ...).
"""

import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")


def code_blocks(text):
    """Yield (first line number, language, body) of each fenced block."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, language, start = match.group(2), match.group(3).lower(), i + 1
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1
        yield start, language, body


def test_code_blocks_finds_every_block():
    text = "a\n```python\n>>> 1\n1\n\n```\n  ```text\nx\n  ```\n````py\nprint(1)\n````\n"
    assert [(n, lang, body) for n, lang, body in code_blocks(text)] == [
        (2, "python", [">>> 1", "1", ""]),
        (7, "text", ["x"]),
        (10, "py", ["print(1)"]),
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_every_python_block_is_a_doctest(page):
    text = page.read_text(encoding="utf-8")
    bad = []
    for line, language, body in code_blocks(text):
        if language not in ("python", "py", "python3", "pycon"):
            continue
        lines = [b for b in body if b.strip()]
        if not lines or not lines[0].lstrip().startswith(">>>"):
            bad.append(f"line {line}: a ```{language} block without >>> prompts is never run")
        elif body[-1].strip():
            bad.append(f"line {line}: end the doctest with a blank line before the closing fence")
    assert not bad, f"{page.name}: " + "; ".join(bad)


def test_the_docs_are_collected_as_doctests():
    pyproject = (DOCS.parent / "pyproject.toml").read_text(encoding="utf-8")
    assert "--doctest-glob=*.md" in pyproject
    assert re.search(r'testpaths = \[[^\]]*"docs"', pyproject)
