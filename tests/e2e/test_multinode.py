"""Multi-node data-parallel training, rehearsed on one machine: two "nodes" are network namespaces
joined by a veth pair (tests/e2e/netns.py), each with its own host name, and the real `finetune`
binary runs on CPU/Gloo under each launcher's multi-node form:

* torchrun --nnodes 2 --rdzv-backend c10d --rdzv-endpoint node1's address, one agent per node
  (1 and 2 ranks per node);
* mpirun on node1 with a hostfile of the two addresses, reaching node2 through an rsh agent that
  enters node2's namespace instead of ssh;
* Slurm's variables (SLURM_PROCID, SLURM_LOCALID, SLURM_NODELIST ...) set by hand without MASTER_ADDR
  (finetune meets on the node list's first node), one process per
  task, as srun would start them.

For each: every rank knows its local rank (local rank 0 of each node downloads, the others wait),
each node fills its own hub cache once from the mock hub (served on node1's address; requests
counted per client address), the adapter equals one process with the same global batch, and a
node that dies mid-run (every process in its namespace SIGKILLed, or its link cut first as in a
power loss) ends the other node's job with an error exit within 5 s. Needs root for `ip netns`;
skipped, with the reason printed, where namespaces cannot be created.
"""
import json
import re
import select
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from conftest import ROOT, finetune_bin
from ddp_launch import check_ok, clean_env, mpirun_path, run_launched, torchrun_path, wait_for
from mock_hub import make_repo
from netns import SUBNET, TwoNodes, namespaces_unavailable
from numerics import relative_error
import reference_loop
import tiny_models

TOLERANCE = 1e-6       # relative, fp32: only the summation order differs (as tests/e2e/test_ddp.py)
DEAD_NODE_BOUND_S = 5  # a node that dies mid-run ends the other node's ranks within this
LAUNCHER_EXIT_S = 5    # ... and the launcher there exits within this more (torchrun's agent, in Python,
                       # takes 3-4 s on two busy cores to clean up after its failed worker)
RUN_TIMEOUT_S = 150    # one training job, start to exit, on two busy cores
REPO = "org/tiny-llama"
MOCK_HUB = Path(ROOT) / "tests" / "reference" / "mock_hub.py"
GLOBAL_BATCH, STEPS, ROWS = 4, 4, 16


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = namespaces_unavailable()
    if reason:
        print(f"\n[multinode] skipped: {reason}")
        pytest.skip(reason)
    with TwoNodes(tmp_path_factory.mktemp("nodes")) as nodes:
        yield nodes


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """The tiny base model (locally and as a hub repo), an initial adapter, 16 tokenized rows."""
    root = tmp_path_factory.mktemp("multinode")
    base = root / "base"
    tiny_models.make_model("llama", base)
    adapter = reference_loop.make_init_adapter(base, root / "init_adapter")
    tiny_models.write_jsonl(root / "train.jsonl", tiny_models.make_tokenized_rows(ROWS, seed=7, completion_only=True))
    model_files = {p.name: p.read_bytes() for p in base.iterdir() if p.is_file()}
    make_repo(root / "hub", "model", REPO, model_files)
    return {"root": root, "base": base, "adapter": adapter, "data": root / "train.jsonl", "files": model_files}


class NodeHub:
    """The mock hub (tests/reference/mock_hub.py) serving on node1's address, from inside node1."""

    def __init__(self, node, storage):
        self.node = node
        self.process = subprocess.Popen(
            node.command([sys.executable, MOCK_HUB, "--root", storage, "--host", node.address, "--port", 0,
                          "--cdn-host", node.hostname]),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready, _, _ = select.select([self.process.stdout], [], [], 30)
        line = self.process.stdout.readline() if ready else ""
        if not line.startswith("READY "):
            self.process.kill()
            raise AssertionError(f"mock hub did not start in {node.namespace}: {line!r} {self.process.stderr.read()}")
        self.url = line.split()[1]

    def requests(self):
        """The hub's request log, read from inside node1 (the test process has no route to it)."""
        read = "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())"
        proc = subprocess.run(self.node.command([sys.executable, "-c", read, f"{self.url}/_mock/log"]),
                              capture_output=True, text=True, timeout=30)
        check_ok(proc, "reading the mock hub's log")
        return json.loads(proc.stdout)

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def hub(cluster, assets):
    running = NodeHub(cluster.nodes[0], assets["root"] / "hub")
    yield running
    running.stop()


def train_args(assets, out, batch_size, model=REPO, steps=STEPS, timeout_s=60, save_steps=2):
    return ["--model_name", model, "--dataset", assets["data"], "--init_adapter", assets["adapter"],
            "--output_dir", out, "--max_steps", steps, "--per_device_train_batch_size", batch_size,
            "--gradient_accumulation_steps", 1, "--learning_rate", 2e-2, "--warmup_steps", 1,
            "--lr_scheduler_type", "linear", "--max_grad_norm", 1.0, "--weight_decay", 0.01,
            "--lora_dropout", 0.0, "--dtype", "float32", "--device", "cpu", "--ddp_backend", "gloo",
            "--shuffle", "false", "--logging_steps", 1, "--save_steps", save_steps, "--ddp_timeout", timeout_s,
            "--use_gradient_checkpointing", "false"]


@pytest.fixture(scope="module")
def reference(assets):
    """One process with the whole global batch, from the local copy of the model."""
    out = assets["root"] / "single"
    check_ok(run_launched("single", 1, train_args(assets, out, GLOBAL_BATCH, model=assets["base"])),
             "single process")
    return out


# ---------------------------------------------------------------- launching on the two nodes

class NodeJob:
    """One launcher process per node (or one per task for Slurm), output in files."""

    def __init__(self, log_dir):
        self.log_dir = log_dir
        self.processes = []  # (node, name, Popen)

    def start(self, node, name, argv, env):
        out = open(self.log_dir / f"{name}.out", "w")
        err = open(self.log_dir / f"{name}.err", "w")
        process = subprocess.Popen(node.command(argv), stdout=out, stderr=err, env=env, cwd=ROOT)
        out.close()
        err.close()
        self.processes.append((node, name, process))

    def on(self, node):
        return [(name, p) for n, name, p in self.processes if n is node]

    def log(self, name=None):
        names = [name] if name else [n for _, n, _ in self.processes]
        return "".join((self.log_dir / f"{n}.err").read_text() + (self.log_dir / f"{n}.out").read_text()
                       for n in names)

    def wait(self, timeout):
        """Exit codes by name; kills everything and fails if the job outlives `timeout`."""
        deadline = time.monotonic() + timeout
        codes = {}
        try:
            for _, name, process in self.processes:
                codes[name] = process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"job still running after {timeout} s:\n{self.log()}")
        return codes

    def kill(self):
        for _, _, process in self.processes:
            if process.poll() is None:
                process.kill()
        for _, _, process in self.processes:
            process.wait(timeout=30)


def node_env(cache_root, node, **extra):
    """A clean environment (no launcher variables of the caller) with this node's own hub cache."""
    return clean_env(HF_HUB_CACHE=cache_root / node.hostname, **extra)


def start_torchrun(job, cluster, hub, cache_root, args, per_node):
    port = cluster.fresh_port()
    for node in cluster.nodes:
        argv = [torchrun_path(), "--nnodes", 2, "--node_rank", node.index - 1, "--nproc_per_node", per_node,
                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{cluster.nodes[0].address}:{port}",
                "--rdzv-id", f"job{port}", "--max-restarts", 0, "--monitor-interval", 0.1,
                "--no-python", finetune_bin()] + args
        job.start(node, node.hostname, argv, node_env(cache_root, node, HF_ENDPOINT=hub.url))


def rsh_agent(cluster, directory):
    """OpenMPI's plm_rsh_agent: called as `AGENT [ssh options] HOST COMMAND...`, it runs COMMAND
    through a shell on the node whose address is HOST (entering its namespace), as ssh would."""
    path = directory / "netns_rsh.sh"
    cases = "".join(f'  {n.address}|{n.hostname}) exec {shlex.join(n.command(["sh", "-c"]))} "$*" ;;\n'
                    for n in cluster.nodes)
    path.write_text("#!/bin/sh\n"
                    'while [ "${1#-}" != "$1" ]; do shift; done  # ssh options, if any\n'
                    'host=$1; shift\n'
                    'case "$host" in\n' + cases +
                    '  *) echo "netns_rsh: unknown host $host" >&2; exit 255 ;;\n'
                    'esac\n')
    path.chmod(0o755)
    return path


def start_mpirun(job, cluster, hub, cache_root, args, per_node):
    first = cluster.nodes[0]
    hostfile = job.log_dir / "hostfile"
    hostfile.write_text("".join(f"{n.address} slots={per_node}\n" for n in cluster.nodes))
    # mpirun -x passes one value to every rank: each node's cache is chosen by its host name.
    per_node_cache = ["sh", "-c", 'HF_HUB_CACHE="$0/$(hostname)" exec "$@"', cache_root]
    argv = [mpirun_path(), "--allow-run-as-root", "-np", 2 * per_node, "--hostfile", hostfile,
            "--map-by", "slot", "--mca", "plm_rsh_agent", rsh_agent(cluster, job.log_dir),
            "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", f"{SUBNET}.0/24",
            "--mca", "oob_tcp_if_include", f"{SUBNET}.0/24",
            "-x", "OMP_NUM_THREADS", "-x", "HF_ENDPOINT", "-x", "PATH"] + per_node_cache + [finetune_bin()] + args
    job.start(first, first.hostname, argv, clean_env(HF_ENDPOINT=hub.url))


def start_slurm(job, cluster, hub, cache_root, args, per_node):
    nodelist = "node[1-2]"
    port = cluster.fresh_port()
    tasks = 2 * per_node
    for node in cluster.nodes:
        for local in range(per_node):
            rank = (node.index - 1) * per_node + local
            slurm = {"SLURM_JOB_ID": 4242, "SLURM_JOBID": 4242, "SLURM_STEP_ID": 0, "SLURM_STEPID": 0,
                     "SLURM_PROCID": rank, "SLURM_LOCALID": local, "SLURM_NODEID": node.index - 1,
                     "SLURM_NTASKS": tasks, "SLURM_STEP_NUM_TASKS": tasks, "SLURM_NNODES": 2,
                     "SLURM_STEP_NUM_NODES": 2, "SLURM_JOB_NUM_NODES": 2,
                     "SLURM_TASKS_PER_NODE": f"{per_node}(x2)", "SLURM_STEP_TASKS_PER_NODE": f"{per_node}(x2)",
                     "SLURM_NODELIST": nodelist, "SLURM_JOB_NODELIST": nodelist, "SLURM_STEP_NODELIST": nodelist,
                     "SLURMD_NODENAME": node.hostname, "SLURM_CPUS_ON_NODE": 1}
            # No MASTER_ADDR: finetune takes the node list's first node (Note [Slurm rendezvous]).
            env = node_env(cache_root, node, HF_ENDPOINT=hub.url, MASTER_PORT=port, **slurm)
            job.start(node, f"{node.hostname}.task{rank}", [finetune_bin()] + args, env)


LAUNCHERS = {"torchrun": (start_torchrun, "torchrun"), "mpirun": (start_mpirun, "OpenMPI"),
             "slurm": (start_slurm, "Slurm")}


# ---------------------------------------------------------------- checks

def downloads_by_client(entries):
    """{client address: {"info": n, "files": {file name: GETs of its bytes}}} for REPO."""
    by_client = {}
    for entry in entries:
        counts = by_client.setdefault(entry["client"], {"info": 0, "files": {}})
        path = entry["path"].split("?")[0]
        if entry["method"] == "GET" and path.startswith(f"/api/models/{REPO}"):
            counts["info"] += 1
        elif entry["method"] == "GET" and entry["status"] in (200, 206) and (
                f"/{REPO}/resolve/" in path or path.startswith("/_cdn/")):
            name = path.rsplit("/", 1)[-1]
            counts["files"][name] = counts["files"].get(name, 0) + 1
    return by_client


def check_one_download_per_node(cluster, assets, entries, cache_root):
    by_client = downloads_by_client(entries)
    assert set(by_client) == {n.address for n in cluster.nodes}, by_client
    for node in cluster.nodes:
        counts = by_client[node.address]
        assert counts["info"] == 1, f"{node.hostname}: {counts}"
        assert counts["files"] == {name: 1 for name in assets["files"]}, f"{node.hostname}: {counts}"
        snapshots = list((cache_root / node.hostname / f"models--{REPO.replace('/', '--')}" / "snapshots").iterdir())
        assert len(snapshots) == 1, snapshots
        assert {p.name: p.read_bytes() for p in snapshots[0].iterdir()} == assets["files"]


def check_local_ranks(log, cluster, per_node):
    """Each rank's rendezvous line says its local rank and host, e.g. "[rank 3] rank 3/4 (local 1/2 on
    node2): gloo rendezvous at node1:29501": each node runs ranks base..base+per_node-1 as local
    ranks 0..per_node-1; those with a local rank > 0 wait for their node's local rank 0 to download."""
    lines = re.findall(r"\[rank (\d+)\] rank (\d+)/(\d+) \(local (\d+)/(\d+) on (\S+)\): gloo rendezvous", log)
    world = 2 * per_node
    assert len(lines) == world, log
    ranks_on = {}
    for logged_rank, rank, size, local, local_size, host in lines:
        assert logged_rank == rank and int(size) == world and int(local_size) == per_node, lines
        ranks_on.setdefault(host, []).append((int(rank), int(local)))
    assert set(ranks_on) == {n.hostname for n in cluster.nodes}, lines
    for host, ranks in ranks_on.items():
        base = min(rank for rank, _ in ranks)
        assert sorted(ranks) == [(base + local, local) for local in range(per_node)], (host, lines)
    waiting = sorted(int(r) for r in re.findall(r"\[rank (\d+)\] .*waiting for local rank 0 to fetch", log))
    assert waiting == sorted(rank for ranks in ranks_on.values() for rank, local in ranks if local > 0), log


def check_adapter_equals_reference(out, reference, assets):
    got, want = load_file(str(out / "adapter_model.safetensors")), load_file(str(reference / "adapter_model.safetensors"))
    initial = load_file(str(assets["adapter"] / "adapter_model.safetensors"))
    assert set(got) == set(want)
    worst = 0.0
    for name, tensor in want.items():
        assert relative_error(tensor, initial[name]) > 1e-3, f"{name} did not move: the comparison would be vacuous"
        error = relative_error(got[name], tensor)
        assert error <= TOLERANCE, f"{name}: relative difference {error}"
        worst = max(worst, error)
    ours = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    ref = [json.loads(l) for l in (reference / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in ours] == list(range(1, STEPS + 1))
    assert [m["tokens"] for m in ours] == [m["tokens"] for m in ref]
    return worst


@pytest.mark.parametrize("launcher, per_node", [("torchrun", 1), ("torchrun", 2), ("mpirun", 1), ("slurm", 1)])
def test_two_nodes_train_like_one_process(cluster, hub, assets, reference, tmp_path, launcher, per_node, capsys):
    start, name = LAUNCHERS[launcher]
    cache_root, out = tmp_path / "caches", tmp_path / "out"
    seen = len(hub.requests())
    job = NodeJob(tmp_path)
    started = time.monotonic()
    start(job, cluster, hub, cache_root, train_args(assets, out, GLOBAL_BATCH // (2 * per_node)), per_node)
    codes = job.wait(RUN_TIMEOUT_S)
    elapsed = time.monotonic() - started
    log = job.log()
    assert set(codes.values()) == {0}, f"{codes}\n{log}"

    world = 2 * per_node
    assert f"launcher {name}" in log, log
    assert re.search(rf"batch {GLOBAL_BATCH // world} per device x 1 accumulation x {world} ranks = {GLOBAL_BATCH}",
                     log), log
    check_local_ranks(log, cluster, per_node)
    check_one_download_per_node(cluster, assets, hub.requests()[seen:], cache_root)
    worst = check_adapter_equals_reference(out, reference, assets)
    assert log.count("adapter saved to") == 1, log
    with capsys.disabled():
        print(f"\n[multinode] {launcher} 2 nodes x {per_node}: {elapsed:.1f} s, worst adapter tensor rel {worst:.2e}")


def launcher_outlives_its_coordinator(launcher, how, victim):
    """torchrun's agent and mpirun's orted on node2 talk to node1 (the rendezvous store, mpirun)
    over connections without TCP timeouts: when node1 vanishes without closing them (power_off),
    they linger (over 30 s here, measured; OpenMPI's keepalive defaults alone are 300 s) after the
    ranks they started are gone. That is the launcher's business, not finetune's: only the ranks
    are held to DEAD_NODE_BOUND_S then."""
    return how == "power_off" and victim == 1 and launcher in ("torchrun", "mpirun")


# A lost peer, in finetune's words (Note [Peer heartbeats], ddp/peer_monitor.h).
PEER_LOSS = r"\[error\].*(stopped sending heartbeats|is gone)"
# mpirun may be first: it ends the job itself when it loses a node's daemon (or the rsh agent that
# started it, which here lives in the node's namespace).
MPIRUN_NODE_LOSS = r"ORTE (has lost communication with a remote daemon|was unable to reliably start)"


@pytest.mark.parametrize("launcher", ["torchrun", "mpirun", "slurm"])
@pytest.mark.parametrize("victim", [2, 1])
@pytest.mark.parametrize("how", ["kill", "power_off"])
def test_killed_node_ends_the_other_within_seconds(cluster, hub, assets, tmp_path, launcher, victim, how, capsys):
    """After the first step, one node dies: "kill" SIGKILLs every process in its namespace (its
    kernel still closes their connections, as when a node's processes crash); "power_off" cuts its
    link first, so that no FIN or RST ever reaches the other node, as in a power loss. Node1 also
    hosts the store (rank 0's, or torchrun's agent's) and mpirun. The mock hub, which stands for a
    server elsewhere, is spared. Every process of the other node must be gone within
    DEAD_NODE_BOUND_S, those we started with an error exit, whatever --ddp_timeout (600 s here)."""
    start, _ = LAUNCHERS[launcher]
    out = tmp_path / "out"
    job = NodeJob(tmp_path)
    args = train_args(assets, out, GLOBAL_BATCH // 2, steps=100000, timeout_s=600, save_steps=0)
    start(job, cluster, hub, tmp_path / "caches", args, 1)
    dead, survivor = cluster.nodes[victim - 1], cluster.nodes[2 - victim]
    spared = {hub.process.pid}
    try:
        def first_step_logged():
            for _, name, p in job.processes:
                if p.poll() is not None:
                    raise AssertionError(f"{name} exited {p.returncode} early:\n{job.log()}")
            return (out / "metrics.jsonl").exists() and (out / "metrics.jsonl").read_text().count("\n") >= 1

        wait_for(first_step_logged, 90, "the first logged step")
        assert survivor.pids(spared), f"nothing runs on {survivor.hostname}"
        (dead.power_off if how == "power_off" else dead.kill_all)(spared)
        killed_at = time.monotonic()
        ranks_gone = survivor.wait_empty(DEAD_NODE_BOUND_S, spared, executable=finetune_bin())
        ranks_elapsed = time.monotonic() - killed_at
        gone = survivor.wait_empty(max(0.0, killed_at + DEAD_NODE_BOUND_S + LAUNCHER_EXIT_S - time.monotonic()),
                                   spared)
        elapsed = time.monotonic() - killed_at
        left = {p: open(f"/proc/{p}/cmdline").read().replace("\0", " ")[:100] for p in survivor.pids(spared)}
    finally:
        survivor.kill_all(spared)
        job.kill()
        dead.power_on()
    log = job.log()
    assert ranks_gone, f"{survivor.hostname}'s ranks still run {ranks_elapsed:.1f} s after {dead.hostname} died:\n{log}"
    if not launcher_outlives_its_coordinator(launcher, how, victim):
        assert gone, f"{survivor.hostname} still runs {left} {elapsed:.1f} s after {dead.hostname} died ({how}):\n{log}"
    codes = {name: p.returncode for name, p in job.on(survivor)} if gone else {}
    assert all(code > 0 for code in codes.values()), f"{codes}\n{log}"
    if launcher != "mpirun":
        assert re.search(PEER_LOSS, log), log
    elif codes:  # with node1 (mpirun's) dead, nothing of node2's output can reach us
        assert re.search(PEER_LOSS, log) or re.search(MPIRUN_NODE_LOSS, log), log
    reason = [l for l in log.splitlines() if re.search(PEER_LOSS, l) or re.search(MPIRUN_NODE_LOSS, l)]
    with capsys.disabled():
        node = f"empty after {elapsed:.2f} s" if gone else f"the launcher's {sorted(left.values())} still running"
        print(f"\n[multinode] {launcher}: {how} {dead.hostname}: {survivor.hostname}'s ranks gone after "
              f"{ranks_elapsed:.2f} s, the node {node}, "
              f"exit codes {codes}: {reason[-1] if reason else '(no output of node2 reaches us)'}")
