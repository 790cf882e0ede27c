"""A griffe extension for the API reference: doctest examples become code blocks.

The package's docstrings hold doctest examples as plain `>>>` lines (they run
under `pytest --doctest-modules`). Markdown would read `>>>` as a nested block
quote, so before mkdocstrings renders a docstring this extension wraps each run
of doctest lines (from a `>>>` line to the next blank line) in a ```pycon
fence. The docstring text in the package is not changed.

Used by mkdocs.yml (`extensions:` of the mkdocstrings python handler). Griffe
is a docs-only dependency, so without it this module defines nothing.
"""


def fence_doctests(text: str) -> str:
    r"""Wrap each run of doctest lines in a ```pycon fence.

    >>> fence_doctests("Text.\n>>> 1 + 1\n2\n\nMore.").split("\n")
    ['Text.', '```pycon', '>>> 1 + 1', '2', '```', '', 'More.']
    """
    out: list[str] = []
    in_fence = in_run = False
    indent = ""
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith("```"):
            in_fence = not in_fence
        if in_run and not stripped:
            out.append(indent + "```")
            in_run = False
        elif not in_run and not in_fence and stripped.startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(indent + "```pycon")
            in_run = True
        out.append(line)
    if in_run:
        out.append(indent + "```")
    return "\n".join(out)


try:
    import griffe
except ImportError:  # the test environment does not install the docs extra
    griffe = None

if griffe is not None:

    class DoctestFences(griffe.Extension):
        """Fence the doctest examples of every docstring griffe loads."""

        def on_instance(self, *, obj, **kwargs) -> None:
            if obj.docstring is not None and ">>>" in obj.docstring.value:
                obj.docstring.value = fence_doctests(obj.docstring.value)
