#include "finetune/hub/hub_api.h"

#include <nlohmann/json.hpp>

#include "finetune/hub/cache_lookup.h"

namespace finetune {
namespace {

std::string repo_path_prefix(const RepoRef& repo) { return repo.kind == RepoKind::Dataset ? "/datasets/" : "/"; }

std::string token_hint(const HubSettings& settings) {
  if (settings.token.empty()) return "no token was sent: pass --hub_token, set HF_TOKEN or run `hf auth login`";
  return "the token from " + settings.token_source + " was sent";
}

}  // namespace

std::string RepoRef::kind_name() const { return kind == RepoKind::Dataset ? "dataset" : "model"; }
std::string RepoRef::cache_kind() const { return kind == RepoKind::Dataset ? "datasets" : "models"; }

std::string RepoRef::describe(const std::string& file) const {
  return kind_name() + " " + id + " (revision " + revision + (file.empty() ? "" : ", file " + file) + ")";
}

std::string api_url(const HubSettings& settings, const RepoRef& repo) {
  return settings.endpoint + "/api/" + repo.cache_kind() + "/" + repo.id + "/revision/" + url_quote(repo.revision);
}

std::string resolve_url(const HubSettings& settings, const RepoRef& repo, const std::string& revision,
                        const std::string& path) {
  return settings.endpoint + repo_path_prefix(repo) + repo.id + "/resolve/" + url_quote(revision) + "/" +
         url_quote(path, "/");
}

HttpRequest hub_request(const HubSettings& settings, const std::string& method, const std::string& url) {
  HttpRequest request;
  request.method = method;
  request.url = url;
  request.connect_timeout_s = settings.metadata_timeout_s;
  request.stall_timeout_s = settings.metadata_timeout_s;
  // The token goes to the endpoint only (a redirect to a CDN gets no credentials).
  if (!settings.token.empty() && url.rfind(settings.endpoint + "/", 0) == 0) {
    request.headers.emplace_back("Authorization", "Bearer " + settings.token);
  }
  return request;
}

HttpRequest metadata_request(const HubSettings& settings, const std::string& method, const std::string& url) {
  HttpRequest request = hub_request(settings, method, url);
  request.deadline_s = metadata_deadline_s(settings);
  return request;
}

bool worth_retrying(const TransportError& error) {
  return error.kind != TransportError::Kind::Deadline && error.kind != TransportError::Kind::TooLarge;
}

RepoInfo fetch_repo_info(const HubSettings& settings, const RepoRef& repo) {
  HttpRequest request = metadata_request(settings, "GET", api_url(settings, repo));
  request.follow_redirects = true;  // a renamed repo answers with a redirect to its new name
  HttpResponse response;
  try {
    response = http_request(request);
  } catch (const TransportError& e) {
    throw_transport(e, repo, "");
  }
  if (response.status < 200 || response.status >= 300) throw_for_status(response, settings, repo, "");
  return repo_info_from_answer(repo, request.url, response.body);
}

RepoInfo repo_info_from_answer(const RepoRef& repo, const std::string& url, const std::string& body) {
  RepoInfo info;
  try {
    const auto json = nlohmann::json::parse(body);
    info.commit = json.at("sha").get<std::string>();
    for (const auto& sibling : json.at("siblings")) info.files.push_back(sibling.at("rfilename").get<std::string>());
  } catch (const std::exception& e) {
    throw Error(repo.describe() + ": the hub's repo info (" + url + ") is not what huggingface_hub expects: " +
                e.what());
  }
  if (!is_commit_hash(info.commit)) {
    throw Error(repo.describe() + ": the hub answered an invalid commit id '" + info.commit + "'");
  }
  for (const auto& file : info.files) {
    if (!is_repo_relative_path(file)) {
      throw Error(repo.describe() + ": the hub lists a file named '" + file +
                  "', which is not a path inside the repo; refusing to download it");
    }
  }
  return info;
}

bool is_repo_relative_path(const std::string& path) {
  if (path.empty() || path.size() > kMaxRepoPathBytes) return false;
  if (path.find('\\') != std::string::npos || path.find('\0') != std::string::npos) return false;
  size_t start = 0;
  while (true) {
    const size_t slash = path.find('/', start);
    const std::string part = path.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (part.empty() || part == "." || part == ".." || part.size() > kMaxRepoPathPartBytes) return false;
    if (slash == std::string::npos) return true;
    start = slash + 1;
  }
}

void throw_for_status(const HttpResponse& response, const HubSettings& settings, const RepoRef& repo,
                      const std::string& file) {
  const std::string code = response.header("x-error-code");
  std::string server_message = response.header("x-error-message");
  if (server_message.empty()) {
    try {
      const auto json = nlohmann::json::parse(response.body);
      if (json.is_object() && json.contains("error") && json["error"].is_string()) server_message = json["error"];
    } catch (const std::exception&) {
    }
  }
  const std::string status = "HTTP " + std::to_string(response.status);
  const std::string what = repo.describe(file) + ": ";
  const std::string said = server_message.empty() ? "" : " (the hub says: " + server_message + ")";
  if (code == "GatedRepo") {
    throw Error(what + "gated repo, " + status + ": request access on the repo's page, then use a token of that "
                "account; " + token_hint(settings) + said);
  }
  if (code == "RepoNotFound") {
    throw Error(what + "repository not found, " + status + " (a private repo also looks like this: " +
                token_hint(settings) + ")" + said);
  }
  if (code == "RevisionNotFound") throw Error(what + "revision " + repo.revision + " not found, " + status + said);
  if (code == "EntryNotFound") throw Error(what + "file not found in that revision, " + status + said);
  if (response.status == 401 || response.status == 403) {
    throw Error(what + (response.status == 401 ? "unauthorized, " : "forbidden, ") + status + ": " +
                token_hint(settings) + said);
  }
  if (response.status == 404) throw Error(what + "not found, " + status + said);
  throw Error(what + "the hub answered " + status + said);
}

void throw_transport(const TransportError& error, const RepoRef& repo, const std::string& file) {
  const std::string rule = error.kind == TransportError::Kind::Deadline
                               ? " (deadlines follow HF_HUB_ETAG_TIMEOUT and HF_HUB_DOWNLOAD_TIMEOUT: see the README)"
                               : "";
  throw TransportError(error.kind, repo.describe(file) + ": " + error.what() + rule);
}

}  // namespace finetune
