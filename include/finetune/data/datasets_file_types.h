// What HF `datasets` (5.x) knows about data-file names, copied from datasets/packaged_modules and
// datasets/data_files.py, for split inference (data_file_splits.h): which builder module reads
// which extension, which file names are metadata rather than data, and how the builder of a list of
// files is chosen. tests/config/test_datasets_file_types.cpp compares every table with the datasets
// the tests install (tests/reference/make_splits_fixtures.py), so an upgrade that changes them fails
// there rather than silently splitting differently.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace finetune {

// (builder module, its extensions separated by spaces): _EXTENSION_TO_MODULE grouped by module.
const std::vector<std::pair<std::string, std::string>>& datasets_extension_modules();

// Files datasets never takes for data (data_files.FILES_TO_IGNORE): README.md, dataset_info.json, ...
const std::vector<std::string>& datasets_ignored_file_names();

// Builder metadata files (_ALL_METADATA_FILENAMES): counted last when choosing the builder.
const std::vector<std::string>& datasets_metadata_file_names();

// Metadata extensions a builder keeps besides its data extensions (_MODULE_TO_METADATA_EXTENSIONS).
const std::vector<std::pair<std::string, std::string>>& datasets_metadata_extensions();

// Whether any ".suffix" of the file name (case as written) is an extension datasets reads, a .zip,
// or a metadata extension: resolve_pattern's allowed_extensions check; other files are not data.
bool has_datasets_data_extension(const std::string& file_name);

// The builder module datasets picks for these files (infer_module_for_data_files_list): that of
// the most common lower-cased ".suffix" among non-metadata files, ties going to .parquet, .lance,
// .vortex, .arrow, .jsonl, .json, .csv, then the later name; "zip" when a .zip archive wins (datasets
// then looks inside, which finetune does not); "" when no suffix is known. Paths or bare names.
std::string datasets_builder_for(const std::vector<std::string>& files);

// Whether datasets' filter for `module` keeps `path` (DataFilesList.filter): the path has one of
// the module's extensions, a .zip or a metadata extension, at its end or before one more ".suffix"
// (train.jsonl.gz is json).
bool datasets_builder_keeps(const std::string& module, const std::string& path);

}  // namespace finetune
