"""Hosts on this machine for MPI jobs across hosts: Linux namespaces joined by virtual Ethernet.

`two_hosts()` makes two "hosts", each a set of namespaces held open by a
`sleep` process:

- its own network namespace, joined to the other by a veth pair
  (10.77.0.1/24 and 10.77.0.2/24, only inside the namespaces it creates);
- its own UTS namespace and hostname, and its own IPC namespace;
- its own mount namespace, with a private tmpfs on /tmp and /dev/shm (no
  temporary file or shared-memory segment is seen by the other host), an
  /etc/hosts that names both hosts, as a cluster's does, and its own
  /proc/sys/kernel/random/boot_id. UCX (the mpich wheel's default netmod)
  takes two processes with the same boot id for one node and joins them by
  shared memory and cross-memory attach whatever their hostnames; with its
  own boot id each host is a node of its own to UCX too, reached by TCP over
  the veth (as `UCX_PROTO_INFO=y` shows: `inter-node`, `tcp/<veth>`).

Everything else (the venv, the checkout, the shared model_dir outside /tmp)
is the machine's one file system, as a cluster's shared one. The hosts
are reached as hydra reaches a cluster's: `ssh` is replaced by a wrapper,
`Hosts.launcher`, that takes `[options] <host> <command...>` and runs the
command through a shell inside that host's namespaces, in a clean
environment (hydra passes the job's environment to its proxy itself).
Names are unique per run; everything is torn down on exit, even on an
error. Needs root and `ip` (iproute2), `unshare` and `nsenter` (util-linux).
"""

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

ADDRESSES = ("10.77.0.1", "10.77.0.2")
TOOLS = ("ip", "unshare", "nsenter")


def why_not_available() -> str | None:
    """None where namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "needs root to make network namespaces"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"needs {', '.join(missing)} (apt-get install iproute2 util-linux)"
    probe = subprocess.run(["unshare", "--net", "--uts", "--ipc", "--mount", "true"], capture_output=True, text=True)
    if probe.returncode != 0:  # root without CAP_SYS_ADMIN, as in an unprivileged container
        return f"cannot make namespaces here: unshare says {probe.stderr.strip()!r}"
    return None


@dataclass
class Host:
    name: str  # the hostname inside, also its network namespace's name
    address: str
    veth: str
    holder: subprocess.Popen  # `sleep` inside the host's namespaces: nsenter's target

    def command(self, *args: str, cwd: str = "/") -> list[str]:
        """`args` run inside this host's namespaces (with this process's environment)."""
        return ["nsenter", "-t", str(self.holder.pid), "-n", "-u", "-i", "-m", f"--wd={cwd}", "--", *args]

    def veth_bytes(self) -> int:
        """Bytes received plus sent on this host's end of the virtual Ethernet."""
        out = subprocess.run(
            ["ip", "-n", self.name, "-j", "-s", "link", "show", "dev", self.veth],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        stats = json.loads(out)[0]["stats64"]
        return stats["rx"]["bytes"] + stats["tx"]["bytes"]


@dataclass
class Hosts:
    hosts: list[Host]
    launcher: Path  # the ssh stand-in for hydra's `-launcher-exec`
    hostfile: Path  # hydra's `-f`: one `address:slots` line per host
    directory: Path  # on the shared file system: these files, and the tests' own


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True)


def _under_tmp(paths: list[str]) -> list[str]:
    """The paths under /tmp, less those inside another one."""
    found = sorted({os.path.realpath(p) for p in paths if os.path.realpath(p).startswith("/tmp/")})
    return [p for p in found if not any(p.startswith(q + "/") for q in found)]


def _hold(name: str, directory: Path, etc_hosts: Path, shared: list[str]) -> subprocess.Popen:
    """A `sleep` in network namespace `name` and new UTS, IPC and mount namespaces, once they are set up.

    `shared`: paths under /tmp the host must still see (a checkout or venv there): bound aside before the
    private /tmp is mounted, then back in it."""
    boot_id = directory / f"boot_id-{name}"
    boot_id.write_text(str(uuid.uuid4()) + "\n")
    aside = [directory / f"aside-{name}-{i}" for i in range(len(shared))]
    for path in aside:
        path.mkdir()
    steps = [f"hostname {name}"]
    steps += [f"mount --bind {shlex.quote(p)} {a}" for p, a in zip(shared, aside, strict=True)]
    steps += ["mount -t tmpfs tmpfs /tmp", "mount -t tmpfs tmpfs /dev/shm"]
    steps += [
        f"mkdir -p {shlex.quote(p)} && mount --bind {a} {shlex.quote(p)}" for p, a in zip(shared, aside, strict=True)
    ]
    steps += [f"mount --bind {etc_hosts} /etc/hosts", f"mount --bind {boot_id} /proc/sys/kernel/random/boot_id"]
    setup = " && ".join(steps) + " && echo ready && exec sleep 86400"
    holder = subprocess.Popen(
        ["ip", "netns", "exec", name, "unshare", "--uts", "--ipc", "--mount", "--propagation", "private"]
        + ["sh", "-c", setup],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if holder.stdout.readline().strip() != "ready":
        holder.wait(10)
        raise RuntimeError(f"could not set up host {name}: {holder.stderr.read()}")
    return holder


LAUNCHER = """#!/bin/sh
# hydra's ssh launcher runs: <this> [ssh options] <host> <command...>; like ssh, run the command through a shell on
# that host (inside its namespaces), in a login-like environment.
while [ "${{1#-}}" != "$1" ]; do shift; done
host=$1; shift
case $host in
{cases}
  *) echo "no such host: $host" >&2; exit 255 ;;
esac
exec nsenter -t "$pid" -n -u -i -m --wd=/root -- env -i HOME=/root PATH=/usr/bin:/bin sh -c "$*"
"""


@contextlib.contextmanager
def two_hosts(directory: Path, shared: list[str] = (), slots: int = 2):
    """Two hosts (`Hosts`) for the time of the `with`; `directory` (on the shared file system, outside /tmp)
    gets the launcher, the host file and /etc/hosts. `shared`: paths both hosts must see as this process does
    (the checkout, the venv), even those under /tmp."""
    tag = uuid.uuid4().hex[:6]
    names = [f"tes{tag}-h{i}" for i in range(2)]
    veths = [f"tes{tag}v{i}" for i in range(2)]
    holders: list[subprocess.Popen] = []
    try:
        etc_hosts = directory / "etc-hosts"
        etc_hosts.write_text(
            "127.0.0.1 localhost\n" + "".join(f"{a} {n}\n" for a, n in zip(ADDRESSES, names, strict=True))
        )
        for name in names:
            _run("ip", "netns", "add", name)
        _run("ip", "link", "add", veths[0], "type", "veth", "peer", "name", veths[1])
        for name, veth, address in zip(names, veths, ADDRESSES, strict=True):
            _run("ip", "link", "set", veth, "netns", name)
            _run("ip", "-n", name, "addr", "add", f"{address}/24", "dev", veth)
            _run("ip", "-n", name, "link", "set", veth, "up")
            _run("ip", "-n", name, "link", "set", "lo", "up")
        hosts = []
        for name, veth, address in zip(names, veths, ADDRESSES, strict=True):
            holders.append(_hold(name, directory, etc_hosts, _under_tmp(shared)))
            hosts.append(Host(name, address, veth, holders[-1]))
        cases = "\n".join(f"  {h.address}|{h.name}) pid={h.holder.pid} ;;" for h in hosts)
        launcher = directory / "ssh-into-netns"
        launcher.write_text(LAUNCHER.format(cases=cases))
        launcher.chmod(0o755)
        hostfile = directory / "hosts"
        hostfile.write_text("".join(f"{h.address}:{slots}\n" for h in hosts))
        yield Hosts(hosts, launcher, hostfile, directory)
    finally:
        for name in names:  # what still runs in a host (ranks, proxies) ends with it
            found = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout.split()
            for pid in found:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        for holder in holders:
            holder.kill()
            holder.wait()
        for name in names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        subprocess.run(["ip", "link", "del", veths[0]], capture_output=True)  # if it never moved into a namespace
