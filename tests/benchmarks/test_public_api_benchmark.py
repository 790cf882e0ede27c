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
    table = [line for line in out.splitlines() if line.startswith("| `")]
    assert [line.split("`")[1] for line in table] == [w.name for w, _ in public_api.WORKLOADS]
    for line, (_, train) in zip(table, public_api.WORKLOADS):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1] != "-" and cells[2] != "-"  # the API's and the engine's forward always run
        assert (cells[5] != "-") is train  # a step where the workload trains
