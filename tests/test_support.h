// Helpers shared by every C++ test suite: a self-removing temporary directory, the message of an
// expected finetune::Error, and deeply nested JSON.
#pragma once

#include <cstdint>

#include <gtest/gtest.h>

#include <ftw.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "finetune/util/errors.h"

namespace finetune::testing {

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "test") {
    std::string pattern = (std::filesystem::temp_directory_path() / ("finetune_" + tag + "_XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  // nftw, not std::filesystem::remove_all: libtorch.so exports a copy of remove_all that crashes
  // when a LibTorch test binary resolves to it.
  ~TempDir() {
    ::nftw(path_.c_str(), [](const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }, 16,
           FTW_DEPTH | FTW_PHYS);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // Writes `content` to the file `name` inside the directory.
  void write(const std::string& name, const std::string& content) const {
    std::ofstream(path_ / name, std::ios::binary) << content;
  }

 private:
  std::filesystem::path path_;
};

// The message of the finetune::Error (or subclass) that `action` throws; any other outcome fails
// the test and returns "".
template <typename Action>
std::string error_message(Action&& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a finetune::Error";
  return "";
}

// Bytes as lower-case hex digits, for comparing encodings with the references' bytes.
inline std::string hex(const std::string& bytes) {
  static const char* const kDigits = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    out += kDigits[static_cast<uint8_t>(c) >> 4];
    out += kDigits[static_cast<uint8_t>(c) & 0xF];
  }
  return out;
}

// Every part occurs in `message`.
inline void expect_contains(const std::string& message, const std::vector<std::string>& parts) {
  for (const std::string& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
  }
}

// A JSON value of about `bytes` bytes that is nothing but nesting: "[[[...]]]" for '[' or
// {"a":{"a":...0...}} for '{'. The default ~120 KB (tens of thousands of levels) is far past
// kMaxJsonDepth, and enough to overflow the stack of nlohmann's recursive dump (a --config value
// did, before parse_json limited the depth).
inline std::string nested_json(char bracket, size_t bytes = 120000) {
  const std::string open = bracket == '[' ? "[" : "{\"a\":";
  const std::string close = bracket == '[' ? "]" : "}";
  const size_t levels = bytes / (open.size() + close.size());
  std::string text;
  text.reserve(bytes + 8);
  for (size_t i = 0; i < levels; ++i) text += open;
  text += bracket == '[' ? "" : "0";
  for (size_t i = 0; i < levels; ++i) text += close;
  return text;
}

// Python's str.strip() on UTF-8 text (what Jinja's `trim` does): drops leading and trailing
// characters for which str.isspace() is true, Unicode spaces such as U+3000 included.
inline std::string python_strip(const std::string& text) {
  auto space_at = [&](size_t pos, size_t& length) {
    const auto lead = static_cast<unsigned char>(text[pos]);
    length = lead < 0x80 ? 1 : (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3 : 4;
    if (pos + length > text.size()) return (length = 1), false;
    uint32_t c = length == 1 ? lead : lead & (0x7F >> length);
    for (size_t i = 1; i < length; ++i) c = (c << 6) | (static_cast<unsigned char>(text[pos + i]) & 0x3F);
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
  };
  size_t begin = 0, length = 0;
  while (begin < text.size() && space_at(begin, length)) begin += length;
  size_t end = begin;
  for (size_t pos = begin; pos < text.size(); pos += length) {
    if (!space_at(pos, length)) end = pos + length;
  }
  return text.substr(begin, end - begin);
}

}  // namespace finetune::testing
