"""GPU memory held by a process of its own (bench/long_context_probe.py's ballast): with its CUDA
context, about --bytes of the visible GPU stay taken until the process is killed.

It initialises CUDA, takes its context's footprint as total - free right after (so the GPU must
otherwise be empty: another process's memory would be counted as this context's), allocates
--bytes minus that footprint (never negative) with torch.empty, writes every byte of it so the pages
are really taken, prints one JSON line {"ballast_bytes": <the allocation>, "context_bytes": <the
footprint>} and sleeps until killed, or until its parent exits (a probe killed at a device call's
time limit runs no cleanup; an orphaned ballast would shrink the next call's GPU). A footprint over
MAX_CONTEXT_BYTES means the GPU was not empty: it exits 1 rather than hold too little. Uses the GPU
CUDA_VISIBLE_DEVICES leaves it (its first).

  python3 bench/gpu_ballast.py --bytes 13779911680
"""
import argparse
import json
import os
import sys
import time

import torch

# A CUDA context with PyTorch's kernels loaded takes about 0.5 GiB on an H100: more was someone else's.
MAX_CONTEXT_BYTES = 2 << 30


def context_bytes():
    """The footprint of this process's freshly made CUDA context: total - free on the device."""
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the context exists once a kernel has run
    free, total = torch.cuda.mem_get_info()
    return total - free


def hold(nbytes):
    """`nbytes` of GPU memory, written once (a tensor of uint8; None for 0)."""
    if nbytes <= 0:
        return None
    ballast = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    ballast.fill_(1)
    torch.cuda.synchronize()
    return ballast


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bytes", type=int, required=True, help="GPU memory to take, this process's context included")
    args = p.parse_args()
    parent = os.getppid()
    context = context_bytes()
    if context > MAX_CONTEXT_BYTES:
        sys.exit(f"gpu_ballast: {context} bytes of the GPU taken right after CUDA's start: it is not empty")
    size = max(0, args.bytes - context)
    ballast = hold(size)  # noqa: F841 (held while main runs)
    print(json.dumps({"ballast_bytes": size, "context_bytes": context}), flush=True)
    while os.getppid() == parent:
        time.sleep(1)


if __name__ == "__main__":
    main()
