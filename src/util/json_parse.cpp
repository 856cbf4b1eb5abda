// Depth-limited JSON parsing (see Note [JSON nesting limit] in json_parse.h).
#include "finetune/util/json_parse.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

namespace finetune {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// Builds the DOM from nlohmann's SAX events, one container at a time, and stops the parse (returns
// false) at the first container that would be deeper than kMaxJsonDepth or at a syntax error.
// Only the chain of open containers is held: a container receives elements only while it is the
// innermost open one, so the pointers to its ancestors stay valid.
template <typename Json>
class DepthLimitedBuilder : public nlohmann::json_sax<Json> {
  using json = Json;
  using number_integer_t = typename Json::number_integer_t;
  using number_unsigned_t = typename Json::number_unsigned_t;
  using number_float_t = typename Json::number_float_t;
  using string_t = typename Json::string_t;
  using binary_t = typename Json::binary_t;

 public:
  explicit DepthLimitedBuilder(const JsonKeyObserver& on_key) : on_key_(on_key) {}

  bool null() override { return add(json(nullptr)); }
  bool boolean(bool value) override { return add(json(value)); }
  bool number_integer(number_integer_t value) override { return add(json(value)); }
  bool number_unsigned(number_unsigned_t value) override { return add(json(value)); }
  bool number_float(number_float_t value, const string_t&) override { return add(json(value)); }
  bool string(string_t& value) override { return add(json(std::move(value))); }
  bool binary(binary_t& value) override { return add(json::binary(std::move(value))); }

  bool start_object(std::size_t) override { return open(json::object()); }
  bool start_array(std::size_t) override { return open(json::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& key) override {
    if (on_key_) on_key_(static_cast<int>(open_.size()), key);
    key_ = std::move(key);
    return true;
  }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& error) override {
    error_position_ = position;
    error_message_ = error.what();
    return false;
  }

  bool too_deep() const { return too_deep_; }
  std::size_t error_position() const { return error_position_; }
  const std::string& error_message() const { return error_message_; }
  json take_root() { return std::move(root_); }

 private:
  // Places `value` in the innermost open container (or as the root); returns where it went.
  json* place(json&& value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json& parent = *open_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    json& slot = parent[std::move(key_)];  // the last of duplicate keys wins, as in Python's json
    slot = std::move(value);
    return &slot;
  }
  bool add(json&& value) {
    place(std::move(value));
    return true;
  }
  bool open(json&& container) {
    if (static_cast<int>(open_.size()) >= kMaxJsonDepth) {
      too_deep_ = true;
      return false;
    }
    open_.push_back(place(std::move(container)));
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }

  const JsonKeyObserver& on_key_;
  json root_;
  std::vector<json*> open_;
  std::string key_;
  bool too_deep_ = false;
  std::size_t error_position_ = 0;
  std::string error_message_;
};

// Byte offset of the bracket that opens a container at `depth`, counting brackets outside strings
// (the text up to there parsed, so this agrees with the parser).
std::size_t offset_of_depth(std::string_view text, int depth) {
  int level = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++level == depth) return i;
    } else if (c == ']' || c == '}') {
      --level;
    }
  }
  return text.size();
}

// nlohmann's message without its "[json.exception.parse_error.101] parse error at line 1, column 2: "
// prefix (the position is reported separately).
std::string reason_of(const std::string& message) {
  std::string reason = message;
  const std::size_t tag_end = reason.find("] ");
  if (reason.rfind("[json.exception.", 0) == 0 && tag_end != std::string::npos) reason.erase(0, tag_end + 2);
  if (reason.rfind("parse error", 0) == 0) {
    const std::size_t colon = reason.find(": ");
    if (colon != std::string::npos) reason.erase(0, colon + 2);
  }
  std::replace(reason.begin(), reason.end(), '\n', ' ');
  return reason;
}

[[noreturn]] void throw_at(std::string_view text, std::size_t offset, const std::string& source,
                           const std::string& reason) {
  offset = std::min(offset, text.size());
  std::size_t line = 1;
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  throw JsonSyntaxError(source, line, offset - line_start + 1, reason);
}

}  // namespace

JsonSyntaxError::JsonSyntaxError(const std::string& source, size_t line, size_t column, const std::string& reason)
    : Error(source + ": invalid JSON at line " + std::to_string(line) + ", column " + std::to_string(column) + ": " +
            reason),
      line_(line),
      column_(column),
      reason_(reason) {}

namespace {

template <typename Json>
Json parse_with_depth_limit(std::string_view text, const std::string& source, const JsonKeyObserver& on_key) {
  DepthLimitedBuilder<Json> builder(on_key);
  if (Json::sax_parse(text.begin(), text.end(), &builder)) return builder.take_root();
  if (builder.too_deep()) {
    throw_at(text, offset_of_depth(text, kMaxJsonDepth + 1), source,
             "nests deeper than " + std::to_string(kMaxJsonDepth) + " levels of arrays and objects");
  }
  // nlohmann's position counts the bytes read, the offending one included.
  const std::size_t position = builder.error_position();
  throw_at(text, position == 0 ? 0 : position - 1, source, reason_of(builder.error_message()));
}

}  // namespace

json parse_json(std::string_view text, const std::string& source, const JsonKeyObserver& on_key) {
  return parse_with_depth_limit<json>(text, source, on_key);
}

ordered_json parse_ordered_json(std::string_view text, const std::string& source) {
  return parse_with_depth_limit<ordered_json>(text, source, nullptr);
}

json read_json_file(const std::string& path, const std::string& open_hint) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open" + (open_hint.empty() ? "" : " (" + open_hint + ")"));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return parse_json(buffer.str(), path);
}

namespace {

template <typename Json>
std::string excerpt_of(const Json& value, size_t max_chars) {
  using json = Json;
  std::string text;
  const bool long_string = value.is_string() && value.template get_ref<const std::string&>().size() > max_chars;
  if (long_string) {  // cut before dumping, so a huge string is never copied whole
    text = json(value.template get_ref<const std::string&>().substr(0, max_chars)).dump(-1, ' ', false, json::error_handler_t::replace);
  } else {
    text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  if (!long_string && text.size() <= max_chars) return text;
  std::size_t cut = std::min(max_chars, text.size());
  while (cut > 0 && cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // whole characters
  return text.substr(0, cut) + "...";
}

}  // namespace

std::string json_excerpt(const json& value, size_t max_chars) { return excerpt_of(value, max_chars); }
std::string json_excerpt(const ordered_json& value, size_t max_chars) { return excerpt_of(value, max_chars); }

}  // namespace finetune
