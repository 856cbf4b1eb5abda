// How finetune talks to the Hugging Face Hub, from the environment as huggingface_hub reads it:
//   endpoint  HF_ENDPOINT, default https://huggingface.co (a mirror or a local server also work)
//   token     --hub_token, else HF_TOKEN (or the older HUGGING_FACE_HUB_TOKEN), else the token file
//             `hf auth login` writes: HF_TOKEN_PATH, else $HF_HOME/token, else
//             ~/.cache/huggingface/token. Sent only to the endpoint's host.
//   offline   HF_HUB_OFFLINE=1 (or TRANSFORMERS_OFFLINE=1): no request at all, only the cache
//   cache     HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub (hub/cache_lookup.h)
//   timeouts  HF_HUB_ETAG_TIMEOUT (metadata requests) and HF_HUB_DOWNLOAD_TIMEOUT (a download that
//             moves no byte for that long), 10 s each as in huggingface_hub
//   deadlines what bounds a request whatever the server does (a byte every few seconds, an
//             endless body): metadata requests (repo info, HEAD) end within
//             kDeadlineFactor x HF_HUB_ETAG_TIMEOUT with a body of at most 64 MiB; a download within
//             kDeadlineFactor x HF_HUB_DOWNLOAD_TIMEOUT + size / kSlowestDownloadBytesPerSecond,
//             and never with more bytes than the HEAD announced.
#pragma once

#include <cstdint>
#include <string>

#include "finetune/launch/environment.h"

namespace finetune {

struct HubSettings {
  std::string endpoint = "https://huggingface.co";  // no trailing slash
  std::string token;                                // "" = anonymous
  std::string token_source;                         // where the token came from, for messages
  bool offline = false;
  std::string cache_root;
  double metadata_timeout_s = 10;
  double download_timeout_s = 10;
  int max_workers = 8;  // files downloaded at once (huggingface_hub's snapshot_download default)
};

inline constexpr double kDeadlineFactor = 6;
inline constexpr double kSlowestDownloadBytesPerSecond = 64 * 1024;

double metadata_deadline_s(const HubSettings& settings);
double download_deadline_s(const HubSettings& settings, int64_t size);

HubSettings hub_settings_from(const EnvMap& env, const std::string& hub_token_option);

}  // namespace finetune
