"""Two "nodes" on one machine: network namespaces joined by a veth pair, each node's processes with
their own host name and an /etc/hosts that names both nodes.

    with TwoNodes(tmp_path) as cluster:          # root only; cleaned up on exit, even on failure
        node1, node2 = cluster.nodes             # node1.address == "10.231.0.1", hostname "node1"
        subprocess.Popen(node1.command(["finetune", ...]), env=...)

A node's command runs as `ip netns exec NS unshare --uts --mount sh -c '...'`: the namespace gives it
only the veth and a loopback of its own, the UTS namespace its host name, the mount namespace a
private /etc/hosts (bind-mounted over the real one, which stays untouched). Addresses live only
inside the namespaces created here: no traffic leaves them.
"""
import itertools
import os
import shutil
import signal
import subprocess
import time

SUBNET = "10.231.0"
HOSTS_ENTRY = "{address} {hostname}\n"

# Runs "$@" with a host name and a hosts file: argv = [script, hosts file, host name, program...].
_ENTER_NODE = 'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"'


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def namespaces_unavailable():
    """None when this process may create network namespaces, else why not (for a skip message)."""
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed"
    probe = f"ftprobe{os.getpid()}"
    try:
        result = _ip("netns", "add", probe, check=False)
    except (FileNotFoundError, subprocess.TimeoutExpired) as e:
        return f"`ip netns add` unavailable: {e}"
    if result.returncode != 0:
        return f"`ip netns add` is not permitted here: {result.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _runs(pid, executable):
    try:
        return os.path.realpath(f"/proc/{pid}/exe") == os.path.realpath(executable)
    except OSError:
        return False  # gone meanwhile


class Node:
    def __init__(self, index, namespace, interface, hosts_file):
        self.index = index                    # 1-based
        self.hostname = f"node{index}"
        self.address = f"{SUBNET}.{index}"
        self.namespace = namespace
        self.interface = interface
        self.hosts_file = hosts_file

    def command(self, argv):
        """argv run on this node (its network, host name and hosts file)."""
        return ["ip", "netns", "exec", self.namespace, "unshare", "--uts", "--mount", "sh", "-c", _ENTER_NODE,
                str(self.hosts_file), self.hostname] + [str(a) for a in argv]

    def pids(self, exclude=(), executable=None):
        """PIDs of every process in this node's network namespace but those in `exclude`; only those
        running `executable` (a path) when given."""
        result = _ip("netns", "pids", self.namespace, check=False)
        pids = [int(p) for p in result.stdout.split() if int(p) not in exclude]
        return [p for p in pids if executable is None or _runs(p, executable)]

    def kill_all(self, exclude=()):
        """SIGKILL to every process of the node (but `exclude`), as a power loss would; returns how
        many there were."""
        pids = self.pids(exclude)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(pids)

    def power_off(self, exclude=()):
        """The node vanishes as in a power loss: its link goes down first, so that no FIN or RST of
        its dying sockets reaches the other node, then every process (but `exclude`) is killed."""
        _ip("-n", self.namespace, "link", "set", self.interface, "down")
        return self.kill_all(exclude)

    def power_on(self, timeout=10):
        """The link back up (after power_off), waiting until it carries traffic (LOWER_UP)."""
        _ip("-n", self.namespace, "link", "set", self.interface, "up")
        deadline = time.monotonic() + timeout
        while "LOWER_UP" not in _ip("-n", self.namespace, "link", "show", self.interface).stdout:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.interface} in {self.namespace} not up after {timeout} s")
            time.sleep(0.05)

    def wait_empty(self, timeout, exclude=(), executable=None):
        """True once no process (of `pids`' choice) is left in the namespace, False after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.pids(exclude, executable):
                return True
            time.sleep(0.05)
        return not self.pids(exclude, executable)


class TwoNodes:
    """node1 (10.231.0.1) and node2 (10.231.0.2), joined by a veth pair. Names carry this process's
    id, so concurrent test runs do not collide."""

    def __init__(self, work_dir):
        tag = f"ft{os.getpid() % 100000}"
        self.hosts_file = work_dir / "hosts"
        self.nodes = [Node(i, f"{tag}n{i}", f"{tag}v{i}", self.hosts_file) for i in (1, 2)]
        self._ports = itertools.count(29401)

    def fresh_port(self):
        """A port no job here used yet: the namespaces are ours, so nothing else listens on them."""
        return next(self._ports)

    def __enter__(self):
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info):
        self.close()

    def _create(self):
        self.hosts_file.write_text("127.0.0.1 localhost\n" + "".join(
            HOSTS_ENTRY.format(address=n.address, hostname=n.hostname) for n in self.nodes))
        for node in self.nodes:
            _ip("netns", "add", node.namespace)
        first, second = self.nodes
        _ip("link", "add", first.interface, "type", "veth", "peer", "name", second.interface)
        for node in self.nodes:
            _ip("link", "set", node.interface, "netns", node.namespace)
            _ip("-n", node.namespace, "addr", "add", f"{node.address}/24", "dev", node.interface)
            _ip("-n", node.namespace, "link", "set", node.interface, "up")
            _ip("-n", node.namespace, "link", "set", "lo", "up")

    def close(self):
        """Kills what still runs in the namespaces and deletes them (the veth pair goes with them)."""
        for node in self.nodes:
            node.kill_all()
        for node in self.nodes:
            node.wait_empty(10)
            _ip("netns", "del", node.namespace, check=False)
