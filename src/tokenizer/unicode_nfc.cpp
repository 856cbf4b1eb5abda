#include "finetune/tokenizer/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <vector>

#include "finetune/util/utf8.h"

namespace finetune {
namespace {

#include "unicode_nfc_tables.inc"

constexpr char32_t kHangulSBase = 0xAC00, kHangulLBase = 0x1100, kHangulVBase = 0x1161,
                   kHangulTBase = 0x11A7;
constexpr char32_t kHangulLCount = 19, kHangulVCount = 21, kHangulTCount = 28;
constexpr char32_t kHangulNCount = kHangulVCount * kHangulTCount;
constexpr char32_t kHangulSCount = kHangulLCount * kHangulNCount;

int combining_class(char32_t c) {
  if (c < 0x300) return 0;
  const auto* end = std::end(kCombiningClassRanges);
  const auto* it = std::upper_bound(std::begin(kCombiningClassRanges), end, c,
                                    [](char32_t v, const uint32_t(&r)[3]) { return v < r[0]; });
  if (it == std::begin(kCombiningClassRanges)) return 0;
  --it;
  return c <= (*it)[1] ? static_cast<int>((*it)[2]) : 0;
}

void decompose_into(char32_t c, std::vector<char32_t>& out) {
  if (c >= kHangulSBase && c < kHangulSBase + kHangulSCount) {
    const char32_t s = c - kHangulSBase;
    out.push_back(kHangulLBase + s / kHangulNCount);
    out.push_back(kHangulVBase + (s % kHangulNCount) / kHangulTCount);
    if (s % kHangulTCount != 0) out.push_back(kHangulTBase + s % kHangulTCount);
    return;
  }
  if (c < 0xC0) {
    out.push_back(c);
    return;
  }
  const auto* end = std::end(kCanonicalDecompositions);
  const auto* it = std::lower_bound(std::begin(kCanonicalDecompositions), end, c,
                                    [](const uint32_t(&r)[3], char32_t v) { return r[0] < v; });
  if (it == end || (*it)[0] != c) {
    out.push_back(c);
    return;
  }
  decompose_into((*it)[1], out);
  if ((*it)[2] != 0) decompose_into((*it)[2], out);
}

// Returns 0 when the pair has no primary composite.
char32_t compose_pair(char32_t first, char32_t second) {
  if (first >= kHangulLBase && first < kHangulLBase + kHangulLCount && second >= kHangulVBase &&
      second < kHangulVBase + kHangulVCount) {
    return kHangulSBase + ((first - kHangulLBase) * kHangulVCount + (second - kHangulVBase)) * kHangulTCount;
  }
  if (first >= kHangulSBase && first < kHangulSBase + kHangulSCount && (first - kHangulSBase) % kHangulTCount == 0 &&
      second > kHangulTBase && second < kHangulTBase + kHangulTCount) {
    return first + (second - kHangulTBase);
  }
  const auto* end = std::end(kCanonicalCompositions);
  const auto* it = std::lower_bound(std::begin(kCanonicalCompositions), end, std::make_pair(first, second),
                                    [](const uint32_t(&r)[3], const std::pair<char32_t, char32_t>& v) {
                                      return r[0] < v.first || (r[0] == v.first && r[1] < v.second);
                                    });
  if (it == end || (*it)[0] != first || (*it)[1] != second) return 0;
  return (*it)[2];
}

}  // namespace

std::string nfc_normalize(const std::string& utf8_text) {
  // Below U+0300 nothing decomposes or combines except Latin-1 letters, which are already composed.
  if (std::all_of(utf8_text.begin(), utf8_text.end(), [](char ch) { return static_cast<unsigned char>(ch) < 0xCC; })) {
    return utf8_text;
  }
  std::vector<char32_t> chars;
  for (char32_t c : utf8_decode(utf8_text)) decompose_into(c, chars);

  // Canonical ordering: stable sort each run of non-starters by combining class.
  for (size_t i = 0; i < chars.size();) {
    if (combining_class(chars[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < chars.size() && combining_class(chars[j]) != 0) ++j;
    std::stable_sort(chars.begin() + i, chars.begin() + j,
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }

  // Canonical composition.
  std::vector<char32_t> out;
  out.reserve(chars.size());
  size_t starter = 0;
  bool have_starter = false;
  int last_class = -1;
  for (char32_t c : chars) {
    const int cls = combining_class(c);
    if (have_starter) {
      // Blocked when a character in between has class 0 or a class >= this one.
      const bool blocked = last_class != -1 && (last_class == 0 || last_class >= cls);
      if (!blocked) {
        if (char32_t composite = compose_pair(out[starter], c)) {
          out[starter] = composite;
          continue;
        }
      }
    }
    if (cls == 0) {
      starter = out.size();
      have_starter = true;
      last_class = -1;
    } else {
      last_class = cls;
    }
    out.push_back(c);
  }
  return utf8_encode(out);
}

}  // namespace finetune
