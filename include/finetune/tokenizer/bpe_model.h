// The BPE model of tokenizer.json (tokenizers' models::bpe): a vocabulary, ranked merges, and the
// merge loop that turns one pre-token (already byte-level mapped) into ids. Results are cached per
// pre-token, in a bounded cache, since datasets repeat words constantly.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace finetune {

class BpeModel {
 public:
  // merges: pairs in rank order (rank = index). Throws finetune::Error when a merge names a token
  // missing from the vocabulary (naming the merge), like tokenizers does.
  BpeModel(std::unordered_map<std::string, int32_t> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
           bool ignore_merges);

  // Appends the ids of one pre-token to `out`.
  void encode_word(const std::string& word, std::vector<int32_t>& out) const;

  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }

 private:
  std::vector<int32_t> merge_word(const std::string& word) const;

  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };
  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;  // key: (left id << 32) | right id
  bool ignore_merges_;

  static constexpr size_t kCacheCapacity = 100000;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace finetune
