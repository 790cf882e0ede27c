"""The golden data computed by TensorFlow 2.15.1 (data/index.json + .npz files), for the conformance tests.

See ../../../shared/conformance/README.md for how the data was made.
"""

import functools
import json
from pathlib import Path

import numpy as np
import pytest

DATA = Path(__file__).parent / "data"
INDEX = json.loads((DATA / "index.json").read_text())
TOL = dict(rtol=1e-5, atol=1e-6)
"""float32 precision: what TensorFlow's own numpy references reach."""


def cases(category):
    """`@cases('lookup_sparse')`: one test per case of the category, named by its id."""
    found = [c for c in INDEX["cases"] if c["category"] == category]
    assert found, f"no {category} cases in index.json"
    return pytest.mark.parametrize("case", found, ids=[c["id"] for c in found])


@functools.cache
def _npz(file):
    with np.load(DATA / file, allow_pickle=False) as z:
        return dict(z)


def arrays(case):
    """The case's arrays by name (`table`, `ids`, `safe_out`, ...)."""
    z = _npz(case["file"])
    return {name: z[f"{case['id']}__{name}"] for name in case["arrays"]}
