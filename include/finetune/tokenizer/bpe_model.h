// The BPE model of tokenizer.json (tokenizers' models::bpe): a vocabulary, ranked merges, and the
// merge loop that turns one pre-token (byte-level mapped, or Metaspace'd) into ids. A character
// missing from the vocabulary becomes its <0xNN> byte tokens (byte_fallback), else unk_token (runs
// fused into one with fuse_unk), else is dropped. Results are cached per pre-token, in a bounded
// cache, since datasets repeat words constantly.
#pragma once

#include <cstdint>
#include <array>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace finetune {

// The model's flags, as tokenizer.json's "model" object names them.
struct BpeOptions {
  bool ignore_merges = false;
  bool byte_fallback = false;
  bool fuse_unk = false;
  std::optional<std::string> unk_token;
};

class BpeModel {
 public:
  // merges: pairs in rank order (rank = index). Throws finetune::Error when a merge names a token
  // missing from the vocabulary (naming the merge), or unk_token is not in it, like tokenizers does.
  BpeModel(std::unordered_map<std::string, int32_t> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
           const BpeOptions& options);

  // Appends the ids of one pre-token to `out`.
  void encode_word(const std::string& word, std::vector<int32_t>& out) const;

  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }

 private:
  std::vector<int32_t> merge_word(const std::string& word) const;
  std::vector<int32_t> initial_symbols(const std::string& word) const;

  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;  // key: (left id << 32) | right id
  BpeOptions options_;
  int32_t unk_id_ = -1;
  std::array<int32_t, 256> byte_ids_{};  // <0xNN> token ids, -1 where missing (byte_fallback only)

  static constexpr size_t kCacheCapacity = 100000;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace finetune
