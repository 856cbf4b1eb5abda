// Step planning: one optimizer step's work items across all ranks -> for each rank, its
// micro-batches. Pure functions, LibTorch-free (issue 25, item 1). MicroBatchStream
// (data/micro_batch_stream.h) runs it on every rank for every step (--step_planning).
//
// The input is exactly what the literal rule (Note [One rule for ranks], rank_assignment.h) deals
// out for one step: world x batch x accumulation samples, or packed rows. With the loss normalised
// by the global count of trained tokens, the optimizer step depends only on which items form the
// step, not on which rank or micro-batch computes them; so the planner is free to move items.
//
// plan_step_balanced balances a cost model per rank (tokens, attention's quadratic term, a cost
// per micro-batch): longest-processing-time-first over the ranks, then moves and swaps of single
// items from the most to the least loaded rank while that lowers the maximum. A rank's items form
// micro-batches by a token budget (first-fit decreasing), with the default budget
// per_device_train_batch_size x max_seq_length: no micro-batch holds more tokens than the literal
// schedule's largest could. Padding-free micro-batches count their tokens against the budget;
// padded ones (StepPlannerConfig::padded_rows) their rows times their longest row. An item of
// several rows (a preference pair) is placed whole: all its rows in one micro-batch of one rank. Ranks get the same number of micro-batches (trailing ones may be empty:
// zero weight, the rank still takes part in the step's collectives). Deterministic: ties go to the
// earlier item and the lower rank, so every rank computes the same plan from the same input.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace finetune {

// --step_planning: how one optimizer step's items are spread over ranks and micro-batches.
enum class StepPlanning {
  balanced,  // plan_step_balanced
  literal,   // the rank rule as it deals them (Note [One rule for ranks]): batch items per micro-batch
};
// The option's names, in StepPlanning's order (the parser and its help read them here).
const std::vector<std::string>& step_planning_names();
StepPlanning step_planning_from_name(const std::string& name);  // Error for another name
const std::string& step_planning_name(StepPlanning planning);

// A unit the planner places whole: a sample, a packed row, or rows that must stay together in one
// micro-batch on one rank (a preference pair's chosen and rejected rows).
struct StepItem {
  int64_t tokens = 0;          // padding-free tokens
  int64_t squared_tokens = 0;  // sum over its samples of length^2 (attention's quadratic term)
  int64_t rows = 1;            // rows it occupies in a padded micro-batch
  int64_t longest_row = 0;     // the longest of those rows
  // Its size in a micro-batch of padded rows `longest` tokens wide (longest >= longest_row).
  int64_t padded_size(int64_t longest) const { return rows * longest; }
};

StepItem sample_step_item(int64_t length);
StepItem packed_row_step_item(const std::vector<int64_t>& sample_lengths);
// Rows of these lengths kept together (a preference pair: chosen, rejected).
StepItem grouped_rows_step_item(const std::vector<int64_t>& row_lengths);

// Cost of a rank's share in token-equivalents, calibrated on Qwen3-8B from GPU measurements (one
// token = the best setting's time a token: 97.5 us at 10,253 tok/s on an H100, 2026-11-28):
//  - per_squared_token: its attention shape (32 query / 8 KV heads of 128) timed per layer by
//    bench/attention_backends.py on an H100, forward + backward + the recompute's forward, fitted
//    as a x tokens + b x sum of squared sample lengths to a packed 2,048-token row (6 samples,
//    0.40 ms) and a 32,768-token row (116.1 ms): b = 1.04e-10 s, x 36 layers / 97.5 us = 3.8e-5
//    (a = 1.5e-7 s a token and layer, 5% of a token's time, stays in per_token);
//  - per_micro_batch: the seed setting's micro-steps (batch 1, ~239 tokens) against the best
//    setting's rate on one H200 in one call (9,216 and 10,610 tok/s: 25.9 against 22.5 ms), 3.4 ms
//    = 36 tokens a micro-batch (bench/RESULTS.md, 2026-11-27, third session).
struct StepCostModel {
  double per_token = 1.0;
  double per_squared_token = 3.8e-5;
  double per_micro_batch = 36.0;
  double item_cost(const StepItem& item) const;
};

// rank -> micro-batches -> positions into the step's item list. Every rank has as many
// micro-batches; an empty one has zero weight.
using StepPlan = std::vector<std::vector<std::vector<int64_t>>>;

struct StepPlannerConfig {
  int world_size = 1;
  int64_t token_budget = 2048;  // most tokens in one micro-batch: per_device_train_batch_size x max_seq_length
  // Micro-batches are collated as padded rows (one item per row): a micro-batch's size is its row
  // count times its longest item, not the sum of its tokens.
  bool padded_rows = false;
  StepCostModel cost;
};

// Balanced plan (see above). Every rank gets at least one item when there are at least
// world_size of them. Throws when an item alone exceeds the token budget.
StepPlan plan_step_balanced(const std::vector<StepItem>& items, const StepPlannerConfig& config);

// Today's rule in the same shape: item i on rank i % world, micro-batches of batch_size items,
// ranks padded with empty micro-batches to the same count.
StepPlan plan_step_literal(const std::vector<StepItem>& items, int world_size, int64_t batch_size);

// A rank's cost: its items plus per_micro_batch for each non-empty micro-batch.
double rank_step_cost(const std::vector<std::vector<int64_t>>& micro_batches, const std::vector<StepItem>& items,
                      const StepCostModel& cost);
// Mean over ranks of rank_step_cost divided by its maximum (1 = perfectly balanced).
double step_plan_efficiency(const StepPlan& plan, const std::vector<StepItem>& items, const StepCostModel& cost);

}  // namespace finetune
