// The hub API's URLs (as huggingface_hub builds them: the expected strings are what its
// hf_hub_url and urllib's quote print), where the token is sent, and the one-line errors for each
// kind of refusal. HttpResponse objects are built by hand: no network.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../test_support.h"
#include "finetune/hub/hub_api.h"

namespace finetune {
namespace {

HubSettings settings_with_token(const std::string& token, const std::string& source) {
  HubSettings settings;
  settings.token = token;
  settings.token_source = source;
  return settings;
}

RepoRef model(const std::string& id, const std::string& revision = "main") {
  return RepoRef{RepoKind::Model, id, revision};
}
RepoRef dataset(const std::string& id, const std::string& revision = "main") {
  return RepoRef{RepoKind::Dataset, id, revision};
}

TEST(HubApi, RepoRefNames) {
  EXPECT_EQ(model("Qwen/Qwen3-8B").kind_name(), "model");
  EXPECT_EQ(dataset("tatsu-lab/alpaca").kind_name(), "dataset");
  EXPECT_EQ(model("Qwen/Qwen3-8B").cache_kind(), "models");
  EXPECT_EQ(dataset("tatsu-lab/alpaca").cache_kind(), "datasets");
  EXPECT_EQ(model("Qwen/Qwen3-8B").describe(), "model Qwen/Qwen3-8B (revision main)");
  EXPECT_EQ(dataset("org/ds", "v2").describe("data/train.jsonl"), "dataset org/ds (revision v2, file data/train.jsonl)");
}

TEST(HubApi, ApiUrl) {
  HubSettings settings;
  EXPECT_EQ(api_url(settings, model("Qwen/Qwen3-8B")), "https://huggingface.co/api/models/Qwen/Qwen3-8B/revision/main");
  EXPECT_EQ(api_url(settings, dataset("org/ds", "refs/convert/parquet")),
            "https://huggingface.co/api/datasets/org/ds/revision/refs%2Fconvert%2Fparquet");
  settings.endpoint = "http://127.0.0.1:5564";
  EXPECT_EQ(api_url(settings, model("org/m", "v1.0")), "http://127.0.0.1:5564/api/models/org/m/revision/v1.0");
}

TEST(HubApi, ResolveUrl) {
  const HubSettings settings;
  // hf_hub_url("org/m", "config.json")
  EXPECT_EQ(resolve_url(settings, model("org/m"), "main", "config.json"),
            "https://huggingface.co/org/m/resolve/main/config.json");
  // hf_hub_url("org/ds", "data/my file #1?.json", repo_type="dataset", revision="refs/convert/parquet")
  EXPECT_EQ(resolve_url(settings, dataset("org/ds"), "refs/convert/parquet", "data/my file #1?.json"),
            "https://huggingface.co/datasets/org/ds/resolve/refs%2Fconvert%2Fparquet/data/my%20file%20%231%3F.json");
  // The revision argument, not the repo's, goes into the URL (a commit once it is known).
  EXPECT_EQ(resolve_url(settings, model("org/m", "main"), "0123456789abcdef0123456789abcdef01234567", "a/b.json"),
            "https://huggingface.co/org/m/resolve/0123456789abcdef0123456789abcdef01234567/a/b.json");
}

TEST(HubApi, UrlQuoteAsUrllib) {
  // urllib.parse.quote(text, safe="") and quote(text) (safe="/")
  EXPECT_EQ(url_quote("refs/convert/parquet"), "refs%2Fconvert%2Fparquet");
  EXPECT_EQ(url_quote("refs/convert/parquet", "/"), "refs/convert/parquet");
  EXPECT_EQ(url_quote("a b/c+d&\xc3\xa9~_.-"), "a%20b%2Fc%2Bd%26%C3%A9~_.-");
  EXPECT_EQ(url_quote("a b/c+d&\xc3\xa9~_.-", "/"), "a%20b/c%2Bd%26%C3%A9~_.-");
  EXPECT_EQ(url_quote("100%"), "100%25");
  EXPECT_EQ(url_quote("AZaz09"), "AZaz09");
  EXPECT_EQ(url_quote(""), "");
  EXPECT_EQ(url_quote(std::string("\x00\x7f\xff", 3)), "%00%7F%FF");
}

std::string authorization(const HttpRequest& request) {
  std::string value;
  int count = 0;
  for (const auto& [name, header] : request.headers) {
    if (name == "Authorization") value = header, ++count;
  }
  EXPECT_LE(count, 1);
  return value;
}

TEST(HubApi, TokenGoesToTheEndpointOnly) {
  HubSettings settings = settings_with_token("hf_secret", "HF_TOKEN");
  settings.metadata_timeout_s = 7;
  const HttpRequest request = hub_request(settings, "HEAD", "https://huggingface.co/org/m/resolve/main/config.json");
  EXPECT_EQ(request.method, "HEAD");
  EXPECT_EQ(request.url, "https://huggingface.co/org/m/resolve/main/config.json");
  EXPECT_EQ(request.connect_timeout_s, 7);
  EXPECT_EQ(request.stall_timeout_s, 7);
  EXPECT_FALSE(request.follow_redirects);
  EXPECT_EQ(authorization(request), "Bearer hf_secret");

  for (const char* url : {"https://cdn-lfs.huggingface.co/repos/ab/cd/blob", "https://cas-bridge.xethub.hf.co/x",
                          "https://huggingface.co.evil.example/org/m", "http://huggingface.co/org/m",
                          "https://huggingface.co"}) {
    SCOPED_TRACE(url);
    EXPECT_EQ(authorization(hub_request(settings, "GET", url)), "");
  }

  settings.endpoint = "http://localhost:5564/mirror";
  EXPECT_EQ(authorization(hub_request(settings, "GET", "http://localhost:5564/mirror/api/models/org/m")),
            "Bearer hf_secret");
  EXPECT_EQ(authorization(hub_request(settings, "GET", "http://localhost:5564/other")), "");

  EXPECT_TRUE(hub_request(HubSettings(), "GET", "https://huggingface.co/api/models/org/m").headers.empty());
}

HttpResponse response(long status, const std::string& error_code = "", const std::string& body = "") {
  HttpResponse out;
  out.status = status;
  if (!error_code.empty()) out.headers["x-error-code"] = error_code;
  out.body = body;
  return out;
}

std::string status_error(const HttpResponse& answer, const HubSettings& settings, const RepoRef& repo,
                         const std::string& file) {
  return testing::error_message([&] { throw_for_status(answer, settings, repo, file); });
}

TEST(HubApi, GatedRepoWithoutTokenSaysToPassOne) {
  const std::string message =
      status_error(response(401, "GatedRepo"), HubSettings(), model("meta-llama/Llama-3.1-8B"), "config.json");
  EXPECT_EQ(message,
            "model meta-llama/Llama-3.1-8B (revision main, file config.json): gated repo, HTTP 401: request access on "
            "the repo's page, then use a token of that account; no token was sent: pass --hub_token, set HF_TOKEN or "
            "run `hf auth login`");
}

TEST(HubApi, GatedRepoWithTokenNamesItsSource) {
  HttpResponse answer = response(403, "GatedRepo");
  answer.headers["x-error-message"] = "Access to model meta-llama/Llama-3.1-8B is restricted.";
  const std::string message = status_error(answer, settings_with_token("hf_x", "/root/.cache/huggingface/token"),
                                           model("meta-llama/Llama-3.1-8B", "v1"), "model.safetensors");
  testing::expect_contains(message, {"model meta-llama/Llama-3.1-8B (revision v1, file model.safetensors)",
                                     "gated repo, HTTP 403", "the token from /root/.cache/huggingface/token was sent",
                                     "(the hub says: Access to model meta-llama/Llama-3.1-8B is restricted.)"});
  EXPECT_EQ(message.find("hf_x"), std::string::npos) << "the token itself must never be printed";
  EXPECT_EQ(message.find("pass --hub_token"), std::string::npos);
}

TEST(HubApi, RepoNotFound) {
  const std::string message = status_error(response(401, "RepoNotFound", R"({"error":"Repository not found"})"),
                                           HubSettings(), dataset("org/typo"), "");
  EXPECT_EQ(message,
            "dataset org/typo (revision main): repository not found, HTTP 401 (a private repo also looks like this: no "
            "token was sent: pass --hub_token, set HF_TOKEN or run `hf auth login`) (the hub says: Repository not "
            "found)");
}

TEST(HubApi, RevisionNotFound) {
  const std::string message =
      status_error(response(404, "RevisionNotFound"), HubSettings(), model("org/m", "v9"), "config.json");
  EXPECT_EQ(message, "model org/m (revision v9, file config.json): revision v9 not found, HTTP 404");
}

TEST(HubApi, EntryNotFound) {
  const std::string message =
      status_error(response(404, "EntryNotFound"), HubSettings(), model("org/m", "dev"), "tokenizer.model");
  EXPECT_EQ(message, "model org/m (revision dev, file tokenizer.model): file not found in that revision, HTTP 404");
}

TEST(HubApi, PlainStatuses) {
  const HubSettings anonymous;
  const HubSettings with_token = settings_with_token("hf_x", "--hub_token");
  const RepoRef repo = model("org/m", "refs/pr/1");
  EXPECT_EQ(status_error(response(401), anonymous, repo, "config.json"),
            "model org/m (revision refs/pr/1, file config.json): unauthorized, HTTP 401: no token was sent: pass "
            "--hub_token, set HF_TOKEN or run `hf auth login`");
  EXPECT_EQ(status_error(response(403), with_token, repo, "config.json"),
            "model org/m (revision refs/pr/1, file config.json): forbidden, HTTP 403: the token from --hub_token was "
            "sent");
  EXPECT_EQ(status_error(response(404), anonymous, repo, "config.json"),
            "model org/m (revision refs/pr/1, file config.json): not found, HTTP 404");
  EXPECT_EQ(status_error(response(500, "", R"({"error":"Internal Error - We're working hard to fix this"})"),
                         anonymous, repo, "config.json"),
            "model org/m (revision refs/pr/1, file config.json): the hub answered HTTP 500 (the hub says: Internal "
            "Error - We're working hard to fix this)");
  // A body that is not JSON, or JSON without a string "error", adds nothing.
  EXPECT_EQ(status_error(response(502, "", "<html>Bad gateway</html>"), anonymous, repo, ""),
            "model org/m (revision refs/pr/1): the hub answered HTTP 502");
  EXPECT_EQ(status_error(response(503, "", R"({"error": 5})"), anonymous, repo, ""),
            "model org/m (revision refs/pr/1): the hub answered HTTP 503");
}

TEST(HubApi, HeaderMessageWinsOverBody) {
  HttpResponse answer = response(404, "EntryNotFound", R"({"error":"from body"})");
  answer.headers["x-error-message"] = "from header";
  const std::string message = status_error(answer, HubSettings(), model("org/m"), "x.json");
  EXPECT_EQ(message, "model org/m (revision main, file x.json): file not found in that revision, HTTP 404 (the hub "
                     "says: from header)");
}

TEST(HubApi, TransportErrorsGetTheRepoContext) {
  try {
    throw_transport(TransportError(TransportError::Kind::Reset, "connection reset (Recv failure)"),
                    dataset("org/ds", "main"), "data/train.parquet");
    ADD_FAILURE() << "throw_transport returned";
  } catch (const TransportError& e) {
    EXPECT_EQ(e.kind, TransportError::Kind::Reset);
    EXPECT_EQ(std::string(e.what()),
              "dataset org/ds (revision main, file data/train.parquet): connection reset (Recv failure)");
  }
}

}  // namespace
TEST(HubApi, RepoInfoFromAnswer) {
  const RepoInfo info = repo_info_from_answer(
      model("org/m"), "URL",
      R"({"id": "org/m", "sha": "0123456789abcdef0123456789abcdef01234567", "siblings": [{"rfilename": "config.json"},
          {"rfilename": "original/params.json"}]})");
  EXPECT_EQ(info.commit, "0123456789abcdef0123456789abcdef01234567");
  EXPECT_EQ(info.files, (std::vector<std::string>{"config.json", "original/params.json"}));
}

// What a hostile or broken hub can answer: each is an Error naming the repo, before any path is made.
TEST(HubApi, RepoInfoAnswersThatAreRefused) {
  const std::string sha = "0123456789abcdef0123456789abcdef01234567";
  const auto refused = [](const std::string& body, const std::string& part) {
    testing::expect_contains(testing::error_message([&] { repo_info_from_answer(model("org/m"), "URL", body); }),
                             {"model org/m (revision main)", part});
  };
  refused("not json", "the hub's repo info (URL) is not what huggingface_hub expects");
  refused(R"({"siblings": []})", "is not what huggingface_hub expects");
  refused(R"({"sha": 7, "siblings": []})", "is not what huggingface_hub expects");
  refused(R"({"sha": "../../..", "siblings": []})", "invalid commit id '../../..'");
  refused(R"({"sha": ")" + sha + R"(", "siblings": [{"rfilename": "../../x"}]})", "a file named '../../x'");
  refused(R"({"sha": ")" + sha + R"(", "siblings": [{"rfilename": "/etc/passwd"}]})", "not a path inside the repo");
  refused(R"({"sha": ")" + sha + R"(", "siblings": [{"name": "x"}]})", "is not what huggingface_hub expects");
}

TEST(HubApi, RepoRelativePathsOnly) {
  for (const char* good : {"config.json", "data/train-00000-of-00001.parquet", "a/b/c.json", ".gitattributes", "a..b"})
    EXPECT_TRUE(is_repo_relative_path(good)) << good;
  for (const char* bad : {"", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a/.", "a/", "a\\b"})
    EXPECT_FALSE(is_repo_relative_path(bad)) << bad;
  EXPECT_FALSE(is_repo_relative_path(std::string("a\0b", 3)));
  // What a file system can hold (a 40 KB name crashed the dataset listing's std::regex: fuzz target hub_answers).
  EXPECT_TRUE(is_repo_relative_path(std::string(255, 'a') + "/" + std::string(255, 'b')));
  EXPECT_FALSE(is_repo_relative_path(std::string(256, 'a')));
  std::string deep;
  while (deep.size() + 201 <= kMaxRepoPathBytes) deep += std::string(200, 'd') + "/";
  EXPECT_TRUE(is_repo_relative_path(deep + std::string(kMaxRepoPathBytes - deep.size(), 'f')));
  EXPECT_FALSE(is_repo_relative_path(deep + std::string(kMaxRepoPathBytes - deep.size() + 1, 'f')));
  EXPECT_FALSE(is_repo_relative_path(std::string(40000, '[')));
}

}  // namespace finetune
