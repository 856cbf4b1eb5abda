// The splits of a dataset directory and their files, decided as Hugging Face `datasets` (5.x)
// decides them for load_dataset(DIR) (datasets/data_files.py, _get_data_files_patterns), so that
// finetune trains on the files `datasets` calls the train split and never on its test files:
//   1. files data/{split}-NNNNN-of-NNNNN*.* name their own splits (any name \w+(\.\w+)*);
//   2. otherwise the first of these pattern sets that matches a file decides the splits:
//        inspect logs (**/*.eval: a "logs" split), harbor tasks (task.toml, instruction.md: "test"),
//        split keywords in directory names, split keywords in file names, and last every file as
//        "train". Keywords: train|training, validation|valid|dev|val, test|testing|eval|evaluation,
//        as a whole name or set off by one of "-._ " or a digit (my_data-dev.json, train_0.jsonl,
//        data/test/x.json; not trainer.jsonl or Train.jsonl: matching is case-sensitive);
//   3. each split lists its patterns' files in path order (a file two of them match is listed
//      twice, as datasets lists it); hidden files and directories, __special__ directories and
//      datasets' metadata names (README.md, dataset_info.json, ...) are never data, nor files
//      without an extension datasets reads (datasets_file_types.h);
//   4. the builder is that of the most common extension, every split must agree, and only the
//      builder's files stay (a directory of mostly .jsonl drops its .parquet files).
// Not read: a README.md `configs:` section, which can name data files explicitly on the hub.
// tests/data/test_data_file_splits.cpp checks every layout of make_splits_fixtures.py against
// datasets itself.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace finetune {

struct DataFileSplits {
  std::string builder;  // datasets' builder module: json, parquet, text, ... (datasets_file_types.h)
  // Split name -> files (paths under the directory), in datasets' order: train, validation, test
  // first, then by name.
  std::vector<std::pair<std::string, std::vector<std::string>>> splits;
  std::vector<std::string> partial_splits;  // Parquet export only: splits converted in part

  std::vector<std::string> split_names() const;
  const std::vector<std::string>* files_of(const std::string& split) const;  // nullptr when absent
};

// Throws Error naming the directory when datasets would refuse it: no data files, a shard naming a
// split datasets does not allow, or splits whose formats differ.
DataFileSplits infer_data_file_splits(const std::string& dir);

// The same decision over a listing of repo-relative paths (a hub repo's files, before any is
// downloaded); the split files are returned as those relative paths. `where` names the listing in
// errors.
DataFileSplits infer_listing_splits(const std::string& where, const std::vector<std::string>& paths);

// The splits of a snapshot of a hub dataset's auto-converted Parquet branch (refs/convert/parquet),
// laid out by the dataset viewer as <config>/<split>/NNNN.parquet, or <config>/partial-<split>/
// when only the first rows of a big split were converted. The config is the only one, else
// "default"; otherwise an Error lists the configs.
DataFileSplits parquet_export_splits(const std::string& snapshot);
// The same over a listing of the branch's repo-relative paths (the returned files are those paths).
DataFileSplits parquet_export_listing_splits(const std::string& where, const std::vector<std::string>& paths);

// A split name datasets accepts: \w+(\.\w+)* (datasets/naming.py).
bool is_split_name(const std::string& name);

}  // namespace finetune
