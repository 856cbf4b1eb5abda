// The hub settings from the environment, as huggingface_hub reads it: endpoint, token (and where
// it came from), offline mode, timeouts and the cache root. Every environment is an EnvMap; token
// files live in a temp directory.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "../test_support.h"
#include "finetune/hub/hub_settings.h"
#include "finetune/util/errors.h"

namespace finetune {
namespace {

// The UsageError `env` gets; fails the test on any other outcome.
std::string usage_error(const EnvMap& env) {
  try {
    hub_settings_from(env, "");
  } catch (const UsageError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a UsageError: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected a UsageError";
  return "";
}

TEST(HubSettings, Defaults) {
  const HubSettings settings = hub_settings_from({}, "");
  EXPECT_EQ(settings.endpoint, "https://huggingface.co");
  EXPECT_EQ(settings.token, "");
  EXPECT_EQ(settings.token_source, "");
  EXPECT_FALSE(settings.offline);
  EXPECT_EQ(settings.cache_root, "");  // no HOME, no HF_HOME: nothing configured
  EXPECT_EQ(settings.metadata_timeout_s, 10);
  EXPECT_EQ(settings.download_timeout_s, 10);
  EXPECT_EQ(settings.max_workers, 8);
}

// The rule the README states: metadata within 6 x HF_HUB_ETAG_TIMEOUT, a download within
// 6 x HF_HUB_DOWNLOAD_TIMEOUT + its size at 64 KiB/s.
TEST(HubSettings, DeadlinesFollowTheTimeouts) {
  const HubSettings settings = hub_settings_from({{"HF_HUB_ETAG_TIMEOUT", "0.5"}, {"HF_HUB_DOWNLOAD_TIMEOUT", "2"}}, "");
  EXPECT_DOUBLE_EQ(metadata_deadline_s(settings), 3.0);
  EXPECT_DOUBLE_EQ(download_deadline_s(settings, 0), 12.0);
  EXPECT_DOUBLE_EQ(download_deadline_s(settings, 64 * 1024 * 10), 22.0);
  EXPECT_DOUBLE_EQ(download_deadline_s(settings, int64_t{16} << 30), 12.0 + 262144.0);  // 16 GiB: about 3 days
}

TEST(HubSettings, EndpointLosesTrailingSlashes) {
  EXPECT_EQ(hub_settings_from({{"HF_ENDPOINT", "https://hf-mirror.com/"}}, "").endpoint, "https://hf-mirror.com");
  EXPECT_EQ(hub_settings_from({{"HF_ENDPOINT", "http://127.0.0.1:8080//"}}, "").endpoint, "http://127.0.0.1:8080");
  EXPECT_EQ(hub_settings_from({{"HF_ENDPOINT", "http://localhost:5564/hub"}}, "").endpoint,
            "http://localhost:5564/hub");
  EXPECT_EQ(hub_settings_from({{"HF_ENDPOINT", ""}}, "").endpoint, "https://huggingface.co");  // empty = unset
}

TEST(HubSettings, NonHttpEndpointIsAUsageError) {
  for (const char* endpoint : {"huggingface.co", "ftp://huggingface.co", "file:///tmp/hub", "HTTPS//x"}) {
    SCOPED_TRACE(endpoint);
    testing::expect_contains(usage_error({{"HF_ENDPOINT", endpoint}}), {"HF_ENDPOINT", endpoint, "http"});
  }
}

class HubSettingsToken : public ::testing::Test {
 protected:
  testing::TempDir dir_{"hub_token"};
};

TEST_F(HubSettingsToken, Precedence) {
  dir_.write("path_token", "hf_from_path\n");
  dir_.write("token", "hf_from_home\n");
  EnvMap env = {{"HF_TOKEN", "hf_env"},
                {"HUGGING_FACE_HUB_TOKEN", "hf_legacy"},
                {"HF_TOKEN_PATH", dir_.file("path_token")},
                {"HF_HOME", dir_.str()}};

  HubSettings settings = hub_settings_from(env, "hf_option");
  EXPECT_EQ(settings.token, "hf_option");
  EXPECT_EQ(settings.token_source, "--hub_token");

  settings = hub_settings_from(env, "");
  EXPECT_EQ(settings.token, "hf_env");
  EXPECT_EQ(settings.token_source, "HF_TOKEN");

  env.erase("HF_TOKEN");
  settings = hub_settings_from(env, "");
  EXPECT_EQ(settings.token, "hf_legacy");
  EXPECT_EQ(settings.token_source, "HUGGING_FACE_HUB_TOKEN");

  env.erase("HUGGING_FACE_HUB_TOKEN");
  settings = hub_settings_from(env, "");
  EXPECT_EQ(settings.token, "hf_from_path");  // newline trimmed
  EXPECT_EQ(settings.token_source, dir_.file("path_token"));

  env.erase("HF_TOKEN_PATH");
  settings = hub_settings_from(env, "");
  EXPECT_EQ(settings.token, "hf_from_home");
  EXPECT_EQ(settings.token_source, dir_.str() + "/token");

  env.erase("HF_HOME");
  settings = hub_settings_from(env, "");
  EXPECT_EQ(settings.token, "");
  EXPECT_EQ(settings.token_source, "");
}

TEST_F(HubSettingsToken, BlankEnvironmentTokensFallThrough) {
  dir_.write("token", "  hf_file  \n");
  const HubSettings settings =
      hub_settings_from({{"HF_TOKEN", "  "}, {"HUGGING_FACE_HUB_TOKEN", "\n"}, {"HF_HOME", dir_.str()}}, "");
  EXPECT_EQ(settings.token, "hf_file");
  EXPECT_EQ(settings.token_source, dir_.str() + "/token");
  // Values are trimmed.
  EXPECT_EQ(hub_settings_from({{"HF_TOKEN", " hf_x\n"}}, "").token, "hf_x");
  EXPECT_EQ(hub_settings_from({}, " hf_y ").token, "hf_y");
}

TEST_F(HubSettingsToken, MissingTokenPathFileMeansNoToken) {
  // HF_TOKEN_PATH replaces $HF_HOME/token (huggingface_hub's constants.HF_TOKEN_PATH), it does not
  // fall back to it.
  dir_.write("token", "hf_from_home\n");
  const HubSettings settings =
      hub_settings_from({{"HF_TOKEN_PATH", dir_.file("absent")}, {"HF_HOME", dir_.str()}}, "");
  EXPECT_EQ(settings.token, "");
  EXPECT_EQ(settings.token_source, "");
}

TEST_F(HubSettingsToken, XdgCacheAndHomeTokenFiles) {
  std::filesystem::create_directories(dir_.path() / "xdg" / "huggingface");
  dir_.write("xdg/huggingface/token", "hf_xdg");
  std::filesystem::create_directories(dir_.path() / "home" / ".cache" / "huggingface");
  dir_.write("home/.cache/huggingface/token", "hf_home_dir");

  HubSettings settings = hub_settings_from({{"XDG_CACHE_HOME", dir_.file("xdg")}, {"HOME", dir_.file("home")}}, "");
  EXPECT_EQ(settings.token, "hf_xdg");
  EXPECT_EQ(settings.token_source, dir_.file("xdg") + "/huggingface/token");

  settings = hub_settings_from({{"HOME", dir_.file("home")}}, "");
  EXPECT_EQ(settings.token, "hf_home_dir");
  EXPECT_EQ(settings.token_source, dir_.file("home") + "/.cache/huggingface/token");
}

TEST(HubSettings, OfflineValues) {
  for (const char* value : {"1", "ON", "on", "On", "yes", "YES", "Yes", "true", "TRUE", "True", "tRuE"}) {
    SCOPED_TRACE(value);
    EXPECT_TRUE(hub_settings_from({{"HF_HUB_OFFLINE", value}}, "").offline);
    EXPECT_TRUE(hub_settings_from({{"TRANSFORMERS_OFFLINE", value}}, "").offline);
  }
  for (const char* value : {"", "0", "off", "no", "false", "2", "y", " 1"}) {
    SCOPED_TRACE(value);
    EXPECT_FALSE(hub_settings_from({{"HF_HUB_OFFLINE", value}}, "").offline);
    EXPECT_FALSE(hub_settings_from({{"TRANSFORMERS_OFFLINE", value}}, "").offline);
  }
  // Either one is enough.
  EXPECT_TRUE(hub_settings_from({{"HF_HUB_OFFLINE", "0"}, {"TRANSFORMERS_OFFLINE", "1"}}, "").offline);
  EXPECT_TRUE(hub_settings_from({{"HF_HUB_OFFLINE", "1"}, {"TRANSFORMERS_OFFLINE", "0"}}, "").offline);
}

TEST(HubSettings, Timeouts) {
  const HubSettings settings = hub_settings_from({{"HF_HUB_ETAG_TIMEOUT", "3"}, {"HF_HUB_DOWNLOAD_TIMEOUT", "2.5"}}, "");
  EXPECT_EQ(settings.metadata_timeout_s, 3);
  EXPECT_EQ(settings.download_timeout_s, 2.5);
  EXPECT_EQ(hub_settings_from({{"HF_HUB_ETAG_TIMEOUT", "120"}}, "").download_timeout_s, 10);  // independent
}

TEST(HubSettings, BadTimeoutsAreUsageErrorsNamingTheVariable) {
  for (const char* key : {"HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT"}) {
    for (const char* value : {"abc", "0", "-5", "5s", "10 ", "nan"}) {
      SCOPED_TRACE(std::string(key) + "=" + value);
      testing::expect_contains(usage_error({{key, value}}), {std::string(key) + "=" + value, "seconds"});
    }
  }
}

TEST(HubSettings, CacheRoot) {
  EXPECT_EQ(hub_settings_from({{"HF_HUB_CACHE", "/data/hub"}, {"HF_HOME", "/data/hf"}}, "").cache_root, "/data/hub");
  EXPECT_EQ(hub_settings_from({{"HF_HOME", "/data/hf"}, {"HOME", "/home/u"}}, "").cache_root, "/data/hf/hub");
  EXPECT_EQ(hub_settings_from({{"XDG_CACHE_HOME", "/xdg"}, {"HOME", "/home/u"}}, "").cache_root,
            "/xdg/huggingface/hub");
  EXPECT_EQ(hub_settings_from({{"HOME", "/home/u"}}, "").cache_root, "/home/u/.cache/huggingface/hub");
}

}  // namespace
}  // namespace finetune
