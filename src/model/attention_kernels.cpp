#include "finetune/model/attention_kernels.h"

#include <cmath>
#include <limits>

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

at::Tensor packed_eager_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const std::vector<int64_t>& sample_lengths, const AttentionSpec& spec) {
  std::vector<at::Tensor> outputs;
  int64_t start = 0;
  for (int64_t length : sample_lengths) {
    if (start + length > q.size(0)) throw Error("packed attention: sample lengths exceed the row's " +
                                                std::to_string(q.size(0)) + " tokens");
    auto sample = [start, length](const at::Tensor& t) { return t.narrow(0, start, length).transpose(0, 1).unsqueeze(0); };
    auto allowed = spec.window && length > *spec.window
                       ? sliding_window_keys(at::Tensor(), *spec.window, length, 0, q.device())
                       : causal_keys(length, 0, q.device());
    auto out = eager_attention(sample(q), sample(k), sample(v), allowed, spec);  // (1, H, len, D)
    outputs.push_back(out.squeeze(0).transpose(0, 1));                        // (len, H, D)
    start += length;
  }
  if (start != q.size(0))
    throw Error("packed attention: samples of " + std::to_string(start) + " tokens in a row of " + std::to_string(q.size(0)));
  return at::cat(outputs, 0);  // (N, H, D)
}

}  // namespace finetune
