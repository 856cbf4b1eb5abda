#!/usr/bin/env python3
"""Expected per-step efficiency of the literal rank rule and of the balanced step planner, at 2, 4,
8 and 16 ranks, by simulation (issue 25, item 5: machines with more than 2 GPUs are not at hand).

Usage: python3 bench/simulate_step_planning.py [--steps 2000] [--batch 1] [--accumulation 4]
                                              [--max_seq_length 2048] [--seed 0] [--packing]
                                              [--alpaca MEDIAN SIGMA] [--alpaca_lengths FILE]

Efficiency of one step = mean over ranks of a rank's cost / its maximum: the fraction of the
ranks' time that is not spent waiting for the slowest rank. The cost model and both plans mirror
src/data/step_planner.cpp (plan_step_literal, plan_step_balanced, step_plan_efficiency) with its
default constants; tests/data/test_step_planner.cpp asserts the C++ planner's efficiency on a
fixed sample. Length distributions (clipped to [1, max_seq_length]):
  - bench: log-normal, median 200, sigma 0.6 (bench/bench.py's synthetic rows);
  - alpaca-cleaned fit: log-normal, median 158.7, sigma 0.631, fitted by bench/alpaca_lengths.py to
    the first 1,000 rows of alpaca-cleaned as finetune formats them, with the Llama-3 tokenizer
    (median 154, mean 193.4, max 567 tokens);
  - alpaca-cleaned rows: those 1,000 lengths themselves (bench/alpaca_cleaned_lengths.json), drawn
    with replacement.
Pure Python, no dependencies.
"""
import argparse
import json
import math
import os
import random

PER_TOKEN = 1.0
PER_SQUARED_TOKEN = 3.8e-5  # StepCostModel in include/finetune/data/step_planner.h: the calibration
PER_MICRO_BATCH = 36.0


def item_cost(tokens):
    return PER_TOKEN * tokens + PER_SQUARED_TOKEN * tokens * tokens


def form_micro_batches(share, lengths, budget):
    """First-fit decreasing by tokens (ties: the earlier item); `share` ascending."""
    batches, used = [], []
    for position in sorted(share, key=lambda p: -lengths[p]):  # sorted() is stable
        for b in range(len(batches)):
            if used[b] + lengths[position] <= budget:
                batches[b].append(position)
                used[b] += lengths[position]
                break
        else:
            batches.append([position])
            used.append(lengths[position])
    return batches


def position_cost(position, lengths, item_costs=None):
    """`item_costs`: each item's cost when an item is not one sample (a packed row); default item_cost(length)."""
    return item_costs[position] if item_costs else item_cost(lengths[position])


def share_cost(share, lengths, budget, item_costs=None):
    cost = sum(position_cost(p, lengths, item_costs) for p in share)
    return cost + PER_MICRO_BATCH * len(form_micro_batches(share, lengths, budget))


def improve_once(shares, costs, lengths, budget, item_costs=None):
    high = max(range(len(costs)), key=lambda r: (costs[r], -r))
    low = min(range(len(costs)), key=lambda r: (costs[r], r))
    if high == low:
        return False
    best = costs[high] * (1.0 - 1e-12)
    found = None

    def consider(high_share, low_share):
        nonlocal best, found
        high_cost = share_cost(high_share, lengths, budget, item_costs)
        low_cost = share_cost(low_share, lengths, budget, item_costs)
        if max(high_cost, low_cost) < best:
            best = max(high_cost, low_cost)
            found = (high_share, low_share, high_cost, low_cost)

    for moved in shares[high]:
        rest_high = [p for p in shares[high] if p != moved]
        consider(rest_high, sorted(shares[low] + [moved]))
        for back in shares[low]:
            consider(sorted(rest_high + [back]), sorted([p for p in shares[low] if p != back] + [moved]))
    if found is None:
        return False
    shares[high], shares[low], costs[high], costs[low] = found
    return True


def plan_balanced(lengths, world, budget, item_costs=None):
    order = sorted(range(len(lengths)), key=lambda p: -position_cost(p, lengths, item_costs))
    shares, load = [[] for _ in range(world)], [0.0] * world
    for position in order:
        rank = min(range(world), key=lambda r: (load[r], r))
        shares[rank].append(position)
        load[rank] += position_cost(position, lengths, item_costs)
    shares = [sorted(share) for share in shares]
    costs = [share_cost(share, lengths, budget, item_costs) for share in shares]
    for _ in range(4 * len(lengths) + 4):
        if not improve_once(shares, costs, lengths, budget, item_costs):
            break
    return [form_micro_batches(share, lengths, budget) for share in shares]


def plan_literal(lengths, world, batch):
    plan = []
    for rank in range(world):
        mine = list(range(rank, len(lengths), world))
        plan.append([mine[i:i + batch] for i in range(0, len(mine), batch)])
    return plan


def efficiency(plan, lengths, item_costs=None):
    costs = [sum(PER_MICRO_BATCH + sum(position_cost(p, lengths, item_costs) for p in batch) for batch in batches
                 if batch)
             for batches in plan]
    return sum(costs) / len(costs) / max(costs) if max(costs) > 0 else 1.0


def log_normal_lengths(rng, count, median, sigma, max_length):
    return [min(max(1, round(median * math.exp(sigma * rng.gauss(0.0, 1.0)))), max_length) for _ in range(count)]


def resampled_lengths(rng, count, lengths):
    return [rng.choice(lengths) for _ in range(count)]


def pack_rows(lengths, capacity):
    """Best-fit decreasing into rows of `capacity` tokens, as pack_samples (src/data/batch.cpp)."""
    rows, left = [], []
    for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        fits = [r for r in range(len(rows)) if left[r] >= lengths[index]]
        if fits:
            row = min(fits, key=lambda r: (left[r], r))
        else:
            row = len(rows)
            rows.append([])
            left.append(capacity)
        rows[row].append(index)
        left[row] -= lengths[index]
    return rows


def packed_rows_comparison(draw, world, args, rng):
    """--packing: the step's packed rows planned as rows (what the planner does) against the same step's
    samples planned one by one, the latter taken only where it needs no more micro-batches a rank and
    costs no more. Returns (row plan efficiency, sample plan efficiency, share of steps it was taken)."""
    per_step = world * args.batch * args.accumulation
    lengths = draw(rng, per_step * 12 * args.steps)
    rows = pack_rows(lengths, args.max_seq_length)
    rng.shuffle(rows)
    budget = args.batch * args.max_seq_length
    by_rows = by_samples = taken = 0.0
    steps = min(args.steps, len(rows) // per_step)
    for step in range(steps):
        step_rows = rows[step * per_step:(step + 1) * per_step]
        row_tokens = [sum(lengths[i] for i in row) for row in step_rows]
        row_costs = [sum(item_cost(lengths[i]) for i in row) for row in step_rows]
        row_plan = plan_balanced(row_tokens, world, budget, row_costs)
        row_efficiency = efficiency(row_plan, row_tokens, row_costs)
        samples = [lengths[i] for row in step_rows for i in row]
        sample_plan = plan_balanced(samples, world, budget)
        sample_efficiency = efficiency(sample_plan, samples)
        most = lambda plan: max(len([b for b in batches if b]) for batches in plan)
        by_rows += row_efficiency
        if most(sample_plan) <= most(row_plan) and sample_efficiency >= row_efficiency:
            by_samples += sample_efficiency
            taken += 1
        else:
            by_samples += row_efficiency
    return by_rows / steps, by_samples / steps, taken / steps


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=1, help="per_device_train_batch_size")
    parser.add_argument("--accumulation", type=int, default=4, help="gradient_accumulation_steps")
    parser.add_argument("--max_seq_length", type=int, default=2048)
    parser.add_argument("--alpaca", type=float, nargs=2, default=(158.7, 0.631), metavar=("MEDIAN", "SIGMA"))
    parser.add_argument("--alpaca_lengths", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                 "alpaca_cleaned_lengths.json"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--packing", action="store_true",
                        help="packed rows (best-fit decreasing to max_seq_length): the balanced plan of the step's "
                             "rows against planning their samples one by one")
    args = parser.parse_args()
    with open(args.alpaca_lengths) as f:
        alpaca_rows = json.load(f)
    log_normal = lambda median, sigma: lambda rng, count: log_normal_lengths(rng, count, median, sigma,
                                                                             args.max_seq_length)
    distributions = {
        "bench (log-normal, median 200, sigma 0.6)": log_normal(200.0, 0.6),
        f"alpaca-cleaned fit (log-normal, median {args.alpaca[0]:g}, sigma {args.alpaca[1]:g})": log_normal(*args.alpaca),
        f"alpaca-cleaned rows ({len(alpaca_rows)} lengths, resampled)":
            lambda rng, count: [min(length, args.max_seq_length) for length in resampled_lengths(rng, count, alpaca_rows)],
    }
    budget = args.batch * args.max_seq_length
    if args.packing:
        print(f"per step: ranks x {args.batch} x {args.accumulation} packed rows of {args.max_seq_length} tokens; "
              f"{args.steps} steps at most")
        print("| lengths | ranks | rows planned | samples planned where no worse | steps taken |")
        print("|---|---|---|---|---|")
        for name, draw in distributions.items():
            for world in (2, 4, 8):
                rows, samples, taken = packed_rows_comparison(draw, world, args, random.Random(args.seed * 1000 + world))
                print(f"| {name} | {world} | {rows:.4f} | {samples:.4f} | {taken:.2f} |")
        return
    print(f"per step: ranks x {args.batch} x {args.accumulation} samples; token budget {budget}; "
          f"{args.steps} steps; cost = tokens + {PER_SQUARED_TOKEN:g} tokens^2 + {PER_MICRO_BATCH:g} per micro-batch")
    print("| lengths | ranks | literal | balanced | balanced micro-batches/rank |")
    print("|---|---|---|---|---|")
    for name, draw in distributions.items():
        for world in (2, 4, 8, 16):
            rng = random.Random(args.seed * 1000 + world)
            literal = balanced = micro_batches = 0.0
            for _ in range(args.steps):
                lengths = draw(rng, world * args.batch * args.accumulation)
                literal += efficiency(plan_literal(lengths, world, args.batch), lengths)
                plan = plan_balanced(lengths, world, budget)
                balanced += efficiency(plan, lengths)
                micro_batches += len(plan[0])
            n = args.steps
            print(f"| {name} | {world} | {literal / n:.3f} | {balanced / n:.3f} | {micro_batches / n:.2f} |")


if __name__ == "__main__":
    main()
