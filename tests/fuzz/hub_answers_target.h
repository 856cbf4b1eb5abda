// The hub_answers fuzz target: what a hub (or anything posing as one) answers, read as finetune
// reads it, and every path built from it checked to lie inside the cache. The input is up to three
// parts separated by NUL bytes, each optional:
//   REPO_INFO   the body of GET /api/models/{id}/revision/{rev} (sha, siblings[].rfilename)
//   HEAD        the header lines of the last HEAD answer for a file ("HTTP/1.1 302 Found",
//               X-Repo-Commit, ETag / X-Linked-Etag, Content-Length / X-Linked-Size, Location)
//   INDEX       a model.safetensors.index.json of that snapshot (its weight_map names the shards)
// Each part is read by the function the download uses (repo_info_from_answer, then the listing as
// a model's and as a dataset's; apply_header_line + file_info_from_head; shards_of_index). An
// accepted answer's paths are derived through RepoCache and then written for real (snapshot links,
// the blob, the ref, the lock) in a cache under the scratch directory: a path outside that cache,
// or anything created beside it, is a failure (std::logic_error), not a refusal.
#pragma once

#include <string>

namespace finetune::fuzz {

void run_hub_answers(const std::string& input, const std::string& scratch_dir);

}  // namespace finetune::fuzz
