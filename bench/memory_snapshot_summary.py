"""What is alive at the peak of a CUDA allocator history (issue 25, item 6: peak memory at the seed
setting): reads the snapshot `finetune train` writes with FINETUNE_CUDA_MEMORY_HISTORY=PATH (the
pickle torch.cuda.memory._snapshot() gives), replays its alloc/free events, and prints the peak of
allocated bytes, when it happened (the event index, and the allocation that reached it), and the
live allocations at that moment grouped by the innermost finetune frame of their C++ stacks.

usage: python3 bench/memory_snapshot_summary.py SNAPSHOT.pickle [--top 25] [--largest 0] [--device 0]
(--largest K also lists the K largest allocations alive at the peak, each with its size and stack.)
"""
import argparse
import collections
import pickle

GiB = float(1 << 30)


def finetune_frame(frames):
    """The innermost frame in finetune's own code, else the innermost named one."""
    names = [frame.get("name", "?") for frame in frames or []]
    for name in names:
        if "finetune::" in name:
            return name.split("(")[0]
    return names[0].split("(")[0] if names else "(no stack)"


def stack_text(frames, depth=6):
    names = [frame.get("name", "?").split("(")[0] for frame in frames or [] if "finetune::" in frame.get("name", "")]
    return " <- ".join(names[:depth]) if names else finetune_frame(frames)


def replay(events):
    """(peak bytes, event index of the peak, {addr: event} alive at the peak)."""
    live, total, peak, peak_index, peak_live = {}, 0, 0, -1, {}
    for index, event in enumerate(events):
        action = event.get("action")
        if action == "alloc":
            live[event["addr"]] = event
            total += event["size"]
            if total > peak:
                peak, peak_index, peak_live = total, index, dict(live)
        elif action in ("free_completed",) and event["addr"] in live:
            total -= live.pop(event["addr"])["size"]
    return peak, peak_index, peak_live


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("snapshot")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--largest", type=int, default=0, help="also list the K largest allocations alive at the peak")
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args()
    with open(args.snapshot, "rb") as f:
        snapshot = pickle.load(f)
    traces = snapshot.get("device_traces", [])
    events = traces[args.device] if args.device < len(traces) else []
    peak, peak_index, alive = replay(events)
    allocs = sum(1 for event in events if event.get("action") == "alloc")
    print(f"{len(events)} events ({allocs} allocations); peak {peak / GiB:.3f} GiB at event {peak_index}")
    if peak_index >= 0:
        print("  reached by:", f"{events[peak_index]['size'] / 2**20:.1f} MiB", stack_text(events[peak_index].get("frames")))
    groups = collections.defaultdict(lambda: [0, 0, None])
    for event in alive.values():
        group = groups[finetune_frame(event.get("frames"))]
        group[0] += event["size"]
        group[1] += 1
        group[2] = group[2] or stack_text(event.get("frames"))
    print(f"alive at the peak, by innermost finetune frame (top {args.top}):")
    for name, (size, count, stack) in sorted(groups.items(), key=lambda item: -item[1][0])[:args.top]:
        print(f"  {size / GiB:8.3f} GiB  {count:6d}  {name}")
        print(f"                    {stack}")
    if args.largest:
        print(f"the {args.largest} largest allocations alive at the peak, outside the model's weights:")
        weights = ("make_decoder_layer", "CausalLM::CausalLM")
        rest = [e for e in alive.values() if not any(w in finetune_frame(e.get("frames")) for w in weights)]
        for event in sorted(rest, key=lambda e: -e["size"])[:args.largest]:
            print(f"  {event['size'] / 2**20:9.2f} MiB  {stack_text(event.get('frames'), depth=9)}")
    in_use = sum(segment.get("allocated_size", 0) for segment in snapshot.get("segments", [])
                 if segment.get("device", 0) == args.device)
    print(f"allocated when the snapshot was taken: {in_use / GiB:.3f} GiB")


if __name__ == "__main__":
    main()
