"""One comparison of two mid-level outputs (dicts and lists of arrays), for the checkpoint and serving tests."""

import numpy as np


def assert_same_structure(a, b):
    """`a` and `b` are the same nest (dict keys in order, list lengths) of arrays equal in dtype, shape and value."""
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            assert_same_structure(a[key], b[key])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same_structure(x, y)
    else:
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
