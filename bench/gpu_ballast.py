"""GPU memory held by a process of its own (bench/long_context_probe.py's ballast): with its CUDA
context, about --bytes of the visible GPU stay taken until the process is killed.

It initialises CUDA, takes its context's footprint as total - free right after (so the GPU must
otherwise be empty: another process's memory would be counted as this context's), allocates
--bytes minus that footprint (never negative) with torch.empty, writes every byte of it so the pages
are really taken, prints one JSON line and sleeps until killed, or until its parent exits (a probe
killed at a device call's time limit runs no cleanup; an orphaned ballast would shrink the next
call's GPU). A footprint over MAX_CONTEXT_BYTES means the GPU was not empty: it exits 1 rather than
hold too little. Uses the GPU CUDA_VISIBLE_DEVICES leaves it (its first).

GPU capacity emulation (--gpu_capacity BYTES): the process also holds capacity_extra_bytes, the
card's total (torch.cuda.mem_get_info()[1]) minus BYTES (none when the card is not larger), so the
other processes find the free memory of a card of BYTES total, e.g. an 80 GB H100 (torch reports
79.19 GiB) on an H200 (139.8 GiB). Only free memory is emulated: a tool that reads the card's total
(mem_get_info's second value, the device properties) still sees the real card, and the bandwidth and
clocks are the real card's.

The JSON line: {"ballast_bytes": <the allocation>, "context_bytes": <the footprint>,
"gpu_total_bytes": <the card's total>, "gpu_capacity_bytes": <BYTES or null>,
"capacity_extra_bytes": <the extra bytes held for it>}.

  python3 bench/gpu_ballast.py --bytes 13779911680
  python3 bench/gpu_ballast.py --bytes 0 --gpu_capacity 85029615042
"""
import argparse
import json
import os
import sys
import time

import torch

# A CUDA context with PyTorch's kernels loaded takes about 0.5 GiB on an H100: more was someone else's.
MAX_CONTEXT_BYTES = 2 << 30


def capacity_extra_bytes(total, capacity):
    """What a card of `total` bytes must additionally hold to leave the others a card of `capacity`
    bytes: max(0, total - capacity); 0 without a capacity (None)."""
    if capacity is None:
        return 0
    if capacity <= 0:
        raise ValueError(f"gpu_ballast: a GPU capacity of {capacity} bytes")
    return max(0, total - capacity)


def allocation_bytes(nbytes, context, extra):
    """The tensor to allocate so that this process holds `nbytes` + `extra` with its context of
    `context` bytes: the context counts against both (never negative)."""
    return max(0, nbytes + extra - context)


def context_bytes():
    """The footprint of this process's freshly made CUDA context, and the card's total: (total - free,
    total)."""
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the context exists once a kernel has run
    free, total = torch.cuda.mem_get_info()
    return total - free, total


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
    p.add_argument("--gpu_capacity", type=int, default=None,
                   help="emulate a card of this many bytes: also hold max(0, the card's total - this)")
    args = p.parse_args()
    parent = os.getppid()
    context, total = context_bytes()
    if context > MAX_CONTEXT_BYTES:
        sys.exit(f"gpu_ballast: {context} bytes of the GPU taken right after CUDA's start: it is not empty")
    extra = capacity_extra_bytes(total, args.gpu_capacity)
    size = allocation_bytes(args.bytes, context, extra)
    ballast = hold(size)  # noqa: F841 (held while main runs)
    print(json.dumps({"ballast_bytes": size, "context_bytes": context, "gpu_total_bytes": total,
                      "gpu_capacity_bytes": args.gpu_capacity, "capacity_extra_bytes": extra}), flush=True)
    while os.getppid() == parent:
        time.sleep(1)


if __name__ == "__main__":
    main()
