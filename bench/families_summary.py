"""The results of bench/gpu_families.sh's runs, read back from its results folder, as one table and one JSON.

Each run is named TOOL-SETTING-SHAPE (ours, loop, unsloth; seed, best) or CHECK-SHAPE (parity, trainparity,
on a reduced-depth shape); where its result lies:
  ours-*, loop-*     bench/bench.py's JSON under RESULTS/NAME/bench-SHAPE.json ("ours" / "reference")
  unsloth-*          the last JSON line of RESULTS/NAME.out (bench/peers.py's; {"error": ...} when it failed)
  parity-*, trainparity-*   RESULTS/NAME.out, gpu_parity.py's / gpu_train_parity.py's JSON object

  python3 bench/families_summary.py RESULTS --json OUT/families.json   prints the tables, writes the JSON
  python3 bench/families_summary.py RESULTS --has NAME                 exit 0 when NAME has a result
"""
import argparse
import json
import os
import sys

SHAPES = ("gemma-3-4b", "gemma-2-9b", "phi-4-mini")


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def last_json_line(path):
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def result(results, name):
    """NAME's result (a dict), or None when it has none (not run, or failed before writing one)."""
    kind, rest = name.split("-", 1)
    if kind in ("ours", "loop"):
        shape = rest.split("-", 1)[1]
        rows = read_json(os.path.join(results, name, f"bench-{shape}.json"))
        return rows[0].get("ours" if kind == "ours" else "reference") if rows else None
    if kind == "unsloth":
        return last_json_line(os.path.join(results, name + ".out"))
    found = read_json(os.path.join(results, name + ".out"))
    return found if isinstance(found, dict) and "pass" in found else None


def measured(entry):
    return entry is not None and "tokens_per_s_per_gpu" in entry


def figure(value, digits=0):
    return "-" if value is None else f"{value:,.{digits}f}"


def speed_rows(results):
    lines = ["| shape | setting | ours tok/s | loop tok/s | ours / loop | Unsloth tok/s | ours / Unsloth "
             "| peak GiB ours / loop / Unsloth |", "|---|---|---|---|---|---|---|---|"]
    collected = {}
    for setting in ("seed", "best"):
        for shape in SHAPES:
            entries = {tool: result(results, f"{tool}-{setting}-{shape}") for tool in ("ours", "loop", "unsloth")}
            collected[f"{setting}-{shape}"] = entries
            if not any(entries.values()):
                continue
            speed = {t: e["tokens_per_s_per_gpu"] if measured(e) else None for t, e in entries.items()}
            memory = {t: e.get("peak_memory_gib") if measured(e) else None for t, e in entries.items()}
            ratio = {t: speed["ours"] / speed[t] if speed["ours"] and speed[t] else None for t in ("loop", "unsloth")}
            lines.append(f"| {shape} | {setting} | {figure(speed['ours'])} | {figure(speed['loop'])} | "
                         f"{figure(ratio['loop'], 2)} | {figure(speed['unsloth'])} | {figure(ratio['unsloth'], 2)} | "
                         + " / ".join(figure(memory[t], 2) for t in ("ours", "loop", "unsloth")) + " |")
            if entries["unsloth"] is not None and "error" in entries["unsloth"]:
                lines.append(f"|  | Unsloth failed: {entries['unsloth']['error'][:300]} | | | | | | |")
    return lines, collected


def parity_rows(results):
    lines = ["| shape | logits: ours vs fp32 | transformers bf16 vs fp32 | ratio (bound 1.01) | training: loss ratio "
             "| update ratio (bound 1.01) | pass (logits / training) |", "|---|---|---|---|---|---|---|"]
    collected = {}
    names = sorted({n.split("-", 1)[1] for n in os.listdir(results) if n.startswith(("parity-", "trainparity-"))
                    and n.endswith(".out")}) if os.path.isdir(results) else []
    for shape in (n[:-len(".out")] for n in names):
        logits, training = result(results, f"parity-{shape}"), result(results, f"trainparity-{shape}")
        collected[shape] = {"logits": logits, "training": training}
        worst = (logits or {}).get("worst", {})
        ratio = (logits or {}).get("bound", {}).get("ratio_ours_vs_fp32_to_hf_bf16_vs_fp32")
        train_ratio = (training or {}).get("ratio_ours_to_reference_bf16_vs_fp32", {})
        verdict = " / ".join("-" if r is None else ("PASS" if r["pass"] else "FAIL") for r in (logits, training))
        lines.append(f"| {shape} | {figure(worst.get('ours_vs_fp32'), 5)} | {figure(worst.get('hf_bf16_vs_fp32'), 5)} "
                     f"| {figure(ratio, 4)} | {figure(train_ratio.get('loss_rel_error'), 3)} "
                     f"| {figure(train_ratio.get('adapter_update_rel_error'), 3)} | {verdict} |")
    return lines, collected


def main():
    p = argparse.ArgumentParser()
    p.add_argument("results")
    p.add_argument("--json", help="write every result here")
    p.add_argument("--has", help="exit 0 when this run has a result, 1 otherwise")
    args = p.parse_args()
    if args.has:
        found = result(args.results, args.has)
        sys.exit(0 if found is not None and "error" not in found else 1)
    speed, speeds = speed_rows(args.results)
    parity, parities = parity_rows(args.results)
    print("\n".join(speed + [""] + parity))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"speed": speeds, "parity": parities}, f, indent=1)


if __name__ == "__main__":
    main()
