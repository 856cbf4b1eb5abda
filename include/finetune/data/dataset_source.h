// What --dataset and --eval_dataset name, resolved to the data files of one split. A dataset is
//   FILE      a data file: all of it is the split "train" (as load_dataset("json", data_files=FILE)
//             has it)
//   DIR       a directory, whose splits come from its file names exactly as HF datasets infers
//             them (data_file_splits.h): a test file is never in the train split
//   ORG/NAME  a dataset repo in the local Hugging Face cache (hub/cache_lookup.h): the refs/main snapshot,
//             split like a directory, when it has data files; else the auto-converted Parquet
//             branch (refs/convert/parquet), split by its <config>/<split>/ directories
// Accepted: the files of datasets' json, parquet and text builders (the row readers,
// data/dataset_files.h, say which of those they take); a dataset datasets would read with another
// builder (csv, images, ...) is an Error naming the builder.
//
// --eval_dataset VALUE means, first match wins:
//   1. an existing file or directory (so a directory named "test" in the working directory wins
//      over the split "test"; a warning says so when --dataset has such a split too);
//   2. ORG/NAME, looked up in the cache as above;
//   3. the name of a split of --dataset (--eval_dataset validation, --eval_dataset test).
// A directory or hub dataset given as --eval_dataset is evaluated on its validation split, else its
// test split, else its only split.
#pragma once

#include <string>
#include <vector>

#include "finetune/launch/environment.h"

namespace finetune {

struct DatasetSplit {
  std::string location;                  // the file, directory or snapshot the files come from
  std::string split;                     // the split read
  std::vector<std::string> files;
  std::vector<std::string> splits_found;  // every split of the dataset, in datasets' order
  bool partial = false;                  // a Parquet-export split the viewer converted only in part

  std::string describe() const;  // "DIR: split test (1 file; splits: train, test)"
};

// The split a directory or hub dataset given as --eval_dataset is evaluated on, among its split
// `names`: validation, else test, else its only split; otherwise a UsageError naming them.
std::string eval_split_name(const std::vector<std::string>& names, const std::string& eval_dataset);

// Whether finetune's row readers take the files of this HF datasets builder (json, parquet, text).
bool finetune_reads_builder(const std::string& builder);

// --dataset's split `split` (--dataset_split). A missing split is a UsageError listing the splits
// found; a dataset that is not there is an Error listing where finetune looked.
DatasetSplit resolve_dataset_split(const std::string& dataset, const std::string& split, const EnvMap& env);

// --eval_dataset, with the precedence above; `dataset` and `dataset_split` are --dataset's (empty
// dataset: no split names to refer to).
DatasetSplit resolve_eval_dataset(const std::string& eval_dataset, const std::string& dataset,
                                  const std::string& dataset_split, const EnvMap& env);

}  // namespace finetune
