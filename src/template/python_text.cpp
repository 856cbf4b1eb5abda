#include "python_text.h"

#include <algorithm>
#include <iterator>

#include "finetune/util/utf8.h"

namespace finetune::jinja {
namespace {

struct CodePointRange {
  char32_t first;
  char32_t last;
};

#include "unicode_tables.inc"

constexpr uint32_t kMultiple = 0x80000000u;
constexpr char32_t kCapitalSigma = 0x3A3;

template <size_t N>
bool in_ranges(const CodePointRange (&ranges)[N], char32_t c) {
  const auto* end = ranges + N;
  const auto* it = std::upper_bound(ranges, end, c, [](char32_t v, const CodePointRange& r) { return v < r.first; });
  return it != ranges && c <= std::prev(it)->last;
}

enum Mapping { kLower = 1, kUpper = 2, kTitle = 3 };

void append_mapping(std::vector<char32_t>& out, char32_t c, Mapping which) {
  const auto* end = std::end(kCaseMappings);
  const auto* it = std::lower_bound(std::begin(kCaseMappings), end, c,
                                    [](const uint32_t (&row)[4], char32_t v) { return row[0] < v; });
  if (it == end || (*it)[0] != c) {
    out.push_back(c);
    return;
  }
  const uint32_t mapped = (*it)[which];
  if ((mapped & kMultiple) == 0) {
    out.push_back(mapped);
    return;
  }
  for (const uint32_t part : kMultipleMappings[mapped & ~kMultiple]) {
    if (part != 0) out.push_back(part);
  }
}

bool is_cased(char32_t c) { return in_ranges(kCased, c); }
bool is_case_ignorable(char32_t c) { return in_ranges(kCaseIgnorable, c); }
bool is_lower(char32_t c) { return in_ranges(kLowercase, c); }
bool is_upper(char32_t c) { return in_ranges(kUppercase, c); }
bool is_titlecase(char32_t c) { return in_ranges(kTitlecase, c); }

// Capital sigma lowercases to final sigma after a cased letter (skipping case-ignorable ones) when
// no cased letter follows (again skipping case-ignorable ones).
char32_t lower_sigma(const std::vector<char32_t>& text, size_t i) {
  size_t j = i;
  while (j > 0 && is_case_ignorable(text[j - 1])) --j;
  bool final_sigma = j > 0 && is_cased(text[j - 1]);
  if (final_sigma) {
    size_t k = i + 1;
    while (k < text.size() && is_case_ignorable(text[k])) ++k;
    final_sigma = k == text.size() || !is_cased(text[k]);
  }
  return final_sigma ? 0x3C2 : 0x3C3;
}

void append_lower(std::vector<char32_t>& out, const std::vector<char32_t>& text, size_t i) {
  if (text[i] == kCapitalSigma) {
    out.push_back(lower_sigma(text, i));
  } else {
    append_mapping(out, text[i], kLower);
  }
}

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

// Python's slice index adjustment for find/count: negative counts from the end, clamped to [0, len].
size_t adjust_index(std::optional<int64_t> index, size_t length, size_t fallback) {
  if (!index) return fallback;
  int64_t value = *index;
  if (value < 0) value += static_cast<int64_t>(length);
  if (value < 0) value = 0;
  return std::min(static_cast<size_t>(value), length);
}

}  // namespace

std::vector<char32_t> decode_utf8(const std::string& text) { return utf8_decode(text); }
std::string encode_utf8(const std::vector<char32_t>& code_points) { return utf8_encode(code_points); }
void append_utf8(std::string& out, char32_t code_point) { utf8_append(out, code_point); }

size_t code_point_count(const std::string& text) {
  size_t count = 0;
  for (const char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

size_t byte_offset_of(const std::string& text, size_t index) {
  size_t seen = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      if (seen == index) return i;
      ++seen;
    }
  }
  return text.size();
}

bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_python_printable(char32_t c) { return in_ranges(kPrintable, c); }

std::string python_lower(const std::string& text) {
  const std::vector<char32_t> in = decode_utf8(text);
  std::vector<char32_t> out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) append_lower(out, in, i);
  return encode_utf8(out);
}

std::string python_upper(const std::string& text) {
  std::vector<char32_t> out;
  for (const char32_t c : decode_utf8(text)) append_mapping(out, c, kUpper);
  return encode_utf8(out);
}

std::string python_title(const std::string& text) {
  const std::vector<char32_t> in = decode_utf8(text);
  std::vector<char32_t> out;
  bool previous_is_cased = false;
  for (size_t i = 0; i < in.size(); ++i) {
    if (previous_is_cased) {
      append_lower(out, in, i);
    } else {
      append_mapping(out, in[i], kTitle);
    }
    previous_is_cased = is_cased(in[i]);
  }
  return encode_utf8(out);
}

std::string python_capitalize(const std::string& text) {
  const std::vector<char32_t> in = decode_utf8(text);
  std::vector<char32_t> out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (i == 0) {
      append_mapping(out, in[i], kTitle);
    } else {
      append_lower(out, in, i);
    }
  }
  return encode_utf8(out);
}

std::string python_swapcase(const std::string& text) {
  const std::vector<char32_t> in = decode_utf8(text);
  std::vector<char32_t> out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (is_upper(in[i])) {
      append_lower(out, in, i);
    } else if (is_lower(in[i])) {
      append_mapping(out, in[i], kUpper);
    } else {
      out.push_back(in[i]);
    }
  }
  return encode_utf8(out);
}

bool python_is(CharClass what, const std::string& text) {
  const std::vector<char32_t> in = decode_utf8(text);
  if (in.empty()) return false;
  switch (what) {
    case CharClass::Lower:
    case CharClass::Upper: {
      bool cased = false;
      for (const char32_t c : in) {
        const bool same = what == CharClass::Lower ? is_lower(c) : is_upper(c);
        const bool other = what == CharClass::Lower ? is_upper(c) : is_lower(c);
        if (other || is_titlecase(c)) return false;
        cased = cased || same;
      }
      return cased;
    }
    case CharClass::Title: {
      bool cased = false;
      bool previous_is_cased = false;
      for (const char32_t c : in) {
        if (is_upper(c) || is_titlecase(c)) {
          if (previous_is_cased) return false;
          previous_is_cased = cased = true;
        } else if (is_lower(c)) {
          if (!previous_is_cased) return false;
          previous_is_cased = cased = true;
        } else {
          previous_is_cased = false;
        }
      }
      return cased;
    }
    default: break;
  }
  for (const char32_t c : in) {
    bool ok = false;
    switch (what) {
      case CharClass::Alpha: ok = in_ranges(kAlpha, c); break;
      case CharClass::Digit: ok = in_ranges(kDigit, c); break;
      case CharClass::Decimal: ok = in_ranges(kDecimal, c); break;
      case CharClass::Numeric: ok = in_ranges(kNumeric, c); break;
      case CharClass::Alnum:
        ok = in_ranges(kAlpha, c) || in_ranges(kDecimal, c) || in_ranges(kDigit, c) || in_ranges(kNumeric, c);
        break;
      case CharClass::Space: ok = is_python_space(c); break;
      default: break;
    }
    if (!ok) return false;
  }
  return true;
}

std::string python_strip(const std::string& text, const std::optional<std::string>& chars, bool left, bool right) {
  const std::vector<char32_t> in = decode_utf8(text);
  std::vector<char32_t> strip_set;
  if (chars) strip_set = decode_utf8(*chars);
  auto strips = [&](char32_t c) {
    return chars ? std::find(strip_set.begin(), strip_set.end(), c) != strip_set.end() : is_python_space(c);
  };
  size_t begin = 0;
  size_t end = in.size();
  if (left) {
    while (begin < end && strips(in[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strips(in[end - 1])) --end;
  }
  if (begin == 0 && end == in.size()) return text;
  return encode_utf8(std::vector<char32_t>(in.begin() + static_cast<std::ptrdiff_t>(begin),
                                           in.begin() + static_cast<std::ptrdiff_t>(end)));
}

namespace {

std::vector<std::string> split_whitespace(const std::vector<char32_t>& in, int64_t maxsplit) {
  std::vector<std::string> out;
  auto piece = [&](size_t a, size_t b) {
    out.push_back(encode_utf8(std::vector<char32_t>(in.begin() + static_cast<std::ptrdiff_t>(a),
                                                    in.begin() + static_cast<std::ptrdiff_t>(b))));
  };
  size_t i = 0;
  const size_t n = in.size();
  int64_t remaining = maxsplit < 0 ? INT64_MAX : maxsplit;
  while (remaining-- > 0) {
    while (i < n && is_python_space(in[i])) ++i;
    if (i == n) break;
    const size_t j = i;
    while (i < n && !is_python_space(in[i])) ++i;
    piece(j, i);
  }
  if (i < n) {
    while (i < n && is_python_space(in[i])) ++i;
    if (i != n) piece(i, n);
  }
  return out;
}

std::vector<std::string> rsplit_whitespace(const std::vector<char32_t>& in, int64_t maxsplit) {
  std::vector<std::string> out;
  auto piece = [&](size_t a, size_t b) {
    out.push_back(encode_utf8(std::vector<char32_t>(in.begin() + static_cast<std::ptrdiff_t>(a),
                                                    in.begin() + static_cast<std::ptrdiff_t>(b))));
  };
  size_t i = in.size();
  int64_t remaining = maxsplit < 0 ? INT64_MAX : maxsplit;
  while (remaining-- > 0) {
    while (i > 0 && is_python_space(in[i - 1])) --i;
    if (i == 0) break;
    const size_t j = i;
    while (i > 0 && !is_python_space(in[i - 1])) --i;
    piece(i, j);
  }
  if (i > 0) {
    while (i > 0 && is_python_space(in[i - 1])) --i;
    if (i != 0) piece(0, i);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<std::string> python_split(const std::string& text, const std::optional<std::string>& sep,
                                      int64_t maxsplit, bool from_right) {
  if (!sep) {
    const std::vector<char32_t> in = decode_utf8(text);
    return from_right ? rsplit_whitespace(in, maxsplit) : split_whitespace(in, maxsplit);
  }
  std::vector<std::string> out;
  int64_t remaining = maxsplit < 0 ? INT64_MAX : maxsplit;
  if (!from_right) {
    size_t start = 0;
    while (remaining-- > 0) {
      const size_t found = text.find(*sep, start);
      if (found == std::string::npos) break;
      out.push_back(text.substr(start, found - start));
      start = found + sep->size();
    }
    out.push_back(text.substr(start));
    return out;
  }
  size_t end = text.size();
  while (remaining-- > 0 && end >= sep->size()) {
    const size_t found = text.rfind(*sep, end - sep->size());
    if (found == std::string::npos) break;
    out.push_back(text.substr(found + sep->size(), end - found - sep->size()));
    end = found;
  }
  out.push_back(text.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> python_splitlines(const std::string& text, bool keepends) {
  const std::vector<char32_t> in = decode_utf8(text);
  std::vector<std::string> out;
  size_t i = 0;
  while (i < in.size()) {
    const size_t start = i;
    while (i < in.size() && !is_line_break(in[i])) ++i;
    size_t end = i;
    if (i < in.size()) {
      i += (in[i] == '\r' && i + 1 < in.size() && in[i + 1] == '\n') ? 2 : 1;
      if (keepends) end = i;
    }
    out.push_back(encode_utf8(std::vector<char32_t>(in.begin() + static_cast<std::ptrdiff_t>(start),
                                                    in.begin() + static_cast<std::ptrdiff_t>(end))));
  }
  return out;
}

int64_t python_find(const std::string& text, const std::string& sub, std::optional<int64_t> start,
                    std::optional<int64_t> end, bool from_right) {
  const size_t length = code_point_count(text);
  const size_t first = adjust_index(start, length, 0);
  const size_t last = adjust_index(end, length, length);
  if (first > last) return -1;
  const size_t begin_byte = byte_offset_of(text, first);
  const size_t end_byte = byte_offset_of(text, last);
  const std::string window = text.substr(begin_byte, end_byte - begin_byte);
  const size_t found = from_right ? window.rfind(sub) : window.find(sub);
  if (found == std::string::npos) return -1;
  return static_cast<int64_t>(first + code_point_count(window.substr(0, found)));
}

int64_t python_count(const std::string& text, const std::string& sub, std::optional<int64_t> start,
                     std::optional<int64_t> end) {
  const size_t length = code_point_count(text);
  const size_t first = adjust_index(start, length, 0);
  const size_t last = adjust_index(end, length, length);
  if (first > last) return 0;
  const size_t begin_byte = byte_offset_of(text, first);
  const std::string window = text.substr(begin_byte, byte_offset_of(text, last) - begin_byte);
  if (sub.empty()) return static_cast<int64_t>(code_point_count(window) + 1);
  int64_t count = 0;
  for (size_t pos = window.find(sub); pos != std::string::npos; pos = window.find(sub, pos + sub.size())) ++count;
  return count;
}

std::string python_replace(const std::string& text, const std::string& old_text, const std::string& new_text,
                           int64_t count) {
  std::string out;
  int64_t remaining = count < 0 ? INT64_MAX : count;
  if (old_text.empty()) {
    // Python inserts `new` before every character and at the end.
    const std::vector<char32_t> in = decode_utf8(text);
    for (const char32_t c : in) {
      if (remaining > 0) {
        out += new_text;
        --remaining;
      }
      append_utf8(out, c);
    }
    if (remaining > 0) out += new_text;
    return out;
  }
  size_t start = 0;
  while (remaining > 0) {
    const size_t found = text.find(old_text, start);
    if (found == std::string::npos) break;
    out.append(text, start, found - start);
    out += new_text;
    start = found + old_text.size();
    --remaining;
  }
  out.append(text, start, std::string::npos);
  return out;
}

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace finetune::jinja
