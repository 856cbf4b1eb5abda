#!/usr/bin/env python3
"""Where a profiled window's time goes, from finetune's Chrome trace (--profile_start_step writes
profile-rank<N>.json): the GPU's busy and idle time, the longest idle gaps with the host call that
was running when each began, the CUDA runtime calls by total time (launches, synchronisations),
and the main thread's top-level operators.

usage: trace_host_summary.py TRACE.json[.gz] [...]"""
import collections
import gzip
import json
import sys

DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def device_gaps(events, without_nccl=False):
    spans = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in events if e.get("cat") in DEVICE_CATEGORIES
                   and not (without_nccl and "nccl" in e["name"].lower()))
    busy, gaps = 0.0, []
    start, end, last = spans[0]
    for s, e, name in spans[1:]:
        if s > end:
            busy += end - start
            gaps.append((s - end, end, last, name))
            start = s
        if e > end:
            end, last = e, name
    busy += end - start
    return spans[0][0], end, busy, gaps


def host_call_at(events, when):
    """The innermost host event (operator or runtime call) running at `when`."""
    best = None
    for e in events:
        if e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver") and e["ts"] <= when <= e["ts"] + e["dur"]:
            if best is None or e["dur"] < best["dur"]:
                best = e
    return best["name"] if best else "(no host call: host code between operators)"


def summarise(path):
    events = load(path)
    first, last, busy, gaps = device_gaps(events)
    span = last - first
    print(f"== {path}\nGPU span {span / 1e3:.1f} ms, busy {busy / 1e3:.1f} ms ({100 * busy / span:.1f}%), "
          f"idle {(span - busy) / 1e3:.1f} ms in {len(gaps)} gaps; gaps > 50 us: "
          f"{sum(g[0] for g in gaps if g[0] > 50) / 1e3:.1f} ms in {sum(1 for g in gaps if g[0] > 50)}")
    _, _, computing, _ = device_gaps(events, without_nccl=True)
    print(f"GPU busy without NCCL kernels (which spin while a peer is late): {computing / 1e3:.1f} ms "
          f"({100 * computing / span:.1f}%)")
    for gap, at, before, after in sorted(gaps, reverse=True)[:10]:
        print(f"  idle {gap / 1e3:7.2f} ms at {(at - first) / 1e3:8.1f} ms: after {before[:50]} | before {after[:50]}"
              f" | host in {host_call_at(events, at + gap / 2)[:60]}")
    runtime = collections.defaultdict(lambda: [0.0, 0])
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver"):
            runtime[e["name"]][0] += e["dur"]
            runtime[e["name"]][1] += 1
    print("CUDA runtime calls by total time:")
    for name, (total, calls) in sorted(runtime.items(), key=lambda x: -x[1][0])[:12]:
        print(f"  {name[:40]:40s} {total / 1e3:9.2f} ms {calls:7d} calls")
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    threads = collections.Counter(e["tid"] for e in ops)
    print("host threads with operators:", dict(threads.most_common(4)))
    main = threads.most_common(1)[0][0]
    top, end = [], -1.0
    for e in sorted((e for e in ops if e["tid"] == main), key=lambda e: e["ts"]):
        if e["ts"] >= end:
            top.append(e)
            end = e["ts"] + e["dur"]
    totals = collections.defaultdict(lambda: [0.0, 0])
    for e in top:
        totals[e["name"]][0] += e["dur"]
        totals[e["name"]][1] += 1
    print(f"main thread top-level operators: {sum(t[0] for t in totals.values()) / 1e3:.1f} ms of "
          f"{(top[-1]['ts'] + top[-1]['dur'] - top[0]['ts']) / 1e3:.1f} ms")
    for name, (total, calls) in sorted(totals.items(), key=lambda x: -x[1][0])[:15]:
        print(f"  {name[:48]:48s} {total / 1e3:9.2f} ms {calls:7d}")


if __name__ == "__main__":
    for trace in sys.argv[1:]:
        summarise(trace)
