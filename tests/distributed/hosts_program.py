"""estimator_program.py's TPUEstimator, trained in steps that can be killed: run by test_two_hosts.py.

`python hosts_program.py MODEL_DIR OUT MAX_STEPS SECONDS [NUM_SHARDS]` trains
up to global step MAX_STEPS (from the latest checkpoint in MODEL_DIR, if
any), saving every 2 steps, each batch SECONDS late (so a test can kill
the job mid-run), then evaluates. The input restarts from its first batch
after a restore, as a TensorFlow input_fn does.

First every rank writes `OUT.rank<r>`: its pid, hostname and how many ranks
hydra says share its host (MPI_LOCALNRANKS). At the end replica 0 writes
OUT: the checkpoint training started from, the model (report.py) and each
rank's hostname.
"""

import json
import os
import socket
import sys
import time

from estimator_program import estimator, input_fn_for  # siblings: this file runs as a script
from report import record_model, write_record

from tpu_embedding_shim.api import replicas


def slow(input_fn, seconds):
    def slowed(params):
        for batch in input_fn(params):
            time.sleep(seconds)
            yield batch

    return slowed


def main(model_dir, out, max_steps, seconds, num_shards="6"):
    rank = replicas.replica_id()
    me = {"pid": os.getpid(), "hostname": socket.gethostname(), "local_ranks": os.environ.get("MPI_LOCALNRANKS")}
    with open(f"{out}.rank{rank}", "w") as handle:
        json.dump(me, handle)
    record = {"replicas": replicas.num_replicas(), "seen": []}
    try:
        est = estimator(
            model_dir,
            12,
            num_shards=None if num_shards == "none" else int(num_shards),
            save_checkpoints_steps=2,
            keep_checkpoint_max=None,
        )
        record["started_from"] = est.latest_checkpoint()
        est.train(
            slow(input_fn_for(int(max_steps), seed=0, seen=record["seen"]), float(seconds)), max_steps=int(max_steps)
        )
        record_model(record, est, est.evaluate(input_fn_for(2, seed=1, seen=record["seen"])))
        record["checkpoint"] = est.latest_checkpoint()
    except Exception as error:
        record["error"] = f"{type(error).__name__}: {error}"
    record["ranks"] = replicas.world().allgather_object(me)
    write_record(record, out)


if __name__ == "__main__":
    main(*sys.argv[1:])
