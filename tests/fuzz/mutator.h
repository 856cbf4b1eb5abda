// The fuzzer's input generator: stacked random mutations of corpus entries, chosen to reach the
// edge cases parsers get wrong — flipped bits, inserted and deleted bytes, splices of two inputs,
// truncation, runs of '[' / '{' around the nesting limit and far beyond it, number literals at the
// edges of int32/int64/uint64/double (1e400, -1, 2^63, ...), overwritten little-endian integers
// (lengths, varints, offsets) and the target's own dictionary of keys and values. Deterministic
// for a given seed.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace finetune::fuzz {

class Mutator {
 public:
  // `dictionary`: tokens worth inserting for this target (field names, type names, literals).
  Mutator(uint64_t seed, std::vector<std::string> dictionary, size_t max_size);

  // A new input: `base` with 1 to 8 mutations (mostly 1 or 2); `other` is a second corpus entry
  // for splices.
  std::string mutate(const std::string& base, const std::string& other);

  // A uniformly random index below `n` (n > 0).
  size_t below(size_t n);

 private:
  void mutate_once(std::string& data, const std::string& other);
  void flip_bit(std::string& data);
  void set_byte(std::string& data);
  void insert_random_bytes(std::string& data);
  void erase_range(std::string& data);
  void duplicate_range(std::string& data);
  void splice(std::string& data, const std::string& other);
  void truncate(std::string& data);
  void insert_nesting(std::string& data);
  void replace_number(std::string& data);
  void insert_token(std::string& data);
  void replace_string(std::string& data);
  void overwrite_integer(std::string& data);

  std::mt19937_64 rng_;
  std::vector<std::string> dictionary_;
  size_t max_size_;
};

}  // namespace finetune::fuzz
