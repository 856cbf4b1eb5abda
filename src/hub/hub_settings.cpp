#include "finetune/hub/hub_settings.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include "finetune/hub/cache_lookup.h"
#include "finetune/util/errors.h"
#include "finetune/util/text.h"

namespace finetune {
namespace {

// huggingface_hub's _is_true: 1, ON, YES, TRUE in any case.
bool is_true(std::string value) {
  std::transform(value.begin(), value.end(), value.begin(), [](unsigned char c) { return std::toupper(c); });
  return value == "1" || value == "ON" || value == "YES" || value == "TRUE";
}

double seconds_from(const EnvMap& env, const std::string& key, double fallback) {
  const std::string text = env_value(env, key);
  if (text.empty()) return fallback;
  try {
    size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == text.size() && value > 0) return value;
  } catch (const std::exception&) {
  }
  throw UsageError(key + "=" + text + ": expected a positive number of seconds");
}

std::string token_file(const EnvMap& env) {
  if (const auto path = env_value(env, "HF_TOKEN_PATH"); !path.empty()) return path;
  if (const auto home = env_value(env, "HF_HOME"); !home.empty()) return home + "/token";
  if (const auto xdg = env_value(env, "XDG_CACHE_HOME"); !xdg.empty()) return xdg + "/huggingface/token";
  if (const auto home = env_value(env, "HOME"); !home.empty()) return home + "/.cache/huggingface/token";
  return "";
}

}  // namespace

double metadata_deadline_s(const HubSettings& settings) { return kDeadlineFactor * settings.metadata_timeout_s; }

double download_deadline_s(const HubSettings& settings, int64_t size) {
  return kDeadlineFactor * settings.download_timeout_s +
         static_cast<double>(std::max<int64_t>(size, 0)) / kSlowestDownloadBytesPerSecond;
}

HubSettings hub_settings_from(const EnvMap& env, const std::string& hub_token_option) {
  HubSettings settings;
  if (auto endpoint = env_value(env, "HF_ENDPOINT"); !endpoint.empty()) {
    while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
    if (endpoint.rfind("http://", 0) != 0 && endpoint.rfind("https://", 0) != 0) {
      throw UsageError("HF_ENDPOINT=" + endpoint + ": expected an http:// or https:// URL");
    }
    settings.endpoint = endpoint;
  }
  if (!hub_token_option.empty()) {
    settings.token = trim(hub_token_option), settings.token_source = "--hub_token";
  } else if (const auto token = trim(env_value(env, "HF_TOKEN")); !token.empty()) {
    settings.token = token, settings.token_source = "HF_TOKEN";
  } else if (const auto legacy = trim(env_value(env, "HUGGING_FACE_HUB_TOKEN")); !legacy.empty()) {
    settings.token = legacy, settings.token_source = "HUGGING_FACE_HUB_TOKEN";
  } else if (const auto path = token_file(env); !path.empty() && std::filesystem::is_regular_file(path)) {
    std::ifstream in(path);
    std::string token;
    std::getline(in, token);
    settings.token = trim(token), settings.token_source = path;
  }
  settings.offline = is_true(env_value(env, "HF_HUB_OFFLINE")) || is_true(env_value(env, "TRANSFORMERS_OFFLINE"));
  settings.cache_root = hub_cache_root(env);
  settings.metadata_timeout_s = seconds_from(env, "HF_HUB_ETAG_TIMEOUT", settings.metadata_timeout_s);
  settings.download_timeout_s = seconds_from(env, "HF_HUB_DOWNLOAD_TIMEOUT", settings.download_timeout_s);
  return settings;
}

}  // namespace finetune
