// The step planner (see step_planner.h).
#include "finetune/data/step_planner.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "finetune/data/rank_assignment.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

using Positions = std::vector<int64_t>;

// What a micro-batch holds so far: its items' tokens, rows and longest row.
struct MicroBatchFill {
  int64_t tokens = 0;
  int64_t rows = 0;
  int64_t longest_row = 0;
};

// Whether `item` fits a micro-batch that holds `fill`.
bool fits(const StepPlannerConfig& config, const MicroBatchFill& fill, const StepItem& item) {
  if (config.padded_rows) return (fill.rows + item.rows) * std::max(fill.longest_row, item.longest_row) <= config.token_budget;
  return fill.tokens + item.tokens <= config.token_budget;
}

// First-fit decreasing by tokens (ties: the earlier item) into micro-batches within the budget;
// `positions` is ascending.
std::vector<Positions> form_micro_batches(Positions positions, const std::vector<StepItem>& items,
                                          const StepPlannerConfig& config) {
  std::stable_sort(positions.begin(), positions.end(), [&](int64_t a, int64_t b) {
    return items[static_cast<size_t>(a)].tokens > items[static_cast<size_t>(b)].tokens;
  });
  std::vector<Positions> batches;
  std::vector<MicroBatchFill> fills;
  for (int64_t position : positions) {
    const StepItem& item = items[static_cast<size_t>(position)];
    size_t b = 0;
    while (b < batches.size() && !fits(config, fills[b], item)) ++b;
    if (b == batches.size()) {
      batches.emplace_back();
      fills.emplace_back();
    }
    batches[b].push_back(position);
    fills[b].tokens += item.tokens;
    fills[b].rows += item.rows;
    fills[b].longest_row = std::max(fills[b].longest_row, item.longest_row);
  }
  return batches;
}

double share_cost(const Positions& share, const std::vector<StepItem>& items, const StepPlannerConfig& config) {
  double cost = 0;
  for (int64_t position : share) cost += config.cost.item_cost(items[static_cast<size_t>(position)]);
  return cost + config.cost.per_micro_batch * static_cast<double>(form_micro_batches(share, items, config).size());
}

// Longest processing time first: the costliest item to the least loaded rank (ties: lower rank).
std::vector<Positions> assign_longest_first(const std::vector<StepItem>& items, const StepPlannerConfig& config) {
  Positions order(items.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return config.cost.item_cost(items[static_cast<size_t>(a)]) > config.cost.item_cost(items[static_cast<size_t>(b)]);
  });
  std::vector<Positions> shares(static_cast<size_t>(config.world_size));
  std::vector<double> load(shares.size(), 0.0);
  for (int64_t position : order) {
    const size_t rank = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    shares[rank].push_back(position);
    load[rank] += config.cost.item_cost(items[static_cast<size_t>(position)]);
  }
  for (auto& share : shares) std::sort(share.begin(), share.end());
  return shares;
}

Positions without(const Positions& share, int64_t position) {
  Positions rest;
  for (int64_t p : share) {
    if (p != position) rest.push_back(p);
  }
  return rest;
}

Positions with(Positions share, int64_t position) {
  share.insert(std::upper_bound(share.begin(), share.end(), position), position);
  return share;
}

// One move or swap of single items between the costliest and the cheapest rank, the one that
// lowers their larger cost most; false when none lowers it.
bool improve_once(std::vector<Positions>& shares, std::vector<double>& costs, const std::vector<StepItem>& items,
                  const StepPlannerConfig& config) {
  const size_t high = static_cast<size_t>(std::max_element(costs.begin(), costs.end()) - costs.begin());
  const size_t low = static_cast<size_t>(std::min_element(costs.begin(), costs.end()) - costs.begin());
  if (high == low) return false;
  double best = costs[high] * (1.0 - 1e-12);
  bool found = false;
  Positions best_high, best_low;
  double best_high_cost = 0, best_low_cost = 0;
  const auto consider = [&](Positions high_share, Positions low_share) {
    const double high_cost = share_cost(high_share, items, config);
    const double low_cost = share_cost(low_share, items, config);
    if (std::max(high_cost, low_cost) < best) {
      best = std::max(high_cost, low_cost);
      found = true;
      best_high = std::move(high_share), best_low = std::move(low_share);
      best_high_cost = high_cost, best_low_cost = low_cost;
    }
  };
  for (int64_t moved : shares[high]) {
    consider(without(shares[high], moved), with(shares[low], moved));
    for (int64_t back : shares[low]) {
      consider(with(without(shares[high], moved), back), with(without(shares[low], back), moved));
    }
  }
  if (!found) return false;
  shares[high] = std::move(best_high), shares[low] = std::move(best_low);
  costs[high] = best_high_cost, costs[low] = best_low_cost;
  return true;
}

void check_config(const std::vector<StepItem>& items, const StepPlannerConfig& config) {
  if (config.world_size < 1) throw Error("step planner: world_size must be >= 1, got " + std::to_string(config.world_size));
  if (config.token_budget < 1) throw Error("step planner: token budget must be >= 1, got " + std::to_string(config.token_budget));
  for (size_t i = 0; i < items.size(); ++i) {
    const int64_t size = config.padded_rows ? items[i].padded_size(items[i].longest_row) : items[i].tokens;
    if (items[i].tokens < 0 || size > config.token_budget) {
      throw Error("step planner: item " + std::to_string(i) + " has " + std::to_string(items[i].tokens) +
                  " tokens, outside [0, token budget " + std::to_string(config.token_budget) + "]");
    }
  }
}

void pad_to_equal_counts(StepPlan& plan) {
  size_t most = 0;
  for (const auto& batches : plan) most = std::max(most, batches.size());
  for (auto& batches : plan) batches.resize(most);
}

}  // namespace

const std::vector<std::string>& step_planning_names() {
  static const std::vector<std::string> names = {"balanced", "literal"};
  return names;
}

StepPlanning step_planning_from_name(const std::string& name) {
  const auto& names = step_planning_names();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<StepPlanning>(i);
  }
  throw Error("step planning: unknown planning \"" + name + "\" (balanced or literal)");
}

const std::string& step_planning_name(StepPlanning planning) {
  return step_planning_names().at(static_cast<size_t>(planning));
}

StepItem sample_step_item(int64_t length) { return {length, length * length, 1, length}; }

StepItem packed_row_step_item(const std::vector<int64_t>& sample_lengths) {
  StepItem item;
  for (int64_t length : sample_lengths) {
    item.tokens += length;
    item.squared_tokens += length * length;
  }
  item.longest_row = item.tokens;  // one row
  return item;
}

StepItem grouped_rows_step_item(const std::vector<int64_t>& row_lengths) {
  StepItem item;
  item.rows = static_cast<int64_t>(row_lengths.size());
  for (int64_t length : row_lengths) {
    item.tokens += length;
    item.squared_tokens += length * length;
    item.longest_row = std::max(item.longest_row, length);
  }
  return item;
}

double StepCostModel::item_cost(const StepItem& item) const {
  return per_token * static_cast<double>(item.tokens) + per_squared_token * static_cast<double>(item.squared_tokens);
}

StepPlan plan_step_balanced(const std::vector<StepItem>& items, const StepPlannerConfig& config) {
  check_config(items, config);
  std::vector<Positions> shares = assign_longest_first(items, config);
  std::vector<double> costs;
  for (const auto& share : shares) costs.push_back(share_cost(share, items, config));
  const size_t max_rounds = 4 * items.size() + 4;
  for (size_t round = 0; round < max_rounds && improve_once(shares, costs, items, config); ++round) {
  }
  StepPlan plan;
  for (const auto& share : shares) plan.push_back(form_micro_batches(share, items, config));
  pad_to_equal_counts(plan);
  return plan;
}

StepPlan plan_step_literal(const std::vector<StepItem>& items, int world_size, int64_t batch_size) {
  Positions positions(items.size());
  std::iota(positions.begin(), positions.end(), int64_t{0});
  StepPlan plan = literal_step_assignment(positions, world_size, batch_size);
  pad_to_equal_counts(plan);
  return plan;
}

double rank_step_cost(const std::vector<std::vector<int64_t>>& micro_batches, const std::vector<StepItem>& items,
                      const StepCostModel& cost) {
  double total = 0;
  for (const auto& batch : micro_batches) {
    if (!batch.empty()) total += cost.per_micro_batch;
    for (int64_t position : batch) total += cost.item_cost(items.at(static_cast<size_t>(position)));
  }
  return total;
}

double step_plan_efficiency(const StepPlan& plan, const std::vector<StepItem>& items, const StepCostModel& cost) {
  if (plan.empty()) return 1.0;
  double sum = 0, most = 0;
  for (const auto& batches : plan) {
    const double rank_cost = rank_step_cost(batches, items, cost);
    sum += rank_cost;
    most = std::max(most, rank_cost);
  }
  return most > 0 ? sum / static_cast<double>(plan.size()) / most : 1.0;
}

}  // namespace finetune
