// Helpers shared by every C++ test suite: a self-removing temporary directory, the message of an
// expected finetune::Error, and deeply nested JSON.
#pragma once

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

}  // namespace finetune::testing
