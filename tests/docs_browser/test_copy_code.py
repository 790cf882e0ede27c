"""The copy button's text for doctest blocks (docs/_ext/copy_code.py): the code, as doctest reads it."""

import doctest
import html
import pathlib

from hypothesis import given
from hypothesis import strategies as st

from tests.docs.test_docs_blocks import code_blocks
from tests.docs_browser.hooks import load

copy_code = load("copy_code")
DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"


def doctest_sources(text: str) -> list[str]:
    """The source of each example, by doctest's own parser."""
    return [example.source.rstrip("\n") for example in doctest.DocTestParser().get_examples(text)]


def test_every_docs_example_copies_as_doctest_reads_it():
    checked = 0
    for page in sorted(DOCS.rglob("*.md")):
        for line, language, body in code_blocks(page.read_text(encoding="utf-8")):
            if language not in ("python", "pycon"):
                continue
            text = "\n".join(body)
            code = copy_code.doctest_code(text)
            assert code is not None, f"{page.name}:{line}"
            # doctest skips an example that is only a comment; the copy keeps it
            assert [c for c in code.split("\n") if c and not c.startswith("#")] == [
                s for source in doctest_sources(text) for s in source.split("\n") if s
            ], f"{page.name}:{line}"
            compile(code, f"{page.name}:{line}", "exec")
            checked += 1
    assert checked > 50  # 75 when written


def test_outputs_tracebacks_and_ellipses_are_left_out():
    text = (
        ">>> f(1,\n...   2)\n3\n>>> g()\nTraceback (most recent call last):\n...\n"
        "ValueError: bad\n>>> for i in range(2):\n...     print(i)\n0\n1\n>>> print('...')\n...\n"
    )
    assert copy_code.doctest_code(text) == "f(1,\n  2)\n\ng()\nfor i in range(2):\n    print(i)\n\nprint('...')"


def test_a_block_without_prompts_is_not_a_doctest():
    assert copy_code.doctest_code("pip install .\n>>> not first\n") is None
    assert copy_code.doctest_code("") is None


def test_bare_prompts_are_empty_lines():
    assert copy_code.doctest_code(">>> def f():\n...     pass\n...\n>>> f()\n") == "def f():\n    pass\n\n\nf()"


def test_the_page_gets_a_data_copy_on_doctest_blocks_only():
    page = (
        '<div class="highlight"><pre><span></span><code><span class="gp">&gt;&gt;&gt; </span>'
        '<span class="n">x</span> <span class="o">=</span> <span class="s2">&quot;a&lt;b&quot;</span>\n'
        '<span class="go">out</span>\n</code></pre></div>'
        "<pre><code>pip install .\n</code></pre>"
    )
    out = copy_code.add_copy_text(page)
    assert out.count("data-copy=") == 1
    assert 'data-copy="x = &quot;a&lt;b&quot;"' in out
    assert out.endswith("<pre><code>pip install .\n</code></pre>")
    assert copy_code.add_copy_text(out) == out  # a block that has its copy text keeps it


lines = st.text(alphabet="abc =()+1", min_size=1, max_size=12).map(lambda s: "x" + s.strip())


@given(
    st.lists(
        st.tuples(st.lists(lines, min_size=1, max_size=3), st.lists(lines, max_size=3)),
        min_size=1,
        max_size=5,
    )
)
def test_agrees_with_doctests_parser(examples):
    transcript = ""
    for source, output in examples:
        transcript += ">>> " + source[0] + "\n" + "".join(f"... {s}\n" for s in source[1:])
        transcript += "".join(f"{o}\n" for o in output)
    code = copy_code.doctest_code(transcript)
    expected = [line for s in doctest_sources(transcript) for line in s.split("\n")]
    assert [c for c in code.split("\n") if c] == expected
    assert html.unescape(html.escape(code, quote=True)) == code
