"""The distributed engine across two hosts, as on a cluster: Linux namespaces joined by virtual Ethernet.

netns_hosts.py makes the hosts (their own network, hostname, /tmp,
/dev/shm and boot id); MPICH's hydra reaches them through an ssh stand-in
(`-launcher ssh -launcher-exec`) and a host file of addresses, from inside
the first host; the model_dir is on the machine's file system outside
/tmp, which both hosts see. Needs root, iproute2 and util-linux: without
them these tests skip, or fail where REQUIRE_NETNS_HOSTS=1 (CI's MPI stage).
"""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tpu_embedding_shim.checkpoints import program_checkpoint

from .launch import HERE, MPIEXEC, ROOT, environment, requires_mpi, run_program
from .netns_hosts import two_hosts, why_not_available
from .test_estimator import assert_same_model

pytestmark = requires_mpi

PROGRAM = HERE / "hosts_program.py"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
SHARED = os.environ.get("NETNS_HOSTS_SHARED_DIR", "/var/tmp")  # outside /tmp: both hosts see it


@pytest.fixture
def hosts():
    """Two hosts and a shared directory for the test's files (removed after)."""
    reason = why_not_available()
    if reason is not None:
        if os.environ.get("REQUIRE_NETNS_HOSTS") == "1":
            pytest.fail(f"REQUIRE_NETNS_HOSTS=1, but: {reason}")
        pytest.skip(reason)
    directory = Path(tempfile.mkdtemp(prefix="two-hosts-", dir=SHARED))
    try:
        shared = [str(ROOT), sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))]
        with two_hosts(directory, shared) as made:
            yield made
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def mpiexec(hosts, ranks, ranks_per_host, *args, env=None, **popen):
    """`mpiexec -n ranks -ppn ranks_per_host python args...` from inside the first host, reaching the hosts
    through the ssh stand-in: the running process (text output piped)."""
    command = hosts.hosts[0].command(
        *[MPIEXEC, "-launcher", "ssh", "-launcher-exec", str(hosts.launcher), "-f", str(hosts.hostfile)],
        *["-n", str(ranks), "-ppn", str(ranks_per_host), sys.executable, *map(str, args)],
        cwd=str(hosts.directory),
    )
    job_env = {**environment(), **(env or {})}
    return subprocess.Popen(command, env=job_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


def finished(job, timeout=300):
    """The output of `job`, which must end well in `timeout` seconds."""
    try:
        output, _ = job.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            job.kill()
    assert job.returncode == 0, output
    return output


def program(hosts, ranks, ranks_per_host, name, max_steps, seconds=0, num_shards="6", env=None):
    """hosts_program.py across the hosts on a model_dir `name`: what replica 0 recorded, the job's output."""
    job = mpiexec(
        hosts,
        ranks,
        ranks_per_host,
        PROGRAM,
        hosts.directory / name,
        hosts.directory / f"{name}.json",
        max_steps,
        seconds,
        num_shards,
        env=env,
    )
    output = finished(job)
    return json.loads((hosts.directory / f"{name}.json").read_text()), output


def alone(directory, name, max_steps, num_shards="6"):
    """hosts_program.py as one plain process on this machine: the reference."""
    run_program(1, PROGRAM, directory / name, directory / f"{name}.json", max_steps, 0, num_shards)
    return json.loads((directory / f"{name}.json").read_text())


def assert_placed(record, hosts, ranks_per_host):
    """Rank r ran on host r // ranks_per_host (blocks, as -ppn places them), which hydra says it shares with
    that many ranks."""
    names = [host.name for host in hosts.hosts]
    assert [rank["hostname"] for rank in record["ranks"]] == [
        names[r // ranks_per_host] for r in range(record["replicas"])
    ]
    assert [int(rank["local_ranks"]) for rank in record["ranks"]] == [
        min(ranks_per_host, record["replicas"] - (r // ranks_per_host) * ranks_per_host)
        for r in range(record["replicas"])
    ]


@pytest.mark.parametrize("ranks_per_host", [1, 2])
def test_training_across_two_hosts_gives_the_numbers_of_one_process(hosts, ranks_per_host):
    """Over TCP on the veth: UCX takes the hosts for two nodes (its protocol table says `inter-node` and the
    veth), and at least the checkpoints' rows cross it."""
    ranks = 2 * ranks_per_host
    num_shards = "none" if ranks == 4 else "6"
    before = hosts.hosts[1].veth_bytes()
    many, output = program(hosts, ranks, ranks_per_host, "many", 6, num_shards=num_shards, env={"UCX_PROTO_INFO": "y"})
    crossed = hosts.hosts[1].veth_bytes() - before
    one = alone(hosts.directory, "one", 6, num_shards=num_shards)
    assert many["errors"] == [None] * ranks and many["replicas"] == ranks
    assert_placed(many, hosts, ranks_per_host)
    assert_same_model(one, many)
    assert Path(many["checkpoint"]).name == "model.ckpt-6"
    assert re.search(r"inter-node cfg#\d+ \| tagged message", output), output[-3000:]
    assert f"tcp/{hosts.hosts[1].veth}" in output and f"tcp/{hosts.hosts[0].veth}" in output
    assert crossed > 100_000, crossed


def latest_step(model_dir):
    with contextlib.suppress(Exception):
        latest = program_checkpoint.latest(str(model_dir))
        return int(latest.rsplit("-", 1)[1]) if latest else 0
    return 0


def test_a_job_killed_on_one_host_restores_on_three_ranks_over_two_hosts(hosts):
    """Rank 1 (the second host) is killed after a checkpoint: mpiexec ends the job with an error; 3 ranks over
    the 2 hosts (2 + 1) restore the latest checkpoint and train on, to the numbers of one process that
    stopped at the same checkpoint and went on."""
    model_dir, out = hosts.directory / "model", hosts.directory / "killed.json"
    job = mpiexec(hosts, 2, 1, PROGRAM, model_dir, out, 12, 0.5)
    try:
        deadline = time.monotonic() + 120
        while latest_step(model_dir) < 4 or not Path(f"{out}.rank1").exists():
            assert job.poll() is None and time.monotonic() < deadline, job.stdout.read() if job.poll() else "no ckpt-4"
            time.sleep(0.05)
        rank1 = json.loads(Path(f"{out}.rank1").read_text())
        assert rank1["hostname"] == hosts.hosts[1].name
        os.kill(rank1["pid"], signal.SIGKILL)
        output, _ = job.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            job.kill()
    assert job.returncode != 0, output
    assert not out.exists()  # it never finished
    stopped_at = latest_step(model_dir)
    assert 4 <= stopped_at < 12

    restored, _ = program(hosts, 3, 2, "model", 12)  # the same model_dir, 3 ranks: 2 on the first host
    assert restored["errors"] == [None] * 3
    assert_placed(restored, hosts, 2)
    assert Path(restored["started_from"]).name == f"model.ckpt-{stopped_at}"
    assert Path(restored["checkpoint"]).name == "model.ckpt-12"

    reference = alone(hosts.directory, "one", stopped_at)
    assert reference["started_from"] is None
    reference = alone(hosts.directory, "one", 12)
    assert Path(reference["started_from"]).name == f"model.ckpt-{stopped_at}"
    assert_same_model(reference, restored)


def test_the_movielens_job_across_two_hosts(hosts):
    """The README's job, `tpu-embedding-shim movielens --no-plot`, on one rank per host: the AUC target of one
    process. Each host's data cache is its own (in its /tmp), and only the first host's holds the data (the
    hosts have no other network, so it is fetched here first): replica 0 sends it to the other host."""
    from tpu_embedding_shim.movielens import data

    wheel = data.fetch()
    cache = "/tmp/tpu-embedding-shim-cache"
    first, second = hosts.hosts
    subprocess.run(first.command("sh", "-c", f"mkdir -p {cache} && cp {wheel} {cache}/"), check=True)
    script = Path(sys.executable).parent / "tpu-embedding-shim"
    before = second.veth_bytes()
    job = mpiexec(
        hosts,
        *[2, 1, script, "movielens", "--no-plot", "--output-dir", hosts.directory / "movielens"],
        env={"TPU_EMBEDDING_SHIM_CACHE": cache},
    )
    output = finished(job, timeout=600)
    results = json.loads((hosts.directory / "movielens" / "results.json").read_text())
    assert results["replicas"] == 2 and results["test_auc"][-1] >= 0.78, output
    assert second.veth_bytes() - before > 2_000_000  # the data (2 MB), then the steps' exchanges
    copied = subprocess.run(second.command("ls", cache), capture_output=True, text=True, check=True).stdout
    assert copied.split() == [Path(wheel).name]


def test_the_hosts_are_apart(hosts):
    """Each host has its own hostname, /tmp, /dev/shm and boot id, and names the other by its address."""
    first, second = hosts.hosts

    def on(host, code):
        done = subprocess.run(host.command(sys.executable, "-c", code), capture_output=True, text=True, check=True)
        return done.stdout.strip()

    on(first, "open('/tmp/mine', 'w').close(); open('/dev/shm/mine', 'w').close()")
    seen = "import os; print(os.path.exists('/tmp/mine'), os.path.exists('/dev/shm/mine'))"
    assert on(first, seen) == "True True" and on(second, seen) == "False False"
    facts = (
        f"import socket; print(socket.gethostname(), socket.gethostbyname({second.name!r}), open('{BOOT_ID}').read())"
    )
    mine, theirs = on(first, facts).split(), on(second, facts).split()
    assert mine[:2] == [first.name, second.address] and theirs[:2] == [second.name, second.address]
    assert mine[2] != theirs[2] and open(BOOT_ID).read().strip() not in (mine[2], theirs[2])
