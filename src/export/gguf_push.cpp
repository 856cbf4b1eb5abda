#include "finetune/export/gguf_push.h"

#include <filesystem>

#include "finetune/hub/hub_upload.h"
#include "finetune/util/errors.h"

namespace finetune {

std::vector<std::string> gguf_push_files(const std::vector<std::string>& gguf_files) {
  std::vector<std::string> names;
  for (const auto& file : gguf_files) names.push_back(std::filesystem::path(file).filename().string());
  if (!gguf_files.empty()) {
    const auto modelfile = std::filesystem::path(gguf_files.front()).parent_path() / "Modelfile";
    if (std::filesystem::is_regular_file(modelfile)) names.push_back("Modelfile");
  }
  return names;
}

std::string push_gguf_files(const HubSettings& settings, const std::string& repo_id, bool private_repo,
                            const std::vector<std::string>& gguf_files) {
  if (gguf_files.empty()) {
    throw UsageError("--push_gguf: no GGUF file was written (use --save_method gguf or gguf_lora, or --save_gguf)");
  }
  PushRequest request;
  request.repo_id = repo_id;
  request.folder = std::filesystem::path(gguf_files.front()).parent_path().string();
  request.files = gguf_push_files(gguf_files);
  request.private_repo = private_repo;
  request.commit_message = "Upload GGUF with finetune";
  return push_to_hub(settings, request);
}

}  // namespace finetune
