#include "finetune/hub/hub_upload.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "finetune/hub/hub_api.h"
#include "finetune/util/file_contents.h"
#include "finetune/util/log.h"
#include "finetune/util/sha256.h"

namespace finetune {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct LocalFile {
  std::string path;  // repo path
  std::string local;
  int64_t size = 0;
  std::string sha256;
  bool lfs = false;
};

RepoRef target(const PushRequest& request) { return {RepoKind::Model, request.repo_id, "main"}; }

HttpResponse send(const HubSettings& settings, const PushRequest& request, HttpRequest http, const std::string& file) {
  http.stall_timeout_s = std::max(settings.download_timeout_s, 60.0);
  try {
    auto response = http_request(http);
    if (response.status < 200 || response.status >= 300) throw_for_status(response, settings, target(request), file);
    return response;
  } catch (const TransportError& e) {
    throw_transport(e, target(request), file);
  }
}

HttpRequest json_post(const HubSettings& settings, const std::string& url, const json& body,
                      const std::string& content_type = "application/json") {
  HttpRequest http = hub_request(settings, "POST", url);
  http.headers.emplace_back("Content-Type", content_type);
  http.body = body.dump();
  return http;
}

std::vector<LocalFile> local_files(const PushRequest& request) {
  std::vector<std::string> paths = request.files;
  if (paths.empty()) {
    for (const auto& entry : fs::recursive_directory_iterator(request.folder)) {
      if (!entry.is_regular_file()) continue;
      const std::string relative = entry.path().lexically_relative(request.folder).generic_string();
      if (relative.rfind('.', 0) != 0 && relative.find("/.") == std::string::npos) paths.push_back(relative);
    }
  }
  std::sort(paths.begin(), paths.end());
  std::vector<LocalFile> files;
  for (const auto& path : paths) {
    LocalFile file;
    file.path = path;
    file.local = (fs::path(request.folder) / path).string();
    std::error_code ec;
    file.size = static_cast<int64_t>(fs::file_size(file.local, ec));
    if (ec) throw Error("--push_model: " + file.local + ": " + ec.message());
    files.push_back(std::move(file));
  }
  if (files.empty()) throw Error("--push_model: " + request.folder + " holds no file to upload");
  return files;
}

std::string sample_of(const LocalFile& file) {
  std::ifstream in(file.local, std::ios::binary);
  std::string sample(512, '\0');
  in.read(sample.data(), static_cast<std::streamsize>(sample.size()));
  sample.resize(static_cast<size_t>(in.gcount()));
  return sample;
}

void create_repo(const HubSettings& settings, const PushRequest& request) {
  const auto slash = request.repo_id.find('/');
  const json body = {{"name", request.repo_id.substr(slash + 1)},
                     {"organization", request.repo_id.substr(0, slash)},
                     {"private", request.private_repo}};
  HttpRequest http = json_post(settings, settings.endpoint + "/api/repos/create", body);
  try {
    const auto response = http_request(http);
    if (response.status == 409) return;  // exists already
    if (response.status < 200 || response.status >= 300) throw_for_status(response, settings, target(request), "");
  } catch (const TransportError& e) {
    throw_transport(e, target(request), "");
  }
}

void mark_lfs_files(const HubSettings& settings, const PushRequest& request, std::vector<LocalFile>& files) {
  json body = {{"files", json::array()}};
  for (auto& file : files) {
    file.sha256 = sha256_file_hex(file.local);
    body["files"].push_back({{"path", file.path}, {"sample", base64_encode(sample_of(file))}, {"size", file.size}, {"sha", file.sha256}});
  }
  const auto url = settings.endpoint + "/api/models/" + request.repo_id + "/preupload/main";
  const auto answer = json::parse(send(settings, request, json_post(settings, url, body), "").body);
  for (const auto& entry : answer.at("files")) {
    for (auto& file : files)
      if (file.path == entry.at("path").get<std::string>()) file.lfs = entry.at("uploadMode").get<std::string>() == "lfs";
  }
}

void upload_lfs_objects(const HubSettings& settings, const PushRequest& request, const std::vector<LocalFile>& files) {
  json objects = json::array();
  for (const auto& file : files)
    if (file.lfs) objects.push_back({{"oid", file.sha256}, {"size", file.size}});
  if (objects.empty()) return;
  const json body = {{"operation", "upload"}, {"transfers", {"basic"}}, {"objects", objects},
                     {"hash_algo", "sha256"}, {"ref", {{"name", "refs/heads/main"}}}};
  HttpRequest batch = json_post(settings, settings.endpoint + "/" + request.repo_id + ".git/info/lfs/objects/batch", body,
                                "application/vnd.git-lfs+json");
  batch.headers.emplace_back("Accept", "application/vnd.git-lfs+json");
  const auto answer = json::parse(send(settings, request, batch, "").body);
  for (const auto& object : answer.at("objects")) {
    const std::string oid = object.at("oid");
    const LocalFile* file = nullptr;
    for (const auto& candidate : files)
      if (candidate.lfs && candidate.sha256 == oid) file = &candidate;
    if (file == nullptr) continue;
    if (object.contains("error")) {
      throw Error(target(request).describe(file->path) + ": the hub refused the LFS upload: " + object["error"].dump());
    }
    if (!object.contains("actions") || !object["actions"].contains("upload")) continue;  // the hub has it
    const auto& upload = object["actions"]["upload"];
    HttpRequest put = hub_request(settings, "PUT", upload.at("href"));
    put.body_file = file->local;
    if (upload.contains("header"))
      for (const auto& [name, value] : upload["header"].items()) put.headers.emplace_back(name, value.get<std::string>());
    log::info("uploading " + file->path + " (" + std::to_string(file->size) + " bytes) to " + request.repo_id);
    send(settings, request, put, file->path);
    if (object["actions"].contains("verify")) {
      const auto& verify = object["actions"]["verify"];
      HttpRequest post = json_post(settings, verify.at("href"), {{"oid", oid}, {"size", file->size}},
                                   "application/vnd.git-lfs+json");
      send(settings, request, post, file->path);
    }
  }
}

std::string commit(const HubSettings& settings, const PushRequest& request, const std::vector<LocalFile>& files) {
  std::ostringstream lines;
  lines << json({{"key", "header"}, {"value", {{"summary", request.commit_message}, {"description", ""}}}}).dump() << "\n";
  for (const auto& file : files) {
    if (file.lfs) {
      lines << json({{"key", "lfsFile"}, {"value", {{"path", file.path}, {"algo", "sha256"}, {"oid", file.sha256}, {"size", file.size}}}}).dump() << "\n";
    } else {
      lines << json({{"key", "file"}, {"value", {{"content", base64_encode(read_file(file.local))}, {"path", file.path},
                                                  {"encoding", "base64"}}}}).dump() << "\n";
    }
  }
  HttpRequest http = hub_request(settings, "POST", settings.endpoint + "/api/models/" + request.repo_id + "/commit/main");
  http.headers.emplace_back("Content-Type", "application/x-ndjson");
  http.body = lines.str();
  const auto answer = json::parse(send(settings, request, http, "").body);
  return answer.value("commitUrl", settings.endpoint + "/" + request.repo_id);
}

}  // namespace

std::string push_to_hub(const HubSettings& settings, const PushRequest& request) {
  if (settings.offline) throw UsageError("--push_model: HF_HUB_OFFLINE=1 forbids uploads");
  if (settings.token.empty()) {
    throw UsageError("--push_model: no hub token (pass --hub_token, set HF_TOKEN or run `hf auth login`)");
  }
  auto files = local_files(request);
  try {
    create_repo(settings, request);
    mark_lfs_files(settings, request, files);
    upload_lfs_objects(settings, request, files);
    return commit(settings, request, files);
  } catch (const json::exception& e) {  // an answer that is not JSON, or lacks a field the protocol has
    throw Error(target(request).describe() + ": the hub's answer is not what huggingface_hub expects: " + e.what());
  }
}

}  // namespace finetune
