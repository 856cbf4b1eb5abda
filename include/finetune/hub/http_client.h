// HTTP(S) through libcurl, as the hub client needs it: one request at a time per call, the
// response body either in memory or streamed to a sink, redirects followed only when asked (the
// hub's resolve answers a redirect whose headers matter), every header of the last response kept
// (names lower-cased), http:// and https:// only (redirects included). Bounded waits: connecting,
// a transfer that moves no byte for `stall_timeout_s`, and, when `deadline_s` is set, the whole
// request, fail instead of hanging. Bounded sizes: a body kept in memory stops at
// kMaxInMemoryBody, a 2xx body streamed to a sink at `max_body_bytes` when set: refused at its
// Content-Length when that says too much, else once the bytes pass the bound (TransportError
// TooLarge either way).
// A failure to talk to the server (DNS, refused, reset, timeout, a body cut short) is a
// TransportError saying which; an HTTP status is not an error here: the caller reads it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "finetune/util/errors.h"

namespace finetune {

struct TransportError : Error {
  // Deadline (the request's overall deadline passed) and TooLarge (a body over its bound) are not
  // worth retrying: the same server answers the same way again.
  enum class Kind { Dns, Connect, Timeout, Reset, Truncated, Deadline, TooLarge, Other };
  TransportError(Kind kind, const std::string& message) : Error(message), kind(kind) {}
  Kind kind;
};

struct HttpRequest {
  std::string method = "GET";  // GET, HEAD, POST, PUT
  std::string url;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;               // POST/PUT body (unless body_file is set)
  std::string body_file;          // PUT the bytes of this file
  bool follow_redirects = false;  // follow 3xx (relative or absolute) up to 10 hops
  double connect_timeout_s = 10;
  double stall_timeout_s = 10;    // abort when no byte moves for this long
  double deadline_s = 0;          // > 0: abort when the whole request takes longer
  int64_t max_body_bytes = -1;    // >= 0: abort a streamed body longer than this (Content-Length or bytes seen)
};

// The most bytes of a body kept in memory (JSON answers, error bodies).
inline constexpr int64_t kMaxInMemoryBody = int64_t{64} << 20;

struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;  // the last response's, names lower-cased
  std::string body;                            // empty when streamed to a sink
  std::string url;                             // the URL that answered (after redirects)

  std::string header(const std::string& lower_case_name) const;  // "" when absent
};

// Receives body bytes as they arrive, with the response's status and headers so far; returning
// false aborts the transfer (an Error is thrown).
using BodySink = std::function<bool(const HttpResponse& head, const char* data, size_t size)>;

// One header line as libcurl hands it over (line end included) applied to `response`: a status
// line ("HTTP/1.1 302 Found") starts a new response (headers cleared, status read), "Name: value"
// sets headers[lower-cased name] to the value without its leading blanks. Returns that name; ""
// for a status line or a line without a colon (ignored).
std::string apply_header_line(std::string line, HttpResponse& response);

HttpResponse http_request(const HttpRequest& request);
// The body goes to `sink` (only for a 2xx status; other bodies are kept in `body` for the error).
HttpResponse http_request(const HttpRequest& request, const BodySink& sink);

// "%2F"-style quoting of everything but unreserved characters (RFC 3986), as urllib's
// quote(text, safe="") does; `keep` names extra characters left as they are (e.g. "/").
std::string url_quote(const std::string& text, const std::string& keep = "");

}  // namespace finetune
