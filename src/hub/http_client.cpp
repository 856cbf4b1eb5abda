#include "finetune/hub/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>

namespace finetune {
namespace {

// libcurl's process-wide set-up, done once before the first handle (a function-local static:
// thread-safe, and nothing else in the process changes it).
void ensure_curl_initialised() {
  static const CURLcode init = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (init != CURLE_OK) throw Error(std::string("libcurl could not initialise: ") + curl_easy_strerror(init));
}

struct Transfer {
  const BodySink* sink = nullptr;
  HttpResponse response;
  std::exception_ptr sink_error;
  std::FILE* upload = nullptr;
  bool head = false;          // a HEAD request: its Content-Length describes a body not sent
  int64_t sink_limit = -1;    // the bound of a body streamed to the sink (HttpRequest::max_body_bytes)
  int64_t body_bytes = 0;     // of the current response
  int64_t body_limit = 0;     // the bound that stopped it, when too_large
  int64_t announced = -1;     // its Content-Length, when that is what was too large
  bool too_large = false;
};

bool is_success(long status) { return status >= 200 && status < 300; }

// The bound of the current response's body: the caller's for what goes to the sink, else what is
// kept in memory.
int64_t current_limit(const Transfer& transfer) {
  const bool to_sink = transfer.sink != nullptr && is_success(transfer.response.status);
  return to_sink ? transfer.sink_limit : kMaxInMemoryBody;
}

// Stops the transfer (the callback's return value) once a body is over its bound.
size_t refuse(Transfer& transfer, int64_t limit, int64_t announced) {
  transfer.too_large = true;
  transfer.body_limit = limit;
  transfer.announced = announced;
  return 0;
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto& transfer = *static_cast<Transfer*>(user);
  const std::string line(data, size * count);
  if (line.rfind("HTTP/", 0) == 0) transfer.body_bytes = 0;  // a new response (after a redirect or a 100 Continue)
  const std::string name = apply_header_line(line, transfer.response);
  // A length over the bound is refused before the body (as CURLOPT_MAXFILESIZE_LARGE would, but
  // only for the body it bounds: a redirect's or an error's may be longer).
  const int64_t limit = current_limit(transfer);
  if (name == "content-length" && limit >= 0 && !transfer.head) {
    const long long length = std::strtoll(transfer.response.headers[name].c_str(), nullptr, 10);
    if (length > limit) return refuse(transfer, limit, length);
  }
  return size * count;
}

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto& transfer = *static_cast<Transfer*>(user);
  const size_t bytes = size * count;
  const long status = transfer.response.status;
  transfer.body_bytes += static_cast<int64_t>(bytes);
  const int64_t limit = current_limit(transfer);
  if (limit >= 0 && transfer.body_bytes > limit) return refuse(transfer, limit, -1);
  if (transfer.sink != nullptr && is_success(status)) {
    try {
      return (*transfer.sink)(transfer.response, data, bytes) ? bytes : 0;
    } catch (...) {
      transfer.sink_error = std::current_exception();
      return 0;
    }
  }
  transfer.response.body.append(data, bytes);
  return bytes;
}

size_t on_upload_read(char* buffer, size_t size, size_t count, void* user) {
  auto& transfer = *static_cast<Transfer*>(user);
  return std::fread(buffer, 1, size * count, transfer.upload);
}

TransportError transport_error(CURLcode code, const std::string& url, const char* detail) {
  using Kind = TransportError::Kind;
  Kind kind = Kind::Other;
  std::string what;
  switch (code) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY: kind = Kind::Dns, what = "cannot resolve the host name (DNS)"; break;
    case CURLE_COULDNT_CONNECT: kind = Kind::Connect, what = "cannot connect (no network, or nothing listening)"; break;
    case CURLE_OPERATION_TIMEDOUT: kind = Kind::Timeout, what = "timed out"; break;
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING: kind = Kind::Reset, what = "connection reset"; break;
    case CURLE_PARTIAL_FILE: kind = Kind::Truncated, what = "connection closed before the whole body arrived"; break;
    case CURLE_UNSUPPORTED_PROTOCOL: what = "refused a URL (or a redirect to one) that is not http:// or https://"; break;
    default: what = curl_easy_strerror(code);
  }
  std::string message = what + " (" + url;
  if (detail != nullptr && *detail != '\0') message += ": " + std::string(detail);
  return TransportError(kind, message + ")");
}

TransportError too_large_error(const HttpRequest& request, const Transfer& transfer) {
  std::string what = "the answer is larger than the " + std::to_string(transfer.body_limit) + " bytes expected (";
  what += transfer.announced >= 0 ? "its Content-Length is " + std::to_string(transfer.announced)
                                  : "more arrived";
  return TransportError(TransportError::Kind::TooLarge, what + "; " + request.url + ")");
}

TransportError deadline_error(const HttpRequest& request) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%g", request.deadline_s);
  return TransportError(TransportError::Kind::Deadline,
                        "the request did not finish within its deadline of " + std::string(seconds) + " s (" +
                            request.url + ")");
}

// Limits every request shares: protocols, redirects and timeouts (body bounds: on_header, on_body).
void set_bounds(CURL* curl, const HttpRequest& request) {
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, request.follow_redirects ? 1L : 0L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(request.connect_timeout_s * 1000));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, std::max(1L, static_cast<long>(std::ceil(request.stall_timeout_s))));
  if (request.deadline_s > 0) {
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, std::max(1L, static_cast<long>(request.deadline_s * 1000)));
  }
}

}  // namespace

std::string apply_header_line(std::string line, HttpResponse& response) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  if (line.rfind("HTTP/", 0) == 0) {
    response.headers.clear();
    const auto space = line.find(' ');
    response.status = space == std::string::npos ? 0 : std::strtol(line.c_str() + space + 1, nullptr, 10);
    return "";
  }
  const auto colon = line.find(':');
  if (colon == std::string::npos) return "";
  std::string value = line.substr(colon + 1);
  const auto first = value.find_first_not_of(" \t");
  value = first == std::string::npos ? "" : value.substr(first);
  const std::string name = lower(line.substr(0, colon));
  response.headers[name] = value;
  return name;
}

std::string HttpResponse::header(const std::string& lower_case_name) const {
  const auto it = headers.find(lower_case_name);
  return it == headers.end() ? "" : it->second;
}

HttpResponse http_request(const HttpRequest& request) { return http_request(request, BodySink()); }

HttpResponse http_request(const HttpRequest& request, const BodySink& sink) {
  ensure_curl_initialised();
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> handle(curl_easy_init(), curl_easy_cleanup);
  if (!handle) throw Error("libcurl: cannot create a handle for " + request.url);
  CURL* curl = handle.get();
  Transfer transfer;
  if (sink) transfer.sink = &sink;
  transfer.sink_limit = request.max_body_bytes;
  transfer.head = request.method == "HEAD";
  char error_text[CURL_ERROR_SIZE] = {0};

  curl_easy_setopt(curl, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error_text);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "finetune/0.1");
  set_bounds(curl, request);

  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(nullptr, curl_slist_free_all);
  for (const auto& [name, value] : request.headers) {
    headers.reset(curl_slist_append(headers.release(), (name + ": " + value).c_str()));
  }
  // No "Expect: 100-continue" round trip before a body.
  headers.reset(curl_slist_append(headers.release(), "Expect:"));
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers.get());

  std::unique_ptr<std::FILE, decltype(&std::fclose)> upload(nullptr, std::fclose);
  if (request.method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (!request.body_file.empty()) {
    upload.reset(std::fopen(request.body_file.c_str(), "rb"));
    if (!upload) throw Error(request.body_file + ": cannot open for upload");
    std::fseek(upload.get(), 0, SEEK_END);
    const long size = std::ftell(upload.get());
    std::rewind(upload.get());
    transfer.upload = upload.get();
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_READFUNCTION, on_upload_read);
    curl_easy_setopt(curl, CURLOPT_READDATA, &transfer);
    curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(size));
    if (request.method != "PUT") curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  } else if (request.method == "POST" || request.method == "PUT") {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
    if (request.method == "PUT") curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, "PUT");
  } else if (request.method != "GET") {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  }

  const CURLcode code = curl_easy_perform(curl);
  if (transfer.sink_error) std::rethrow_exception(transfer.sink_error);
  if (transfer.too_large) throw too_large_error(request, transfer);
  if (code == CURLE_WRITE_ERROR && transfer.sink != nullptr) throw Error("transfer of " + request.url + " stopped");
  if (code == CURLE_OPERATION_TIMEDOUT && request.deadline_s > 0) {
    double elapsed = 0;
    curl_easy_getinfo(curl, CURLINFO_TOTAL_TIME, &elapsed);
    if (elapsed >= request.deadline_s * 0.95) throw deadline_error(request);
  }
  if (code != CURLE_OK) throw transport_error(code, request.url, error_text);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &transfer.response.status);
  char* effective = nullptr;
  curl_easy_getinfo(curl, CURLINFO_EFFECTIVE_URL, &effective);
  transfer.response.url = effective != nullptr ? effective : request.url;
  return std::move(transfer.response);
}

std::string url_quote(const std::string& text, const std::string& keep) {
  static const char* const hex = "0123456789ABCDEF";
  std::string out;
  for (const unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || keep.find(static_cast<char>(c)) != std::string::npos) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace finetune
