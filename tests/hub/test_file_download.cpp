// What a HEAD answer for a file says (file_info_from_head, fed header lines as libcurl hands them
// to apply_header_line), and the answers refused before any path is built from them. No network.
#include <gtest/gtest.h>

#include <string>

#include "../test_support.h"
#include "finetune/hub/file_download.h"

namespace finetune {
namespace {

const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";
const std::string kEtag = "d7a8fbb307d7809469ca9abcb0082e4f8d5651e46d3cdb762d02d0bf37c9e592";
const std::string kUrl = "https://huggingface.co/org/m/resolve/" + kCommit + "/model.safetensors";

RepoRef model_repo() { return RepoRef{RepoKind::Model, "org/m", "main"}; }

HttpResponse head_answer(const std::string& lines) {
  HttpResponse response;
  size_t start = 0;
  for (size_t end; (end = lines.find('\n', start)) != std::string::npos; start = end + 1)
    apply_header_line(lines.substr(start, end + 1 - start), response);
  return response;
}

RemoteFileInfo read_head(const std::string& lines, const std::string& asked = kCommit) {
  return file_info_from_head(model_repo(), asked, "model.safetensors", kUrl, head_answer(lines));
}

TEST(HttpHeaders, LinesAsLibcurlHandsThemOver) {
  const HttpResponse response = head_answer("HTTP/1.1 302 Found\r\nX-Repo-Commit:  abc \r\nETag:\t\"e\"\r\nno colon\r\n\r\n");
  EXPECT_EQ(response.status, 302);
  EXPECT_EQ(response.header("x-repo-commit"), "abc ");  // leading blanks go, the rest stays
  EXPECT_EQ(response.header("etag"), "\"e\"");
  EXPECT_EQ(response.headers.size(), 2u);
  // A new status line (after a redirect) starts over.
  const HttpResponse next = head_answer("HTTP/1.1 302 Found\r\nETag: a\r\nHTTP/2 200\r\nContent-Length: 5\r\n");
  EXPECT_EQ(next.status, 200);
  EXPECT_EQ(next.header("etag"), "");
  EXPECT_EQ(next.header("content-length"), "5");
}

TEST(FileInfoFromHead, RedirectToTheCdn) {
  const RemoteFileInfo info = read_head("HTTP/1.1 302 Found\r\nX-Repo-Commit: " + kCommit +
                                        "\r\nETag: \"3f2a\"\r\nX-Linked-Etag: \"" + kEtag +
                                        "\"\r\nX-Linked-Size: 1048576\r\nContent-Length: 1092\r\n"
                                        "Location: https://cdn-lfs.hf.co/x\r\n");
  EXPECT_EQ(info.path, "model.safetensors");
  EXPECT_EQ(info.commit, kCommit);
  EXPECT_EQ(info.etag, kEtag);  // the LFS file's, not the pointer's
  EXPECT_EQ(info.size, 1048576);
  EXPECT_EQ(info.download_url, "https://cdn-lfs.hf.co/x");
}

TEST(FileInfoFromHead, PlainAnswerWithoutCommitHeader) {
  const RemoteFileInfo info = read_head("HTTP/2 200\r\netag: W/\"abc\"\r\ncontent-length: 680\r\n");
  EXPECT_EQ(info.commit, kCommit);  // the one asked for
  EXPECT_EQ(info.etag, "abc");
  EXPECT_EQ(info.size, 680);
  EXPECT_EQ(info.download_url, kUrl);
}

// The answers of a hostile or broken hub (issue 30's X-Repo-Commit "../../.." first): each an
// Error naming the repo and file, before any path is made from it.
TEST(FileInfoFromHead, AnswersThatAreRefused) {
  const std::string what = "model org/m (revision main, file model.safetensors): the hub answered ";
  const auto refused = [&](const std::string& lines, const std::string& part) {
    testing::expect_contains(testing::error_message([&] { read_head("HTTP/1.1 200 OK\r\n" + lines); }), {what, part});
  };
  refused("X-Repo-Commit: ../../..\r\nETag: a\r\nContent-Length: 1\r\n", "(X-Repo-Commit) '../../..'");
  refused("X-Repo-Commit: " + std::string(40, 'A') + "\r\nETag: a\r\nContent-Length: 1\r\n", "not 40 lowercase hex");
  refused("X-Repo-Commit: " + std::string(40, 'b') + "\r\nETag: a\r\nContent-Length: 1\r\n",
          "for a request of commit " + kCommit);
  refused("ETag: \"../x\"\r\nContent-Length: 1\r\n", "the ETag '../x'");
  refused("ETag: " + std::string(245, 'a') + "\r\nContent-Length: 1\r\n", "not usable as a blob file name");
  refused("ETag: a\r\n", "no size");
  refused("ETag: a\r\nContent-Length: -5\r\n", "no size");
  refused("ETag: a\r\nContent-Length: 99999999999999999999\r\n", "no size");
  testing::expect_contains(
      testing::error_message(
          [&] { read_head("HTTP/1.1 302 Found\r\nETag: a\r\nContent-Length: 1\r\nLocation: file:///etc/passwd\r\n"); }),
      {what, "a redirect to 'file:///etc/passwd'"});
}

}  // namespace
}  // namespace finetune
