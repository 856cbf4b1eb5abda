// Split inference as datasets does it (data_file_splits.h); the pattern lists are datasets'
// DEFAULT_PATTERNS_* and SPLIT_PATTERN_SHARDED, matched with fsspec's glob rules (path_glob.h).
#include "finetune/data/data_file_splits.h"

#include <algorithm>
#include <map>
#include <cctype>
#include <filesystem>

#include "finetune/data/datasets_file_types.h"
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

// Whether datasets' pattern resolution can return the file at repo-relative `path`: not hidden,
// not in a hidden or __special__ directory, not one of the metadata names of FILES_TO_IGNORE.
bool visible_path(const std::string& path) {
  const auto& ignored = datasets_ignored_file_names();
  size_t start = 0;
  while (true) {
    const size_t slash = path.find('/', start);
    const std::string part = path.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (is_hidden(part)) return false;
    if (slash == std::string::npos) return std::find(ignored.begin(), ignored.end(), part) == ignored.end();
    if (part.rfind("__", 0) == 0) return false;
    start = slash + 1;
  }
}

// Every file under `dir` that datasets' pattern resolution can return, relative and sorted.
// Symlinks are followed, as fsspec does.
std::vector<std::string> visible_files(const fs::path& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::follow_directory_symlink, ec), end;
  if (ec) throw Error(dir.string() + ": cannot list: " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) throw Error(dir.string() + ": cannot list: " + ec.message());
    const std::string name = it->path().filename().string();
    std::error_code type_ec;
    if (it->is_directory(type_ec)) {
      if (is_hidden(name) || name.rfind("__", 0) == 0) it.disable_recursion_pending();
      continue;
    }
    const std::string relative = it->path().lexically_relative(dir).generic_string();
    if (visible_path(relative) && fs::is_regular_file(it->path(), type_ec)) files.push_back(relative);
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

// Whether `base` holds "-NNNNN-of-NNNN" at `at`.
bool shard_marker_at(const std::string& base, size_t at) {
  static const std::string marker = "-#####-of-####";
  if (base.size() - at < marker.size()) return false;
  for (size_t i = 0; i < marker.size(); ++i) {
    const char c = base[at + i];
    if (marker[i] == '#' ? c < '0' || c > '9' : c != marker[i]) return false;
  }
  return true;
}

// string_to_dict(basename, "{split}-[0-9]...*.*"), as the search for (.+)-[0-9]{5}-of-[0-9]{4}
// finds it ('.' not matching \n or \r): in the first line with a marker after its first
// character, the text up to the line's last such marker; "" when no line has one.
std::string shard_split_name(const std::string& base) {
  for (size_t line = 0; line < base.size();) {
    const size_t end = std::min(base.find_first_of("\n\r", line), base.size());
    for (size_t at = end; at-- > line + 1;)
      if (shard_marker_at(base, at)) return base.substr(line, at - line);
    line = end + 1;
  }
  return "";
}

// The split patterns datasets settles on (its _get_data_files_patterns).
PatternSet split_patterns(const std::string& dir, const std::vector<std::string>& files) {
  const std::vector<std::string> shards = resolve({with_split(kShardedPattern, "*")}, files, false);
  if (!shards.empty()) {
    std::vector<std::string> names;
    for (const auto& shard : shards) {
      const std::string name = shard_split_name(shard.substr(shard.rfind('/') + 1));
      if (!is_split_name(name)) {
        throw Error(dir + ": " + shard + " names the split " + "\"" + name + "\"" +
                    ", which HF datasets refuses (a split name is letters, digits and _, parts joined by .)");
      }
      names.push_back(name);
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

namespace {

// The splits of `files` (relative, sorted, visible), before the builder's extension filter.
DataFileSplits splits_of_listing(const std::string& where, const std::vector<std::string>& files) {
  DataFileSplits result;
  std::vector<std::string> builders;
  for (const auto& [split, patterns] : split_patterns(where, files)) {
    result.splits.emplace_back(split, resolve(patterns, files, true));
    builders.push_back(datasets_builder_for(result.splits.back().second));
  }
  for (size_t i = 1; i < builders.size(); ++i) {
    if (builders[i] != builders[0]) {
      std::vector<std::string> described;
      for (size_t j = 0; j < builders.size(); ++j)
        described.push_back(result.splits[j].first + ": " + (builders[j].empty() ? "none" : builders[j]));
      throw Error(where + ": HF datasets finds different data formats in its splits (" + join(described, ", ") +
                  ") and refuses the directory");
    }
  }
  result.builder = builders[0];
  if (result.builder.empty()) throw Error(where + ": no data files that HF datasets reads");
  return result;
}

}  // namespace

DataFileSplits infer_data_file_splits(const std::string& dir) {
  DataFileSplits result = splits_of_listing(dir, visible_files(dir));
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

DataFileSplits infer_listing_splits(const std::string& where, const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const auto& path : paths)
    if (visible_path(path)) files.push_back(path);
  std::sort(files.begin(), files.end());
  DataFileSplits result = splits_of_listing(where, files);
  for (auto& [split, split_files] : result.splits) {
    std::vector<std::string> kept;
    for (const auto& file : split_files)
      if (datasets_builder_keeps(result.builder, file)) kept.push_back(file);
    split_files = std::move(kept);
  }
  return result;
}

DataFileSplits parquet_export_listing_splits(const std::string& where, const std::vector<std::string>& paths) {
  // <config>/<split directory>/<file>.parquet, hidden parts skipped
  std::map<std::string, std::map<std::string, std::vector<std::string>>> by_config;
  for (const auto& path : paths) {
    const auto first = path.find('/');
    const auto second = first == std::string::npos ? std::string::npos : path.find('/', first + 1);
    if (second == std::string::npos || path.find('/', second + 1) != std::string::npos) continue;
    const std::string config = path.substr(0, first), directory = path.substr(first + 1, second - first - 1);
    if (is_hidden(config) || is_hidden(directory) || fs::path(path).extension() != ".parquet") continue;
    by_config[config][directory].push_back(path);
  }
  std::vector<std::string> configs;
  for (const auto& [name, directories] : by_config) configs.push_back(name);
  if (configs.empty()) throw Error(where + ": no <config>/<split>/NNNN.parquet files");
  std::string config;
  if (configs.size() == 1) config = configs[0];
  else if (by_config.count("default")) config = "default";
  else
    throw Error(where + ": a Parquet export with the configs " + join(configs, ", ") +
                " and none named default (finetune reads the default config; copy the wanted <config>/<split>/ "
                "directories into a directory and pass that)");

  DataFileSplits result;
  result.builder = "parquet";
  std::vector<std::pair<std::string, std::vector<std::string>>> found;
  for (auto& [directory, files] : by_config[config]) {
    std::string split = directory;
    if (split.rfind("partial-", 0) == 0) {
      split = split.substr(8);
      result.partial_splits.push_back(split);
    }
    std::sort(files.begin(), files.end());
    found.emplace_back(split, files);
  }
  std::vector<std::string> names;
  for (const auto& [split, files] : found) names.push_back(split);
  for (const auto& name : ordered_splits(names)) {
    std::vector<std::string> files;
    for (const auto& [split, split_files] : found)
      if (split == name) files.insert(files.end(), split_files.begin(), split_files.end());
    result.splits.emplace_back(name, files);
  }
  if (result.splits.empty()) throw Error(where + "/" + config + ": no <split>/NNNN.parquet files");
  return result;
}

DataFileSplits parquet_export_splits(const std::string& snapshot) {
  std::vector<std::string> listing;
  std::error_code ec;
  const auto entries = [&ec](const fs::path& dir) {
    std::vector<fs::directory_entry> out;
    for (const auto& entry : fs::directory_iterator(dir, ec)) out.push_back(entry);
    return out;
  };
  for (const auto& config : entries(snapshot)) {
    if (!config.is_directory(ec)) continue;
    for (const auto& directory : entries(config.path())) {
      if (!directory.is_directory(ec)) continue;
      for (const auto& file : entries(directory.path()))
        if (fs::is_regular_file(file.path(), ec)) listing.push_back(file.path().lexically_relative(snapshot).generic_string());
    }
  }
  DataFileSplits result = parquet_export_listing_splits(snapshot, listing);
  for (auto& [split, files] : result.splits)
    for (auto& file : files) file = (fs::path(snapshot) / file).string();
  return result;
}

}  // namespace finetune
