"""`python -m benchmarks api`: the public API (TPUEmbedding) gives the engine's numbers, and the benchmark runs and
reports. No timing is asserted."""

from __future__ import annotations

import dataclasses

import numpy as np

from benchmarks import public_api
from benchmarks.peers import EngineImpl
from benchmarks.variants import MAIN
from benchmarks.workload import initial_tables, make_batches

SMALL = dataclasses.replace(MAIN, **public_api.QUICK)


def test_the_public_api_looks_up_and_trains_as_the_engine():
    batches = make_batches(SMALL, 3)
    tables = initial_tables(SMALL)
    api, engine = public_api.ApiImpl(SMALL, tables), EngineImpl(SMALL, tables)
    for got, want in zip(api.forward(batches[0]), engine.forward(batches[0])):
        np.testing.assert_array_equal(got, want)
    for batch in batches:
        api.step(batch)
        engine.step(batch)
    ids = [np.unique(b.values) for b in batches[2]]
    for got, want in zip(api.rows(ids), engine.rows(ids)):
        np.testing.assert_array_equal(got, want)


def test_a_quick_run_reports_every_workload(capsys):
    assert public_api.main(["--quick", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    forward, step = out.split("| workload | step")
    rows = [line for line in forward.splitlines() if line.startswith("| `")]
    assert [line.split("`")[1] for line in rows] == [w.name for w, _ in public_api.WORKLOADS]
    for line in rows:  # the API's and the engine's forward always run
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1] != "-" and cells[2] != "-"
    trained = [line.split("`")[1] for line in step.splitlines() if line.startswith("| `")]
    assert trained == [w.name for w, train in public_api.WORKLOADS if train]
