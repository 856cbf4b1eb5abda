#!/usr/bin/env python3
"""Reference fixtures for dataset split inference (data/data_file_splits.h, data/dataset_source.h).

Usage: make_splits_fixtures.py OUTDIR

Writes OUTDIR/layouts/<name>/ for each directory layout below (small valid .jsonl/.json/.parquet/.txt
files, or empty files where the content does not matter) and OUTDIR/expected.json:

  {"tables":  datasets' own tables the C++ side copies (extension -> builder module, ignored file
               names, metadata file names and extensions),
   "layouts": {"<name>": {"splits": [["train", ["train.jsonl", ...]], ...], "module": "json"}
               or {"error": "<datasets' exception>"}},
   "hub":     {"<org/name>": {"<revision>": {"snapshot": "hub/datasets--org--name/snapshots/<commit>",
                                             "splits": ..., "module": ...}}}}

Every expected split list comes from datasets itself: load_dataset_builder(dir).config.data_files,
i.e. get_data_patterns (split keywords in file and directory names, the data/{split}-NNNNN-of-NNNNN
shards, the "everything is train" fallback), DataFilesDict.from_patterns and the filter by the
builder module inferred from the most common extension. Paths are relative to the layout directory
and keep datasets' order (a file two patterns match is listed twice, as datasets lists it).

The hub cache is laid out by huggingface_hub's own functions (the refs/<revision> files), and the
snapshot folders it resolves offline (snapshot_download(local_files_only=True)) are recorded for
refs/main and for the auto-converted Parquet branch refs/convert/parquet, whose
<config>/<split>/NNNN.parquet and <config>/partial-<split>/NNNN.parquet files follow the dataset
viewer's convention (datasets itself only reads that branch through the viewer's API).
"""
import atexit
import json
import os
import shutil
import sys
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq

# datasets writes a cache of its own: a temporary one, not the user's; and never the network.
_DATASETS_CACHE = tempfile.mkdtemp(prefix="splits_datasets_cache_")
atexit.register(shutil.rmtree, _DATASETS_CACHE, ignore_errors=True)
os.environ["HF_DATASETS_CACHE"] = _DATASETS_CACHE
os.environ["HF_HUB_OFFLINE"] = "1"

import datasets  # noqa: E402
from datasets import data_files as df  # noqa: E402
from datasets import packaged_modules as pm  # noqa: E402
from huggingface_hub import file_download, snapshot_download  # noqa: E402

ROW = {"instruction": "Say hi.", "input": "", "output": "Hi."}

# name -> files (relative paths). Content follows the extension; other files are empty.
LAYOUTS = {
    "flat_train_test": ["train.jsonl", "test.jsonl"],
    "flat_all_three": ["train.jsonl", "validation.jsonl", "test.jsonl", "README.md"],
    "sharded_parquet": ["data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet",
                        "data/validation-00000-of-00001.parquet", "data/test-00000-of-00001.parquet", "README.md"],
    "sharded_custom_split": ["data/train-00000-of-00001.jsonl", "data/random-00000-of-00002.jsonl",
                             "data/random-00001-of-00002.jsonl", "data/notes.jsonl"],
    "sharded_bad_split_name": ["data/my-train-00000-of-00001.jsonl"],
    "keyword_after_separator": ["my_data-train.json", "my_data-dev.json", "my_data-test.json"],
    "numbered_shards": ["train_0.jsonl", "train_1.jsonl", "test_0.jsonl", "other.jsonl"],
    "keyword_synonyms": ["training.jsonl", "valid.jsonl", "testing.jsonl", "eval.jsonl", "evaluation.jsonl"],
    "dev_and_val": ["train.jsonl", "dev.jsonl", "val.jsonl"],
    "keywords_inside_words": ["trainer.jsonl", "contest.jsonl", "latest.jsonl", "validations.jsonl"],
    "upper_case_names": ["Train.jsonl", "TEST.jsonl"],
    "no_split_names": ["alpaca.jsonl", "more.json", "sub/deeper/rows.jsonl"],
    "only_test": ["test.jsonl"],
    "split_directories": ["train/a.jsonl", "train/b.jsonl", "validation/c.jsonl", "test/d.jsonl"],
    "nested_split_directories": ["data/train/shard_0.json", "data/test/shard_0.json", "data/test/nested/x.json"],
    "directory_names_with_separators": ["train-data/x.jsonl", "my_test_set/y.jsonl", "dev.2/z.jsonl"],
    "directory_split_wins_over_file_split": ["train/a.jsonl", "test.jsonl"],
    "only_test_directory": ["a/b/c/train.jsonl", "a/b/test/x.jsonl"],
    "file_in_two_splits": ["train_test.jsonl", "train.jsonl"],
    "file_matched_twice": ["train_train.jsonl", "test.jsonl"],
    "hidden_and_special": ["train.jsonl", ".test.jsonl", ".hidden/test.jsonl", "__pycache__/test.jsonl",
                           "sub/.cache/validation.jsonl"],
    "ignored_metadata_files": ["README.md", "dataset_info.json", "dataset_infos.json", "dataset_dict.json",
                               "config.json", "rows.jsonl"],
    "json_majority_drops_parquet": ["train.jsonl", "train-2.jsonl", "train.parquet", "test.jsonl"],
    "extension_tie_prefers_parquet": ["train.jsonl", "train.json", "train.parquet", "test.jsonl"],
    "parquet_majority_drops_json": ["train-a.parquet", "train-b.parquet", "train.jsonl"],
    "text_files": ["train.txt", "test.txt"],
    "unknown_extensions_dropped": ["train.jsonl", "train.bak", "test.jsonl", "test.orig"],
    "compressed_json": ["train.jsonl.gz", "test.jsonl"],
    "mixed_formats_across_splits": ["train.jsonl", "test.csv"],
    "split_without_readable_files": ["train.jsonl", "test.log"],
    "csv_only": ["train.csv", "test.csv"],
    "inspect_logs_win": ["train.jsonl", "runs/run1.eval"],
    "harbor_task_wins": ["train.jsonl", "tasks/t1/task.toml"],
    "readme_only": ["README.md"],
}


def write_file(path, name):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rows = [dict(ROW, instruction=f"{name} row {i}") for i in range(2)]
    if os.path.basename(path) in df.FILES_TO_IGNORE and path.endswith(".json"):
        with open(path, "w") as f:
            f.write("{}")  # metadata, not rows (datasets reads dataset_infos.json)
    elif path.endswith(".jsonl"):
        with open(path, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    elif path.endswith(".json"):
        with open(path, "w") as f:
            json.dump(rows, f)
    elif path.endswith(".parquet"):
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif path.endswith(".txt"):
        with open(path, "w") as f:
            f.write("first line\nsecond line\n")
    elif path.endswith(".csv"):
        with open(path, "w") as f:
            f.write("instruction,input,output\nSay hi.,,Hi.\n")
    else:
        open(path, "w").close()


def datasets_answer(directory):
    """What datasets makes of the directory: its split -> files, and the builder module."""
    try:
        builder = datasets.load_dataset_builder(directory)
    except Exception as e:  # every failure is part of the reference
        return {"error": f"{type(e).__name__}: {e}"}
    base = os.path.realpath(directory)
    splits = [[str(split), [os.path.relpath(f, base) for f in files]]
              for split, files in builder.config.data_files.items()]
    return {"splits": splits, "module": builder.name}


def tables():
    by_module = {}
    for ext, (module, _) in pm._EXTENSION_TO_MODULE.items():
        by_module.setdefault(module, []).append(ext)
    return {"extension_modules": by_module,
            "files_to_ignore": sorted(df.FILES_TO_IGNORE),
            "metadata_file_names": sorted(pm._ALL_METADATA_FILENAMES),
            "metadata_extensions": {m: exts for m, exts in pm._MODULE_TO_METADATA_EXTENSIONS.items() if exts},
            "split_keywords": {str(split): words for split, words in df.SPLIT_KEYWORDS.items()},
            "separators": df.NON_WORDS_CHARS}


def make_hub(root):
    """A fake cache: org/plain (refs/main), org/parquet (refs/main without data files + the Parquet
    branch), org/parquet_only (only the Parquet branch, two configs), written through
    huggingface_hub's own ref bookkeeping."""
    hub = os.path.join(root, "hub")
    repos = {
        "org/plain": {"main": ["README.md", "data/train-00000-of-00001.jsonl", "data/test-00000-of-00001.jsonl"]},
        "org/parquet": {"main": ["README.md", ".gitattributes"],
                        "refs/convert/parquet": ["README.md", "default/train/0000.parquet", "default/train/0001.parquet",
                                                 "default/partial-validation/0000.parquet",
                                                 "default/test/0000.parquet"]},
        "org/parquet_only": {"refs/convert/parquet": ["default/train/0000.parquet", "default/test/0000.parquet",
                                                      "other/train/0000.parquet"]},
    }
    # The dataset viewer's layout of the Parquet branch (its /parquet API lists these as config,
    # split, url): <config>/<split>/NNNN.parquet, "partial-<split>" for a split converted in part;
    # finetune reads the "default" config.
    parquet_splits = {
        "org/parquet": {"splits": [["train", ["default/train/0000.parquet", "default/train/0001.parquet"]],
                                   ["validation", ["default/partial-validation/0000.parquet"]],
                                   ["test", ["default/test/0000.parquet"]]],
                        "partial": ["validation"], "module": "parquet"},
        "org/parquet_only": {"splits": [["train", ["default/train/0000.parquet"]],
                                        ["test", ["default/test/0000.parquet"]]],
                             "partial": [], "module": "parquet"},
    }
    answer = {}
    for n, (repo_id, revisions) in enumerate(repos.items()):
        storage = os.path.join(hub, "datasets--" + repo_id.replace("/", "--"))
        answer[repo_id] = {}
        for k, (revision, files) in enumerate(revisions.items()):
            commit = f"{n:02d}{k:02d}" + "a" * 36
            file_download._cache_commit_hash_for_specific_revision(storage, revision, commit)
            for name in files:
                blob = os.path.join(storage, "blobs", f"{commit}-{name.replace('/', '_')}")
                write_file(blob + os.path.splitext(name)[1], name)
                os.rename(blob + os.path.splitext(name)[1], blob)
                link = os.path.join(storage, "snapshots", commit, name)
                os.makedirs(os.path.dirname(link), exist_ok=True)
                os.symlink(os.path.relpath(blob, os.path.dirname(link)), link)
            snapshot = snapshot_download(repo_id, repo_type="dataset", revision=revision, cache_dir=hub,
                                         local_files_only=True)
            entry = {"snapshot": os.path.relpath(snapshot, root)}
            if revision == "main":
                entry.update(datasets_answer(snapshot))
            else:
                entry.update(parquet_splits[repo_id])
            answer[repo_id][revision] = entry
    return answer


def main():
    out = sys.argv[1]
    shutil.rmtree(out, ignore_errors=True)  # layouts and the fake cache are rebuilt from scratch each run
    os.makedirs(out, exist_ok=True)
    layouts = {}
    for name, files in LAYOUTS.items():
        directory = os.path.join(out, "layouts", name)
        for f in files:
            write_file(os.path.join(directory, f), f)
        layouts[name] = datasets_answer(directory)
    expected = {"datasets_version": datasets.__version__, "tables": tables(), "layouts": layouts,
                "hub": make_hub(out)}
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
    for name, answer in layouts.items():
        print(name, json.dumps(answer)[:200])


if __name__ == "__main__":
    main()
