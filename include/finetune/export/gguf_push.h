// --push_gguf --hub_path ORG/NAME (Unsloth's flags): the GGUF files an export wrote, and the Ollama Modelfile
// beside them, uploaded to a hub model repo in one commit through the hub client (hub/hub_upload.h).
#pragma once

#include <string>
#include <vector>

#include "finetune/hub/hub_settings.h"

namespace finetune {

// The folder-relative names pushed for `gguf_files` (all in one directory): the files, then
// "Modelfile" when that directory has one.
std::vector<std::string> gguf_push_files(const std::vector<std::string>& gguf_files);

// Pushes them to `repo_id` (created, private if asked, when missing); returns the commit URL.
// UsageError when there is no GGUF file to push.
std::string push_gguf_files(const HubSettings& settings, const std::string& repo_id, bool private_repo,
                            const std::vector<std::string>& gguf_files);

}  // namespace finetune
