"""Interop tests against a real TensorFlow (2.15): checkpoints, estimators and the CLI, both ways.

They run only where TensorFlow is installed (a separate venv; the project never
depends on it), and skip elsewhere:

    pip install -e '.[test,tensorflow]'     # in that venv, from the project's checkout
    python -m pytest tests/tf_interop -q
"""
