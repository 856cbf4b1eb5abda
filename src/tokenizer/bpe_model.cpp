#include "finetune/tokenizer/bpe_model.h"

#include <functional>
#include <queue>

#include "finetune/util/utf8.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

BpeModel::BpeModel(std::unordered_map<std::string, int32_t> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, const BpeOptions& options)
    : vocab_(std::move(vocab)), options_(options) {
  if (options_.unk_token) {
    const auto it = vocab_.find(*options_.unk_token);
    if (it == vocab_.end()) throw Error("model.unk_token '" + *options_.unk_token + "' is not in model.vocab");
    unk_id_ = it->second;
  }
  static const char* kHex = "0123456789ABCDEF";
  for (int byte = 0; byte < 256; ++byte) {
    const std::string token = std::string("<0x") + kHex[byte >> 4] + kHex[byte & 15] + ">";
    const auto it = vocab_.find(token);
    byte_ids_[byte] = it == vocab_.end() ? -1 : it->second;
  }
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const auto l = vocab_.find(left), r = vocab_.find(right), m = vocab_.find(left + right);
    if (l == vocab_.end() || r == vocab_.end() || m == vocab_.end()) {
      throw Error("model.merges[" + std::to_string(rank) + "] ('" + left + "', '" + right +
                  "') uses a token missing from model.vocab");
    }
    // The first (lowest-rank) occurrence of a pair wins, as in tokenizers.
    merges_.emplace(pair_key(l->second, r->second), Merge{static_cast<int32_t>(rank), m->second});
  }
}

void BpeModel::encode_word(const std::string& word, std::vector<int32_t>& out) const {
  if (options_.ignore_merges) {
    auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids = merge_word(word);
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() < kCacheCapacity) cache_.emplace(word, std::move(ids));
}

std::vector<int32_t> BpeModel::initial_symbols(const std::string& word) const {
  // One symbol per character, as tokenizers' BPE::merge_word: a pending unk is written when the next
  // known character comes (not before byte-fallback tokens) or at the end.
  std::vector<int32_t> symbols;
  bool unk_pending = false;
  for (size_t i = 0; i < word.size();) {
    size_t len = utf8_sequence_length(static_cast<unsigned char>(word[i]));
    if (i + len > word.size()) len = word.size() - i;
    const std::string character = word.substr(i, len);
    i += len;
    if (auto it = vocab_.find(character); it != vocab_.end()) {
      if (unk_pending) symbols.push_back(unk_id_);
      unk_pending = false;
      symbols.push_back(it->second);
      continue;
    }
    if (options_.byte_fallback) {
      bool all_bytes = true;
      for (unsigned char byte : character) all_bytes = all_bytes && byte_ids_[byte] >= 0;
      if (all_bytes) {
        for (unsigned char byte : character) symbols.push_back(byte_ids_[byte]);
        continue;
      }
    }
    if (unk_id_ < 0) continue;  // no unk token: the character is dropped
    if (unk_pending && !options_.fuse_unk) symbols.push_back(unk_id_);
    unk_pending = true;
  }
  if (unk_pending) symbols.push_back(unk_id_);
  return symbols;
}

std::vector<int32_t> BpeModel::merge_word(const std::string& word) const {
  std::vector<int32_t> symbols = initial_symbols(word);
  // Apply merges lowest rank first, leftmost first on ties, as tokenizers' Word::merge_all does:
  // a min-heap of candidate pairs over a linked list of symbols; stale entries are skipped.
  const int n = static_cast<int>(symbols.size());
  std::vector<int> next(n), prev(n);
  std::vector<bool> alive(n, true);
  for (int i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  struct Candidate {
    int32_t rank;
    int pos;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto push_pair = [&](int left) {
    if (left < 0 || next[left] < 0) return;
    auto it = merges_.find(pair_key(symbols[left], symbols[next[left]]));
    if (it != merges_.end()) queue.push({it->second.rank, left});
  };
  for (int i = 0; i + 1 < n; ++i) push_pair(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    const int left = top.pos;
    if (!alive[left] || next[left] < 0) continue;
    const int right = next[left];
    auto it = merges_.find(pair_key(symbols[left], symbols[right]));
    if (it == merges_.end() || it->second.rank != top.rank) continue;  // the pair changed since
    symbols[left] = it->second.merged_id;
    alive[right] = false;
    next[left] = next[right];
    if (next[right] >= 0) prev[next[right]] = left;
    push_pair(prev[left]);
    push_pair(left);
  }
  std::vector<int32_t> merged;
  for (int i = 0; i >= 0 && i < n; i = next[i]) merged.push_back(symbols[i]);
  return merged;
}

}  // namespace finetune
