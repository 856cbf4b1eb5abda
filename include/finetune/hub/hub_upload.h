// Pushing a folder to a hub model repo as huggingface_hub's create_repo + upload_folder do:
//   1. POST /api/repos/create (an existing repo, 409, is fine);
//   2. POST /api/models/{id}/preupload/{revision}: which files go through LFS;
//   3. LFS files: POST /{id}.git/info/lfs/objects/batch (basic transfer) -> PUT each object the
//      hub lacks to its upload URL, then POST its verify URL;
//   4. POST /api/models/{id}/commit/{revision} (ndjson): the small files inline (base64), the LFS
//      files by sha256. One commit for the whole folder.
#pragma once

#include <string>
#include <vector>

#include "finetune/hub/hub_settings.h"

namespace finetune {

struct PushRequest {
  std::string repo_id;  // ORG/NAME
  std::string folder;
  std::vector<std::string> files;  // folder-relative; empty: every file under the folder
  bool private_repo = false;
  std::string commit_message = "Upload with finetune";
};

// Returns the commit's URL. Errors name the repo and the file.
std::string push_to_hub(const HubSettings& settings, const PushRequest& request);

}  // namespace finetune
