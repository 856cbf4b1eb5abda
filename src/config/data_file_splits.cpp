// Split inference as datasets does it (data_file_splits.h); the pattern lists are datasets'
// DEFAULT_PATTERNS_* and SPLIT_PATTERN_SHARDED, matched with fsspec's glob rules (path_glob.h).
#include "finetune/config/data_file_splits.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <regex>

#include "finetune/config/datasets_file_types.h"
#include "finetune/util/errors.h"
#include "finetune/util/text.h"
#include "path_glob.h"

namespace finetune {
namespace {

namespace fs = std::filesystem;

using PatternSet = std::vector<std::pair<std::string, std::vector<std::string>>>;  // split -> globs

// datasets.data_files: SPLIT_KEYWORDS, NON_WORDS_CHARS and the base patterns of fsspec >= 2023.12.
const PatternSet& keyword_pattern_set(bool in_directory_names) {
  static const auto build = [](const std::vector<std::string>& bases) {
    const std::vector<std::pair<std::string, std::vector<std::string>>> keywords = {
        {"train", {"train", "training"}},
        {"validation", {"validation", "valid", "dev", "val"}},
        {"test", {"test", "testing", "eval", "evaluation"}}};
    PatternSet set;
    for (const auto& [split, words] : keywords) {
      std::vector<std::string> patterns;
      for (const auto& word : words) {
        for (std::string pattern : bases) {
          for (size_t at; (at = pattern.find("{keyword}")) != std::string::npos;) pattern.replace(at, 9, word);
          for (size_t at; (at = pattern.find("{sep}")) != std::string::npos;) pattern.replace(at, 5, "-._ 0-9");
          patterns.push_back(pattern);
        }
      }
      set.emplace_back(split, patterns);
    }
    return set;
  };
  static const PatternSet in_files = build({"**/{keyword}[{sep}]*", "**/*[{sep}]{keyword}[{sep}]*"});
  static const PatternSet in_directories = build({"**/{keyword}/**", "**/{keyword}[{sep}]*/**",
                                                  "**/*[{sep}]{keyword}/**", "**/*[{sep}]{keyword}[{sep}]*/**"});
  return in_directory_names ? in_directories : in_files;
}

// ALL_DEFAULT_PATTERNS, in the order datasets tries them: the first set with a match wins.
std::vector<PatternSet> default_pattern_sets() {
  return {{{"logs", {"**/*.eval"}}},
          {{"test", {"**/task.toml", "**/instruction.md"}}},
          keyword_pattern_set(true),
          keyword_pattern_set(false),
          {{"train", {"**"}}}};
}

const char* const kShardedPattern = "data/{split}-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]*.*";

std::string with_split(std::string pattern, const std::string& split) {
  return pattern.replace(pattern.find("{split}"), 7, split);
}

bool is_hidden(const std::string& name) {
  return name.size() > 1 && name[0] == '.' && name.find_first_not_of('.') != std::string::npos;
}

// Every file under `dir` that datasets' pattern resolution can return, relative and sorted: hidden
// files and files in hidden or __special__ directories are skipped (datasets' patterns never ask
// for them), as are the metadata names of FILES_TO_IGNORE. Symlinks are followed, as fsspec does.
std::vector<std::string> visible_files(const fs::path& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::follow_directory_symlink, ec), end;
  if (ec) throw Error(dir.string() + ": cannot list: " + ec.message());
  const auto& ignored = datasets_ignored_file_names();
  for (; it != end; it.increment(ec)) {
    if (ec) throw Error(dir.string() + ": cannot list: " + ec.message());
    const std::string name = it->path().filename().string();
    std::error_code type_ec;
    if (it->is_directory(type_ec)) {
      if (is_hidden(name) || name.rfind("__", 0) == 0) it.disable_recursion_pending();
      continue;
    }
    if (is_hidden(name) || std::find(ignored.begin(), ignored.end(), name) != ignored.end()) continue;
    if (fs::is_regular_file(it->path(), type_ec)) files.push_back(it->path().lexically_relative(dir).generic_string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// fsspec's resolution of `patterns`, one after another, each in path order.
std::vector<std::string> resolve(const std::vector<std::string>& patterns, const std::vector<std::string>& files,
                                 bool data_extensions_only) {
  std::vector<std::string> out;
  for (const auto& pattern : patterns) {
    const PathGlob glob(pattern);
    for (const auto& file : files)
      if (glob.matches(file) && (!data_extensions_only || has_datasets_data_extension(file))) out.push_back(file);
  }
  return out;
}

bool any_match(const std::vector<std::string>& patterns, const std::vector<std::string>& files) {
  for (const auto& pattern : patterns) {
    const PathGlob glob(pattern);
    for (const auto& file : files)
      if (glob.matches(file)) return true;
  }
  return false;
}

// train, validation, test first, then the others by name (datasets' order of sharded splits).
std::vector<std::string> ordered_splits(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::vector<std::string> out;
  for (const char* known : {"train", "validation", "test"})
    if (std::find(names.begin(), names.end(), known) != names.end()) out.push_back(known);
  for (const auto& name : names)
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  return out;
}

// The split patterns datasets settles on (its _get_data_files_patterns).
PatternSet split_patterns(const std::string& dir, const std::vector<std::string>& files) {
  const std::vector<std::string> shards = resolve({with_split(kShardedPattern, "*")}, files, false);
  if (!shards.empty()) {
    // string_to_dict(basename, "{split}-[0-9]...*.*"): the longest prefix before a -NNNNN-of-NNNN.
    static const std::regex shard_name("(.+)-[0-9]{5}-of-[0-9]{4}[0-9]*.*");
    std::vector<std::string> names;
    for (const auto& shard : shards) {
      const std::string base = shard.substr(shard.rfind('/') + 1);
      std::smatch match;
      std::regex_search(base, match, shard_name);
      if (!is_split_name(match[1].str())) {
        throw Error(dir + ": " + shard + " names the split " + "\"" + match[1].str() + "\"" +
                    ", which HF datasets refuses (a split name is letters, digits and _, parts joined by .)");
      }
      names.push_back(match[1].str());
    }
    PatternSet set;
    for (const auto& name : ordered_splits(names)) set.push_back({name, {with_split(kShardedPattern, name)}});
    return set;
  }
  for (const auto& candidate : default_pattern_sets()) {
    PatternSet found;
    for (const auto& entry : candidate)
      if (any_match(entry.second, files)) found.push_back(entry);
    if (!found.empty()) return found;
  }
  throw Error(dir + ": no data files (HF datasets finds none; README.md, dataset_info.json and the like, and "
                    "hidden files, do not count)");
}

}  // namespace

std::vector<std::string> DataFileSplits::split_names() const {
  std::vector<std::string> names;
  for (const auto& [name, files] : splits) names.push_back(name);
  return names;
}

const std::vector<std::string>* DataFileSplits::files_of(const std::string& split) const {
  for (const auto& [name, files] : splits)
    if (name == split) return &files;
  return nullptr;
}

bool is_split_name(const std::string& name) {
  // \w+(\.\w+)*: word characters (bytes of non-ASCII letters count, as Python's \w takes them).
  const auto word = [](unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; };
  bool previous_was_word = false;
  for (const unsigned char c : name) {
    if (c == '.' && previous_was_word) previous_was_word = false;
    else if (word(c)) previous_was_word = true;
    else return false;
  }
  return previous_was_word;
}

DataFileSplits infer_data_file_splits(const std::string& dir) {
  const std::vector<std::string> files = visible_files(dir);
  DataFileSplits result;
  std::vector<std::string> builders;
  for (const auto& [split, patterns] : split_patterns(dir, files)) {
    result.splits.emplace_back(split, resolve(patterns, files, true));
    builders.push_back(datasets_builder_for(result.splits.back().second));
  }
  for (size_t i = 1; i < builders.size(); ++i) {
    if (builders[i] != builders[0]) {
      std::vector<std::string> described;
      for (size_t j = 0; j < builders.size(); ++j)
        described.push_back(result.splits[j].first + ": " + (builders[j].empty() ? "none" : builders[j]));
      throw Error(dir + ": HF datasets finds different data formats in its splits (" + join(described, ", ") +
                  ") and refuses the directory");
    }
  }
  result.builder = builders[0];
  if (result.builder.empty()) throw Error(dir + ": no data files that HF datasets reads");
  // datasets matches the builder's extensions against absolute, symlink-free paths.
  std::error_code ec;
  const fs::path absolute = fs::weakly_canonical(fs::absolute(dir), ec);
  for (auto& [split, split_files] : result.splits) {
    std::vector<std::string> kept;
    for (const auto& file : split_files)
      if (datasets_builder_keeps(result.builder, (absolute / file).generic_string()))
        kept.push_back((fs::path(dir) / file).string());
    split_files = std::move(kept);
  }
  return result;
}

DataFileSplits parquet_export_splits(const std::string& snapshot) {
  std::error_code ec;
  const auto subdirectories = [&ec](const fs::path& dir) {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir, ec))
      if (entry.is_directory(ec) && !is_hidden(entry.path().filename().string()))
        names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  const std::vector<std::string> configs = subdirectories(snapshot);
  std::string config;
  if (configs.size() == 1) config = configs[0];
  else if (std::find(configs.begin(), configs.end(), "default") != configs.end()) config = "default";
  else
    throw Error(snapshot + ": a Parquet export with the configs " + join(configs, ", ") +
                " and none named default (finetune reads the default config; copy the wanted <config>/<split>/ "
                "directories into a directory and pass that)");

  DataFileSplits result;
  result.builder = "parquet";
  std::vector<std::pair<std::string, std::vector<std::string>>> found;
  for (const auto& directory : subdirectories(fs::path(snapshot) / config)) {
    std::string split = directory;
    if (split.rfind("partial-", 0) == 0) {
      split = split.substr(8);
      result.partial_splits.push_back(split);
    }
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(fs::path(snapshot) / config / directory, ec))
      if (entry.path().extension() == ".parquet" && fs::is_regular_file(entry.path(), ec))
        files.push_back(entry.path().string());
    std::sort(files.begin(), files.end());
    if (!files.empty()) found.emplace_back(split, files);
  }
  std::vector<std::string> names;
  for (const auto& [split, files] : found) names.push_back(split);
  for (const auto& name : ordered_splits(names)) {
    std::vector<std::string> files;
    for (const auto& [split, split_files] : found)
      if (split == name) files.insert(files.end(), split_files.begin(), split_files.end());
    result.splits.emplace_back(name, files);
  }
  if (result.splits.empty()) throw Error(snapshot + "/" + config + ": no <split>/NNNN.parquet files");
  return result;
}

}  // namespace finetune
