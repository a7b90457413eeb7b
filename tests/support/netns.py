"""Worker hosts in network namespaces, for the fleet tests (tests/fleet, docs/fleet.md).

A `Network` is N hosts on one private bridge: each host a network namespace whose only
link is a veth pair to a bridge in the root namespace, with an address in a /24 of
10.213.0.0/16 chosen free at start. A host reaches nothing but the bridge's address:
no default route, no NAT, and the root namespace forwards nothing (only its own bridge
address answers). What the hosts need of the root namespace listens on that address
(tests/support/fleet_services.py): PgBouncer in transaction mode in front of
PostgreSQL, a TCP relay to Redis, the sandbox's Daphne.

A host's processes also get a hostname of their own (a UTS namespace), so that the
lease owners they write (host:pid:token) name their host, as on separate machines:
a tree expires at once only the leases of its own host's dead processes; the others'
wait for their lease to run out. They share the root's PID namespace, so that a test
sees and signals them by pid. In a host, the name `testserver` is the bridge's address
(its /etc/hosts, which `ip netns exec` mounts from /etc/netns/<namespace>/): the app in
local mode serves only loopback names and `testserver`, and its sandbox is the target of
the hosts' tools.

Everything needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN for the namespaces). Every name
made here starts with "ao" and carries the test process's pid; `Network.teardown`
(called by the fixtures and at exit) kills every process in the hosts and removes
every namespace and link, and a Network made later removes what a dead test process
left behind.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import itertools
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import psutil

from tests.support.processes import wait_until

NET = "10.213"
PGBOUNCER = "/usr/sbin/pgbouncer"
ETC_NETNS = Path("/etc/netns")
SERVICES_NAME = "testserver"  # the bridge's address, by a name the app serves in local mode
LOCK_PATH = Path(tempfile.gettempdir()) / "agentops-netns.lock"
_NAMESPACE = re.compile(r"^ao-([0-9a-f]+)x\d+-h\d+$")
_LINK = re.compile(r"^ao[bv]([0-9a-f]+x\d+)")  # a bridge, or a veth's root end
_numbers = itertools.count(1)
_live: list[Network] = []


def unavailable() -> str | None:
    """Why hosts cannot be made here (None when they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (docs/fleet.md)"
    missing = [tool for tool in ("ip", "unshare") if shutil.which(tool) is None]
    if missing or not Path(PGBOUNCER).exists():
        return f"missing: {', '.join(missing) or PGBOUNCER} (docs/fleet.md)"
    return None


def ip(*args: str, check: bool = True) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


class Host:
    """One worker host: a network namespace at `address`, named `hostname`."""

    def __init__(self, network: Network, number: int):
        tag = network.tag
        self.namespace = f"ao-{tag}-h{number}"
        self.link = f"aov{tag}h{number}"  # the root namespace's end, on the bridge
        self.hostname = f"host{number}-{tag}"
        self.address = f"{network.prefix}.{number + 1}"
        peer = f"aop{tag}h{number}"
        ip("netns", "add", self.namespace)
        ip("link", "add", self.link, "type", "veth", "peer", "name", peer)
        ip("link", "set", peer, "netns", self.namespace)
        ip("link", "set", self.link, "master", network.bridge, "up")
        inside = ("-n", self.namespace)
        ip(*inside, "link", "set", peer, "name", "eth0")
        ip(*inside, "addr", "add", f"{self.address}/24", "dev", "eth0")
        ip(*inside, "link", "set", "eth0", "up")
        ip(*inside, "link", "set", "lo", "up")
        etc = ETC_NETNS / self.namespace
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(f"127.0.0.1 localhost\n::1 localhost\n"
                                   f"{network.address} {SERVICES_NAME}\n")

    def wrap(self) -> tuple[str, ...]:
        """A command prefix that runs a command on this host (it execs the command)."""
        return ("ip", "netns", "exec", self.namespace, "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', self.hostname)

    def cut(self) -> None:
        """A partition: the host's link goes down at the bridge. Nothing tells the host's
        processes: what they send is lost, their connections stay open, and TCP delivers
        what it retransmits once the link is back."""
        ip("link", "set", self.link, "down")

    def heal(self) -> None:
        ip("link", "set", self.link, "up")

    def lose(self, percent: int) -> None:
        """Drop `percent` % of the packets the host sends and of those it receives, at
        random: nftables' numgen, in a table of the host's namespace (gone with it)."""
        rules = "".join(
            f"chain {name} {{ type filter hook {hook} priority 0; "
            f"numgen random mod 100 < {percent} counter drop; }}\n"
            for name, hook in (("lose_in", "input"), ("lose_out", "output")))
        subprocess.run(["ip", "netns", "exec", self.namespace, "nft", "-f", "-"],
                       input=f"table inet fleet {{\n{rules}}}\n", text=True, check=True,
                       capture_output=True)

    def lost(self) -> int:
        """How many packets `lose` dropped so far."""
        listing = subprocess.run(["ip", "netns", "exec", self.namespace, "nft", "list", "table",
                                  "inet", "fleet"], capture_output=True, text=True, check=True)
        return sum(int(n) for n in re.findall(r"counter packets (\d+)", listing.stdout))

    def pids(self) -> list[int]:
        return [int(p) for p in ip("netns", "pids", self.namespace, check=False).split()]

    def kill_all(self) -> list[int]:
        """SIGKILL every process in the host (a power cut); the pids killed."""
        killed = []

        def none_left():
            pids = self.pids()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            killed.extend(p for p in pids if p not in killed)
            return not pids
        wait_until(none_left, 10, message=f"every process of {self.hostname} killed")
        return killed


class Network:
    """A bridge in the root namespace and `hosts` hosts on it."""

    def __init__(self, hosts: int):
        self.tag = f"{os.getpid():x}x{next(_numbers)}"
        self.bridge = f"aob{self.tag}"
        self.hosts: list[Host] = []
        remove_leftovers()
        _live.append(self)
        try:
            with _locked():  # two test processes must not pick the same /24
                self.prefix = f"{NET}.{_free_subnet()}"
                ip("link", "add", self.bridge, "type", "bridge")
                ip("addr", "add", f"{self.address}/24", "dev", self.bridge)
                ip("link", "set", self.bridge, "up")
            self.hosts = [Host(self, n) for n in range(1, hosts + 1)]
        except BaseException:
            self.teardown()
            raise

    @property
    def address(self) -> str:
        """The bridge's address: the root namespace as the hosts see it."""
        return f"{self.prefix}.1"

    def teardown(self) -> None:
        for host in self.hosts:
            with contextlib.suppress(AssertionError):
                host.kill_all()
        _remove(self.tag)
        if self in _live:
            _live.remove(self)


def _remove(tag: str) -> None:
    for name in ip("netns", "list", check=False).split():
        if name.startswith(f"ao-{tag}-"):
            for pid in ip("netns", "pids", name, check=False).split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            ip("netns", "del", name, check=False)
            shutil.rmtree(ETC_NETNS / name, ignore_errors=True)
    # A veth pair goes with its namespace, but only once the kernel has freed it (seen
    # kept after its processes were gone): the root's ends are deleted, and so the pairs.
    for link in _links(rf"aov{tag}h\d+"):
        ip("link", "del", link, check=False)
    ip("link", "del", f"aob{tag}", check=False)


def _links(pattern: str) -> list[str]:
    names = [line.split(":")[1].strip().split("@")[0]
             for line in ip("-o", "link", "show").splitlines()]
    return [name for name in names if re.fullmatch(pattern, name)]


def remove_leftovers() -> None:
    """What test processes that are gone left (killed before their teardown)."""
    tags = {m.group(1) for name in _links(r"ao[bv][0-9a-f]+x\d+(h\d+)?")
            if (m := _LINK.match(name))}
    tags |= {m.group(0)[3:].rsplit("-", 1)[0] for name in ip("netns", "list").split()
             if (m := _NAMESPACE.match(name))}
    for tag in tags:
        pid = int(tag.split("x")[0], 16)
        if not psutil.pid_exists(pid):
            _remove(tag)


def _free_subnet() -> int:
    used = set(re.findall(rf"inet {re.escape(NET)}\.(\d+)\.", ip("-o", "-4", "addr")))
    free = next((n for n in range(1, 255) if str(n) not in used), None)
    if free is None:
        raise RuntimeError(f"no free /24 left in {NET}.0.0/16")
    return free


@contextlib.contextmanager
def _locked():
    with open(LOCK_PATH, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@atexit.register
def _teardown_all() -> None:
    for network in list(_live):
        network.teardown()
