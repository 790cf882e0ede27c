"""A mkdocs hook: the copy button of a doctest block copies code that runs.

Every Python example on the site is a doctest (`>>>` prompts, then the
expected output), so copying the block as shown pastes prompts and outputs
that Python cannot run. Material's copy button copies the `data-copy`
attribute of the block when it has one; this hook gives every code block
that starts with `>>>` a `data-copy` holding only its code: prompts
stripped, outputs and tracebacks left out, read with doctest's own rule (a
`...` line continues the example only right after a `>>>` or `...` line).

Used by mkdocs.yml (`hooks:`); the API reference's docstring examples are
covered too, since the hook reads the finished page.
"""

import html
import re

PRE = re.compile(r"<pre([^>]*)>(.*?)</pre>", re.DOTALL)
TAG = re.compile(r"<[^>]+>")


def doctest_code(text: str) -> str | None:
    """The code of a doctest transcript, or None if `text` is not one.

    A blank line follows each example that spans several lines (a `for` or a
    `def`), so the result also pastes into an interactive interpreter.

    >>> print(doctest_code(">>> x = 1\\n>>> for i in range(2):\\n...     x += i\\n>>> x\\n2\\n"))
    x = 1
    for i in range(2):
        x += i
    <BLANKLINE>
    x
    """
    lines = text.splitlines()
    first = next((line for line in lines if line.strip()), "")
    if not first.lstrip().startswith(">>>"):
        return None
    code: list[str] = []
    in_example = continued = False
    for line in lines:
        stripped = line.lstrip()
        if stripped.startswith(">>>"):
            if continued:
                code.append("")
            code.append(strip_prompt(stripped))
            in_example, continued = True, False
        elif in_example and stripped.startswith("..."):
            code.append(strip_prompt(stripped))
            continued = True
        else:
            in_example = False
    if continued:
        code.append("")
    return "\n".join(code).rstrip("\n")


def strip_prompt(line: str) -> str:
    """`>>> x` or `... x` without its prompt (a bare prompt is an empty line)."""
    return line[4:] if len(line) > 3 and line[3] == " " else line[3:]


def add_copy_text(page_html: str) -> str:
    """Give each `<pre>` block that holds a doctest a `data-copy` with its code."""

    def replace(match: re.Match) -> str:
        attributes, body = match.group(1), match.group(2)
        if "data-copy" in attributes:
            return match.group(0)
        code = doctest_code(html.unescape(TAG.sub("", body)))
        if code is None:
            return match.group(0)
        return f'<pre{attributes} data-copy="{html.escape(code, quote=True)}">{body}</pre>'

    return PRE.sub(replace, page_html)


def on_page_content(page_html, page, config, files):
    return add_copy_text(page_html)
