"""docs/tensorflow_bridge.md's examples need TensorFlow: they run here (the TF-free suite does not collect the page).

Runs where TensorFlow is installed (a separate venv):

    python -m pytest tests/tf_bridge -q
"""

import doctest
import pathlib

PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "tensorflow_bridge.md"


def test_the_bridge_page_runs():
    result = doctest.testfile(str(PAGE), module_relative=False, optionflags=doctest.REPORT_ONLY_FIRST_FAILURE)
    assert result.attempted >= 30 and result.failed == 0


RUN_UNCHANGED = PAGE.parent / "run_unchanged.md"


def test_the_run_unchanged_page_runs():
    result = doctest.testfile(str(RUN_UNCHANGED), module_relative=False, optionflags=doctest.REPORT_ONLY_FIRST_FAILURE)
    assert result.attempted >= 4 and result.failed == 0
