#include "finetune/model/attention_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "finetune/util/errors.h"

namespace finetune {

AttentionSpec attention_spec(const ModelConfig& config, bool sliding) {
  AttentionSpec spec;
  // Python's `x**-0.5`, as the modeling files write it.
  spec.scale = std::pow(config.query_pre_attn_scalar ? *config.query_pre_attn_scalar
                                                     : static_cast<double>(config.head_dim),
                        -0.5);
  spec.softcap = config.attn_logit_softcapping;
  if (sliding) spec.window = config.sliding_window;
  return spec;
}

std::pair<std::optional<int64_t>, std::optional<int64_t>> flash_window(const AttentionSpec& spec) {
  if (!spec.window) return {std::nullopt, std::nullopt};
  return {*spec.window - 1, 0};
}

at::Tensor causal_keys(int64_t queries, int64_t past, const at::Device& device) {
  const auto options = at::TensorOptions().dtype(at::kLong).device(device);
  auto query_index = at::arange(past, past + queries, options).unsqueeze(1);  // (T, 1)
  auto key_index = at::arange(0, past + queries, options).unsqueeze(0);      // (1, past + T)
  return key_index.le(query_index).unsqueeze(0).unsqueeze(0);                 // (1, 1, T, past + T)
}

at::Tensor sliding_window_keys(const at::Tensor& mask, int64_t window, int64_t queries, int64_t past,
                               const at::Device& device) {
  const auto options = at::TensorOptions().dtype(at::kLong).device(device);
  auto query_index = at::arange(past, past + queries, options).unsqueeze(1);  // (T, 1)
  auto key_index = at::arange(0, past + queries, options).unsqueeze(0);      // (1, past + T)
  auto in_window = key_index.gt(query_index - window).unsqueeze(0).unsqueeze(0);  // (1, 1, T, past + T)
  const auto base = mask.defined() ? mask : causal_keys(queries, past, device);
  return base & in_window;  // the diagonal is in every window: a padding query keeps its own key
}

AttentionMask with_sliding_window(const AttentionMask& mask, int64_t window, int64_t seq_len,
                                  const at::Device& device) {
  if (mask.variable_length() || seq_len <= window) return mask;
  AttentionMask out = mask;
  out.is_causal_only = false;
  out.mask = sliding_window_keys(mask.is_causal_only ? at::Tensor() : mask.mask, window, seq_len, 0, device);
  return out;
}

at::Tensor eager_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& allowed,
                           const AttentionSpec& spec) {
  const int64_t groups = q.size(1) / k.size(1);
  // repeat_kv: (B, KV, S, D) -> (B, KV * groups, S, D), each kv head next to its query heads.
  auto repeat = [groups](const at::Tensor& t) {
    if (groups == 1) return t;
    return t.unsqueeze(2).expand({t.size(0), t.size(1), groups, t.size(2), t.size(3)})
        .reshape({t.size(0), t.size(1) * groups, t.size(2), t.size(3)});
  };
  auto scores = at::matmul(q, repeat(k).transpose(2, 3)) * spec.scale;  // (B, H, T, S)
  if (spec.softcap) scores = at::tanh(scores / *spec.softcap) * *spec.softcap;
  scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  auto weights = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
  return at::matmul(weights, repeat(v));  // (B, H, T, D)
}

std::vector<PackedSampleGroup> group_packed_samples(const std::vector<int64_t>& sample_lengths, int64_t heads,
                                                    const PackedAttentionLimits& limits) {
  std::vector<int64_t> order;
  for (size_t i = 0; i < sample_lengths.size(); ++i) {
    if (sample_lengths[i] < 0)
      throw Error("packed attention: sample " + std::to_string(i) + " has length " + std::to_string(sample_lengths[i]));
    if (sample_lengths[i] > 0) order.push_back(static_cast<int64_t>(i));
  }
  std::stable_sort(order.begin(), order.end(),
                   [&sample_lengths](int64_t a, int64_t b) { return sample_lengths[a] > sample_lengths[b]; });
  // Areas in double: exact for any length a row can hold, and no overflow in the products.
  std::vector<PackedSampleGroup> groups;
  double own_area = 0;  // the last group's sum of length^2
  for (int64_t sample : order) {
    const double length = static_cast<double>(sample_lengths[sample]);
    if (!groups.empty()) {
      PackedSampleGroup& group = groups.back();
      const double longest = static_cast<double>(group.longest);
      const double padded_area = static_cast<double>(group.samples.size() + 1) * longest * longest;
      const double score_bytes = padded_area * static_cast<double>(heads) * 4.0;
      if (padded_area <= limits.max_padded_area * (own_area + length * length) &&
          score_bytes <= static_cast<double>(limits.chunk_bytes)) {
        group.samples.push_back(sample);
        own_area += length * length;
        continue;
      }
    }
    groups.push_back(PackedSampleGroup{{sample}, sample_lengths[sample]});
    own_area = length * length;
  }
  return groups;
}

namespace {

// A chunk of samples starting at `starts` (S, 1) with `lengths` (S, 1) in the packed row, padded
// to `longest` slots (Note [Batched packed attention]).
PackedAttentionChunk packed_chunk(const at::Tensor& starts, const at::Tensor& lengths, int64_t longest,
                                  const std::optional<int64_t>& window) {
  const auto device = starts.device();
  const auto slot = at::arange(longest, starts.options()).unsqueeze(0);  // (1, Lmax)
  const auto real = slot.lt(lengths);                                     // (S, Lmax)
  PackedAttentionChunk chunk;
  chunk.samples = starts.size(0);
  chunk.longest = longest;
  chunk.gather = (starts + slot * real).reshape({-1});  // (S * Lmax): a padding slot reads its sample's first token
  // A chunk no longer than the window attends as full causal attention (Note [Sliding window]).
  const auto square = window && longest > *window ? sliding_window_keys(at::Tensor(), *window, longest, 0, device)
                                                  : causal_keys(longest, 0, device);  // (1, 1, Lmax, Lmax)
  const auto own_slot = at::eye(longest, at::TensorOptions().dtype(at::kBool).device(device)).unsqueeze(0);
  const auto keys = real.unsqueeze(1) | own_slot;  // (S, Lmax, Lmax): real keys, and a padding query's own slot
  chunk.allowed = square & keys.unsqueeze(1);     // (S, 1, Lmax, Lmax)
  return chunk;
}

}  // namespace

PackedAttentionPlan plan_packed_attention(const std::vector<int64_t>& sample_lengths, int64_t heads,
                                          const AttentionSpec& spec, const at::Device& device,
                                          const PackedAttentionLimits& limits) {
  const auto groups = group_packed_samples(sample_lengths, heads, limits);
  std::vector<int64_t> starts(sample_lengths.size());
  int64_t tokens = 0;
  for (size_t i = 0; i < sample_lengths.size(); ++i) {
    starts[i] = tokens;
    tokens += sample_lengths[i];
  }
  // One host buffer, one copy: the output rows (N), then each group's sample starts and lengths.
  std::vector<int64_t> host(static_cast<size_t>(tokens));
  int64_t chunk_row = 0;  // the group's first row among the concatenated chunks' slots
  for (const auto& group : groups) {
    for (size_t slot = 0; slot < group.samples.size(); ++slot) {
      const int64_t sample = group.samples[slot];
      const int64_t slot_row = chunk_row + static_cast<int64_t>(slot) * group.longest;
      for (int64_t t = 0; t < sample_lengths[sample]; ++t) host[starts[sample] + t] = slot_row + t;
    }
    chunk_row += static_cast<int64_t>(group.samples.size()) * group.longest;
  }
  for (const auto& group : groups) {
    for (int64_t sample : group.samples) host.push_back(starts[sample]);
    for (int64_t sample : group.samples) host.push_back(sample_lengths[sample]);
  }
  const auto on_device = at::tensor(host, at::kLong).to(device);
  PackedAttentionPlan plan;
  plan.tokens = tokens;
  plan.output_rows = on_device.narrow(0, 0, tokens);
  int64_t offset = tokens;
  for (const auto& group : groups) {
    const auto count = static_cast<int64_t>(group.samples.size());
    plan.chunks.push_back(packed_chunk(on_device.narrow(0, offset, count).unsqueeze(1),
                                       on_device.narrow(0, offset + count, count).unsqueeze(1), group.longest,
                                       spec.window));
    offset += 2 * count;
  }
  return plan;
}

at::Tensor packed_eager_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const PackedAttentionPlan& plan, const AttentionSpec& spec) {
  if (q.size(0) != plan.tokens || k.size(0) != plan.tokens || v.size(0) != plan.tokens)
    throw Error("packed attention: samples of " + std::to_string(plan.tokens) + " tokens in a row of " +
                std::to_string(q.size(0)));
  if (plan.chunks.empty()) return q.clone();  // no tokens
  std::vector<at::Tensor> outputs;
  for (const auto& chunk : plan.chunks) {
    const int64_t samples = chunk.samples;
    const int64_t longest = chunk.longest;
    auto gather = [&chunk, samples, longest](const at::Tensor& t) {
      return t.index_select(0, chunk.gather).view({samples, longest, t.size(1), t.size(2)}).transpose(1, 2);
    };  // (S, heads, Lmax, D)
    const auto out = eager_attention(gather(q), gather(k), gather(v), chunk.allowed, spec);  // (S, H, Lmax, D)
    outputs.push_back(out.transpose(1, 2).reshape({samples * longest, out.size(1), out.size(3)}));
  }
  const auto slots = outputs.size() == 1 ? outputs.front() : at::cat(outputs, 0);  // (slots, H, D)
  return slots.index_select(0, plan.output_rows);                                   // (N, H, D)
}

}  // namespace finetune
