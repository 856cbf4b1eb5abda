#include "finetune/model/attention_mask.h"

#include "finetune/util/errors.h"

namespace finetune {

AttentionMask build_attention_mask(const std::vector<std::vector<int64_t>>& sample_lengths, int64_t seq_len,
                                   const at::Device& device) {
  bool one_full_sample_per_row = true;
  for (const auto& lengths : sample_lengths) {
    if (lengths.size() != 1 || lengths[0] != seq_len) one_full_sample_per_row = false;
  }
  if (one_full_sample_per_row) return {};

  // segment id per position: samples 1..k, padding -1; attend iff same segment and key <= query.
  const int64_t rows = static_cast<int64_t>(sample_lengths.size());
  auto segment = at::full({rows, seq_len}, -1, at::TensorOptions().dtype(at::kLong));
  auto accessor = segment.accessor<int64_t, 2>();
  for (int64_t row = 0; row < rows; ++row) {
    int64_t position = 0;
    int64_t id = 0;
    for (int64_t length : sample_lengths[row]) {
      if (position + length > seq_len) throw Error("batch row " + std::to_string(row) + " is longer than seq_len");
      for (int64_t t = 0; t < length; ++t) accessor[row][position + t] = id;
      position += length;
      ++id;
    }
  }
  segment = segment.to(device);
  auto same_segment = segment.unsqueeze(2).eq(segment.unsqueeze(1)) & segment.unsqueeze(1).ge(0);  // (B, T, T)
  auto causal = at::ones({seq_len, seq_len}, at::TensorOptions().dtype(at::kBool).device(device)).tril();
  auto mask = same_segment & causal;
  // A padding query attends to nothing; give it itself so softmax stays finite (output ignored).
  auto eye = at::eye(seq_len, at::TensorOptions().dtype(at::kBool).device(device));
  mask = mask | (segment.lt(0).unsqueeze(2) & eye);
  return {false, mask.unsqueeze(1)};
}

AttentionMask variable_length_mask(const std::vector<int64_t>& sample_lengths, const at::Device& device) {
  std::vector<int32_t> cumulative{0};
  AttentionMask out;
  out.is_causal_only = false;
  out.sample_lengths = sample_lengths;
  for (int64_t length : sample_lengths) {
    cumulative.push_back(cumulative.back() + static_cast<int32_t>(length));
    out.max_seqlen = std::max(out.max_seqlen, length);
  }
  out.cu_seqlens = at::tensor(cumulative, at::TensorOptions().dtype(at::kInt)).to(device);
  return out;
}

}  // namespace finetune
