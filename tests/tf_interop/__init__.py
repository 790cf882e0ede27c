"""Interop tests against a real TensorFlow (2.15): checkpoints, estimators and the CLI, both ways.

They run only where TensorFlow is installed (a separate venv; the project never
depends on it), and skip elsewhere:

    /work/tfvenv/bin/pip install -e '.[test]'
    /work/tfvenv/bin/python -m pytest tests/tf_interop -q
"""
