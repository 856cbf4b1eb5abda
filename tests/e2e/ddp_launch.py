"""Starting the real `finetune` binary as a multi-process job: under mpirun, under torchrun, or as
processes we start ourselves with torchrun's variables (so a test holds each rank's PID).

Every launch gets its own free MASTER_PORT and a clean environment: launcher variables from the
caller's shell would otherwise leak into the job (see Note [Launcher detection] in launch_env.cpp).
Every wait is bounded: a distributed bug must fail a test, never hang it.
"""
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

from conftest import ROOT, finetune_bin

VENV_BIN = os.path.expanduser("~/.cache/finetune/venv/bin")

LAUNCHER_VARIABLE_PREFIXES = ("OMPI_", "PMI_", "PMIX_", "SLURM_", "TORCHELASTIC_", "MPI_LOCAL")
MCA_SETTING_PREFIXES = ("OMPI_MCA_", "PMIX_MCA_")  # the user's MPI configuration (e.g. plm_rsh_agent): kept
LAUNCHER_VARIABLES = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                      "MASTER_ADDR", "MASTER_PORT"}


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra):
    """The caller's environment without any launcher's variables; one thread per rank (2 ranks share
    2 cores, and the single-process reference uses the same thread count)."""
    env = {k: v for k, v in os.environ.items()
           if k not in LAUNCHER_VARIABLES and (not k.startswith(LAUNCHER_VARIABLE_PREFIXES) or
                                                k.startswith(MCA_SETTING_PREFIXES))}
    env["OMP_NUM_THREADS"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def torchrun_path():
    """The torchrun of the Python running the tests (its venv), else the project venv's, else PATH's."""
    search = os.pathsep.join([os.path.dirname(sys.executable), VENV_BIN, os.environ.get("PATH", "")])
    path = shutil.which("torchrun", path=search)
    if path is None:
        raise AssertionError(f"torchrun not found in {search}")
    return path


def mpirun_path():
    path = shutil.which("mpirun")
    if path is None:
        raise AssertionError("mpirun (OpenMPI) not found on PATH")
    return path


def launcher_command(launcher, nproc, port, program):
    """argv prefix that starts `program` (a list) as `nproc` ranks under `launcher`.
    "mpirun-mpi-rendezvous": mpirun without MASTER_ADDR/MASTER_PORT, so the ranks exchange the
    store address over MPI (src/dist/rendezvous.cpp)."""
    if launcher == "mpirun":
        return [mpirun_path(), "--allow-run-as-root", "--oversubscribe", "-np", str(nproc),
                "-x", "MASTER_ADDR", "-x", "MASTER_PORT", "-x", "OMP_NUM_THREADS"] + program
    if launcher == "mpirun-mpi-rendezvous":
        return [mpirun_path(), "--allow-run-as-root", "--oversubscribe", "-np", str(nproc),
                "-x", "OMP_NUM_THREADS"] + program
    if launcher == "torchrun":
        return [torchrun_path(), "--no-python", f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1",
                f"--master_port={port}"] + program
    if launcher == "single":
        assert nproc == 1
        return program
    raise ValueError(launcher)


def run_launched(launcher, nproc, args, timeout=180, program=None, extra_env=None, launcher_args=()):
    """Runs the job to completion; returns the CompletedProcess (stdout/stderr of all ranks)."""
    port = free_port()
    program = program or [finetune_bin()]
    master = {} if launcher == "mpirun-mpi-rendezvous" else {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
    env = clean_env(**master, **(extra_env or {}))
    command = launcher_command(launcher, nproc, port, program)
    if launcher == "torchrun":
        command = command[:2] + list(launcher_args) + command[2:]
    command += [str(a) for a in args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


def check_ok(proc, what):
    if proc.returncode != 0:
        raise AssertionError(f"{what} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


_PTRACE_SEIZE, _PTRACE_INTERRUPT = 0x4206, 0x4207
_WALL = 0x40000000  # waitpid: any child thread


class ManualJob:
    """`world_size` finetune processes started directly with torchrun's variables (no agent store:
    rank 0 hosts the TCP store). stdout/stderr of rank r go to files in `log_dir`."""

    def __init__(self, world_size, args, log_dir, extra_env=None, ranks=None):
        """`ranks`: which ranks to start (default all); processes[i] is the i-th started rank."""
        self.port = free_port()
        self.log_dir = log_dir
        self.processes = []
        for rank in range(world_size) if ranks is None else ranks:
            env = clean_env(RANK=rank, WORLD_SIZE=world_size, LOCAL_RANK=rank, LOCAL_WORLD_SIZE=world_size,
                            MASTER_ADDR="127.0.0.1", MASTER_PORT=self.port, **(extra_env or {}))
            out = open(log_dir / f"rank{rank}.out", "w")
            err = open(log_dir / f"rank{rank}.err", "w")
            self.processes.append(subprocess.Popen([finetune_bin()] + [str(a) for a in args], stdout=out,
                                                   stderr=err, env=env, cwd=ROOT))
            out.close()
            err.close()

    def output(self, rank):
        """(stdout, stderr) of `rank`."""
        return (self.log_dir / f"rank{rank}.out").read_text(), (self.log_dir / f"rank{rank}.err").read_text()

    def wait(self, rank, timeout):
        """Exit code of `rank`, or None if it is still running after `timeout` seconds."""
        try:
            return self.processes[rank].wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def signal(self, rank, sig):
        self.processes[rank].send_signal(sig)

    def freeze_main_thread(self, rank):
        """Stops only the main thread of `rank` (a ptrace interrupt): its other threads, the peer
        monitor's heartbeat among them, run on, as in a rank that is alive but stuck. OSError when
        this machine does not allow ptrace."""
        libc = ctypes.CDLL(None, use_errno=True)
        libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
        libc.ptrace.restype = ctypes.c_long
        pid = self.processes[rank].pid
        for request in (_PTRACE_SEIZE, _PTRACE_INTERRUPT):
            if libc.ptrace(request, pid, None, None) != 0:
                errno = ctypes.get_errno()
                raise OSError(errno, f"ptrace request {request:#x} on rank {rank}: {os.strerror(errno)}")
        os.waitpid(pid, _WALL)  # take the stop report, so that Popen's waits see only the exit

    def kill_all(self):
        for p in self.processes:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)  # works on stopped processes too
        for p in self.processes:
            p.wait(timeout=30)


def wait_for(condition, timeout, what, poll=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
