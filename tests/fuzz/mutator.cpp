#include "mutator.h"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace finetune::fuzz {
namespace {

// Number literals at the edges of what parsers convert to: int32, uint32, int64, uint64, double.
const char* const kEdgeNumbers[] = {
    "0", "-0", "-1", "1", "-100", "0.5", "1.5", "-1.5", "1e400", "-1e400", "1e-400", "1e308", "4.9e-324",
    "2147483647", "2147483648", "-2147483648", "-2147483649", "4294967295", "4294967296",
    "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
    "18446744073709551615", "18446744073709551616", "99999999999999999999999999999", "1e19", "-1e19",
    "9.3e18", "65536", "1073741824", "268435456", "0.0", "1E2", "-0.0e0",
};

// JSON fragments every JSON target may meet.
const char* const kJsonTokens[] = {
    "{", "}", "[", "]", ",", ":", "\"", "\\", "null", "true", "false", "{}", "[]", "\"\"", "\"\\u0000\"",
    "\"\\ud800\"", "\"\\udc00\\ud800\"", "\"\xC3\xA9\"", "\"\xF0\x9F\x98\x80\"", "\"\xFF\"", "\"\xC3\"", " ", "\n",
    "\"a\":", "[[[[", "]]]]", "{\"a\":{\"a\":", "\"\\n\"", "\"\\\"\"", "1e400", "-1",
};

// Integers worth writing over binary fields (lengths, offsets, varints), little-endian.
const uint64_t kEdgeIntegers[] = {0,          1,          0x7F,       0x80,       0xFF,       0xFFFF,
                                  0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1ULL << 32, 1ULL << 40, 1ULL << 62,
                                  1ULL << 63, ~0ULL,      ~0ULL - 7,  ~0ULL >> 1};

bool is_number_char(char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'; }

}  // namespace

Mutator::Mutator(uint64_t seed, std::vector<std::string> dictionary, size_t max_size)
    : rng_(seed), dictionary_(std::move(dictionary)), max_size_(max_size) {}

size_t Mutator::below(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }

std::string Mutator::mutate(const std::string& base, const std::string& other) {
  std::string data = base;
  size_t count = 1;  // 1 to 8 mutations, each further one half as likely: most inputs stay near-valid
  while (count < 8 && below(2) == 0) ++count;
  for (size_t i = 0; i < count; ++i) mutate_once(data, other);
  if (data.size() > max_size_) data.resize(max_size_);
  return data;
}

void Mutator::mutate_once(std::string& data, const std::string& other) {
  switch (below(13)) {
    case 0: flip_bit(data); break;
    case 1: set_byte(data); break;
    case 2: insert_random_bytes(data); break;
    case 3: erase_range(data); break;
    case 4: duplicate_range(data); break;
    case 5: splice(data, other); break;
    case 6: if (below(4) == 0) truncate(data); break;  // rarer: most inputs should stay whole
    case 7: if (below(3) == 0) insert_nesting(data); break;
    case 8: case 9: replace_number(data); break;
    case 10: insert_token(data); break;
    case 11: replace_string(data); break;
    default: overwrite_integer(data); break;
  }
}

void Mutator::flip_bit(std::string& data) {
  if (data.empty()) return;
  data[below(data.size())] ^= static_cast<char>(1u << below(8));
}

void Mutator::set_byte(std::string& data) {
  if (data.empty()) return;
  static const char kBytes[] = {'\0', '\x7F', '\x80', '\xBF', '\xC0', '\xFF', '"', '\\', '[', ']', '{', '}', ',', ':', '\n', ' ', '-', '0', '9'};
  data[below(data.size())] = below(2) == 0 ? kBytes[below(sizeof(kBytes))] : static_cast<char>(below(256));
}

void Mutator::insert_random_bytes(std::string& data) {
  std::string bytes(1 + below(8), '\0');
  for (char& c : bytes) c = static_cast<char>(below(256));
  data.insert(below(data.size() + 1), bytes);
}

void Mutator::erase_range(std::string& data) {
  if (data.empty()) return;
  const size_t begin = below(data.size());
  data.erase(begin, 1 + below(std::min<size_t>(64, data.size() - begin)));
}

void Mutator::duplicate_range(std::string& data) {
  if (data.empty()) return;
  const size_t begin = below(data.size());
  const std::string piece = data.substr(begin, 1 + below(std::min<size_t>(256, data.size() - begin)));
  const size_t copies = below(8) == 0 ? 1 + below(64) : 1;
  std::string repeated;
  for (size_t i = 0; i < copies; ++i) repeated += piece;
  data.insert(below(data.size() + 1), repeated);
}

void Mutator::splice(std::string& data, const std::string& other) {
  const size_t cut = below(data.size() + 1);
  const size_t from = below(other.size() + 1);
  data = data.substr(0, cut) + other.substr(from);
}

void Mutator::truncate(std::string& data) { data.resize(below(data.size() + 1)); }

// Nesting just under, at and over the 128-level limit, or ~120 KB of it; closed or not.
void Mutator::insert_nesting(std::string& data) {
  static const size_t kLevels[] = {126, 127, 128, 129, 130, 1000, 20000, 60000};
  const size_t levels = kLevels[below(sizeof(kLevels) / sizeof(kLevels[0]))];
  const bool objects = below(2) == 0;
  const std::string open = objects ? "{\"a\":" : "[";
  const std::string close = objects ? "}" : "]";
  std::string nest;
  nest.reserve(levels * (open.size() + close.size()) + 1);
  for (size_t i = 0; i < levels; ++i) nest += open;
  if (below(2) == 0) {
    nest += objects ? "0" : "";
    for (size_t i = 0; i < levels; ++i) nest += close;
  }
  data.insert(below(data.size() + 1), nest);
}

// Replaces a number literal (or, when there is none, a random position) with an edge case.
void Mutator::replace_number(std::string& data) {
  const char* replacement = kEdgeNumbers[below(sizeof(kEdgeNumbers) / sizeof(kEdgeNumbers[0]))];
  if (data.empty()) {
    data = replacement;
    return;
  }
  const size_t start = below(data.size());
  size_t begin = data.size();
  for (size_t i = 0; i < data.size(); ++i) {
    const size_t at = (start + i) % data.size();
    if (std::isdigit(static_cast<unsigned char>(data[at]))) {
      begin = at;
      break;
    }
  }
  if (begin == data.size()) {
    data.insert(start, replacement);
    return;
  }
  while (begin > 0 && is_number_char(data[begin - 1])) --begin;
  size_t end = begin;
  while (end < data.size() && is_number_char(data[end])) ++end;
  data.replace(begin, end - begin, replacement);
}

void Mutator::insert_token(std::string& data) {
  const size_t generic = sizeof(kJsonTokens) / sizeof(kJsonTokens[0]);
  const size_t pick = below(generic + dictionary_.size());
  const std::string token = pick < generic ? std::string(kJsonTokens[pick]) : dictionary_[pick - generic];
  data.insert(below(data.size() + 1), token);
}

// Replaces the contents of a "..." string with a dictionary token, nothing, or a long run.
void Mutator::replace_string(std::string& data) {
  if (data.empty()) return;
  const size_t open = data.find('"', below(data.size()));
  if (open == std::string::npos) return;
  const size_t close = data.find('"', open + 1);
  if (close == std::string::npos) return;
  std::string value;
  switch (below(4)) {
    case 0: break;
    case 1: value = std::string(1 + below(100000), static_cast<char>('a' + below(26))); break;
    default:
      if (!dictionary_.empty()) value = dictionary_[below(dictionary_.size())];
      value.erase(std::remove(value.begin(), value.end(), '"'), value.end());
  }
  data.replace(open + 1, close - open - 1, value);
}

// Writes an edge integer (1 to 8 bytes of it, little-endian) over the bytes at a random position:
// reaches length prefixes, offsets and protobuf varints that textual mutations rarely hit.
void Mutator::overwrite_integer(std::string& data) {
  if (data.empty()) return;
  uint64_t value = kEdgeIntegers[below(sizeof(kEdgeIntegers) / sizeof(kEdgeIntegers[0]))];
  if (below(4) == 0) value = static_cast<uint64_t>(data.size()) + below(16) - 8;
  const size_t width = std::min<size_t>(1 + below(8), data.size());
  const size_t at = below(data.size() - width + 1);
  for (size_t i = 0; i < width; ++i) data[at + i] = static_cast<char>(value >> (8 * i));
}

}  // namespace finetune::fuzz
