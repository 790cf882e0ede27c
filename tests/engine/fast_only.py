"""Skips a test module unless the fast kernels can run: numba imports and they are not turned off."""

import pytest


def require_fast_kernels() -> None:
    """Call at the top of a module that tests the numba kernels, before importing them."""
    pytest.importorskip("numba", reason="needs numba: the `fast` extra, pip install -e '.[fast]'")
    from tpu_embedding_shim.engine import fast

    if not fast.available():
        pytest.skip(f"fast kernels off: {fast.unavailable_reason()}", allow_module_level=True)
