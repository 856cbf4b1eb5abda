#include "lexer.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "finetune/template/template.h"
#include "python_text.h"

namespace finetune::jinja {
namespace {

// Python's str.isspace() on the UTF-8 sequence at `pos`; its length in `size`.
bool space_at(const std::string& s, size_t pos, size_t* size) {
  const auto lead = static_cast<unsigned char>(s[pos]);
  if (lead < 0x80) {
    *size = 1;
    return is_python_space(lead);
  }
  size_t len = 1;
  while (pos + len < s.size() && len < 4 && (static_cast<unsigned char>(s[pos + len]) & 0xC0) == 0x80) ++len;
  *size = len;
  const std::vector<char32_t> cps = decode_utf8(s.substr(pos, len));
  return cps.size() == 1 && is_python_space(cps[0]);
}

// End of the run of whitespace starting at `pos` (regex \s*).
size_t skip_space(const std::string& s, size_t pos) {
  size_t size = 0;
  while (pos < s.size() && space_at(s, pos, &size)) pos += size;
  return pos;
}

// Python's str.rstrip() (Unicode whitespace), returning the new length.
size_t rstrip_length(const std::string& s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t size = 0;
    if (!space_at(s, start, &size) || start + size != end) break;
    end = start;
  }
  return end;
}

bool all_space(const std::string& s, size_t from) {
  if (from >= s.size()) return false;  // \s+ needs one character
  return skip_space(s, from) == s.size();
}

bool is_name_start(unsigned char c) { return std::isalpha(c) || c == '_' || c >= 0x80; }
bool is_name_char(unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; }

// Operators, longest first.
const char* const kOperators[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(",
                                  ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};

class Lexer {
 public:
  Lexer(std::string source, const std::string& name) : source_(std::move(source)), name_(name) {}

  std::vector<Token> run() {
    while (pos_ < source_.size()) lex_text();
    tokens_.push_back(Token{TokenType::End, "", line_});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(const std::string& message) const { throw TemplateError(name_, line_, message); }

  bool at(size_t pos, const char* text) const { return source_.compare(pos, std::strlen(text), text) == 0; }

  void advance_to(size_t pos) {
    for (size_t i = pos_; i < pos; ++i) line_ += source_[i] == '\n';
    pos_ = pos;
  }

  void emit(TokenType type, std::string text = "") { tokens_.push_back(Token{type, std::move(text), line_}); }

  // Text up to the next tag, whitespace control applied to it, then the tag.
  void lex_text() {
    size_t tag = pos_;
    while (true) {
      tag = source_.find('{', tag);
      if (tag == std::string::npos || tag + 1 >= source_.size()) {
        emit_text(source_.substr(pos_), line_);
        advance_to(source_.size());
        return;
      }
      const char kind = source_[tag + 1];
      if (kind == '{' || kind == '%' || kind == '#') break;
      ++tag;
    }
    const char kind = source_[tag + 1];
    const char sign = tag + 2 < source_.size() && (source_[tag + 2] == '-' || source_[tag + 2] == '+')
                          ? source_[tag + 2] : '\0';
    const size_t raw_end = kind == '%' ? match_raw_begin(tag) : 0;
    std::string text = source_.substr(pos_, tag - pos_);
    text = strip_before_tag(std::move(text), sign, kind != '{');
    const size_t text_line = line_;
    emit_text(std::move(text), text_line);
    advance_to(tag);
    line_starting_ = false;
    if (raw_end != 0) {
      advance_to(raw_end);
      line_starting_ = source_[raw_end - 1] == '\n';
      lex_raw_body();
    } else if (kind == '#') {
      advance_to(tag + 2 + (sign ? 1 : 0));
      lex_comment();
    } else {
      advance_to(tag + 2 + (sign ? 1 : 0));
      lex_tag(kind == '{');
    }
  }

  void emit_text(std::string text, size_t line) {
    if (!text.empty()) tokens_.push_back(Token{TokenType::Text, std::move(text), line});
  }

  // "-" strips all whitespace before the tag; otherwise lstrip_blocks removes the spaces before a
  // block or comment tag that is alone on its line so far ("+" disables that).
  std::string strip_before_tag(std::string text, char sign, bool lstrip_applies) const {
    if (sign == '-') {
      text.resize(rstrip_length(text));
      return text;
    }
    if (sign == '+' || !lstrip_applies) return text;
    const size_t newline = text.rfind('\n');
    const size_t line_start = newline == std::string::npos ? 0 : newline + 1;
    if ((line_start > 0 || line_starting_) && all_space(text, line_start)) text.resize(line_start);
    return text;
  }

  // "{%" [-+] \s* "raw" \s* ("-%}" \s* | "%}"): the position after it, or 0.
  size_t match_raw_begin(size_t tag) const {
    size_t p = tag + 2;
    if (p < source_.size() && (source_[p] == '-' || source_[p] == '+')) ++p;
    p = skip_space(source_, p);
    if (!at(p, "raw")) return 0;
    p = skip_space(source_, p + 3);
    if (at(p, "-%}")) return skip_space(source_, p + 3);
    if (at(p, "%}")) return p + 2;
    return 0;
  }

  // Raw content up to {% endraw %}, which takes the same whitespace control as a block tag.
  void lex_raw_body() {
    for (size_t p = source_.find("{%", pos_); p != std::string::npos; p = source_.find("{%", p + 1)) {
      size_t q = p + 2;
      char sign = '\0';
      if (q < source_.size() && (source_[q] == '-' || source_[q] == '+')) sign = source_[q++];
      q = skip_space(source_, q);
      if (!at(q, "endraw")) continue;
      q = skip_space(source_, q + 6);
      size_t end = 0;
      if (at(q, "+%}")) {
        end = q + 3;
      } else if (at(q, "-%}")) {
        end = skip_space(source_, q + 3);
      } else if (at(q, "%}")) {
        end = q + 2 + (at(q + 2, "\n") ? 1 : 0);
      } else {
        continue;
      }
      std::string text = strip_before_tag(source_.substr(pos_, p - pos_), sign, true);
      emit_text(std::move(text), line_);
      advance_to(end);
      line_starting_ = source_[end - 1] == '\n';
      return;
    }
    fail("Missing end of raw directive");
  }

  void lex_comment() {
    for (size_t p = source_.find("#}", pos_); p != std::string::npos; p = source_.find("#}", p + 1)) {
      size_t end;
      if (p > pos_ && source_[p - 1] == '-') {
        end = skip_space(source_, p + 2);
      } else if (p > pos_ && source_[p - 1] == '+') {
        end = p + 2;
      } else {
        end = p + 2 + (at(p + 2, "\n") ? 1 : 0);
      }
      advance_to(end);
      line_starting_ = source_[end - 1] == '\n';
      return;
    }
    fail("Missing end of comment tag");
  }

  // Inside {{ }} or {% %}: tokens until the end tag, which counts only outside brackets.
  void lex_tag(bool variable) {
    emit(variable ? TokenType::VariableBegin : TokenType::BlockBegin);
    std::vector<char> brackets;
    while (true) {
      if (pos_ >= source_.size()) fail(variable ? "unexpected end of template, expected '}}'" :
                                                 "unexpected end of template, expected '%}'");
      if (brackets.empty() && match_tag_end(variable)) return;
      size_t space = 0;
      if (space_at(source_, pos_, &space)) {
        advance_to(skip_space(source_, pos_));
        continue;
      }
      if (lex_number() || lex_name() || lex_string()) continue;
      lex_operator(brackets);
    }
  }

  bool match_tag_end(bool variable) {
    size_t end = 0;
    if (variable) {
      if (at(pos_, "-}}")) {
        end = skip_space(source_, pos_ + 3);
      } else if (at(pos_, "}}")) {
        end = pos_ + 2;
      }
    } else if (at(pos_, "+%}")) {
      end = pos_ + 3;
    } else if (at(pos_, "-%}")) {
      end = skip_space(source_, pos_ + 3);
    } else if (at(pos_, "%}")) {
      end = pos_ + 2 + (at(pos_ + 2, "\n") ? 1 : 0);  // trim_blocks
    }
    if (end == 0) return false;
    emit(variable ? TokenType::VariableEnd : TokenType::BlockEnd);
    advance_to(end);
    line_starting_ = source_[end - 1] == '\n';
    return true;
  }

  // Digits with single "_" separators between them; returns the end (start when none).
  size_t digits_end(size_t p, int base) const {
    auto is_digit = [base](char c) {
      if (base == 16) return std::isxdigit(static_cast<unsigned char>(c)) != 0;
      return c >= '0' && c < static_cast<char>('0' + base);
    };
    if (p >= source_.size() || !is_digit(source_[p])) return p;
    size_t q = p + 1;
    while (q < source_.size()) {
      if (is_digit(source_[q])) {
        ++q;
      } else if (source_[q] == '_' && q + 1 < source_.size() && is_digit(source_[q + 1])) {
        q += 2;
      } else {
        break;
      }
    }
    return q;
  }

  // jinja2 tries floats before integers; a float never follows a ".".
  bool lex_number() {
    const char c = source_[pos_];
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    if (!(pos_ > 0 && source_[pos_ - 1] == '.')) {
      const size_t int_end = digits_end(pos_, 10);
      size_t end = int_end;
      bool is_float = false;
      if (at(end, ".") && digits_end(end + 1, 10) > end + 1) {
        end = digits_end(end + 1, 10);
        is_float = true;
      }
      if (end < source_.size() && (source_[end] == 'e' || source_[end] == 'E')) {
        size_t q = end + 1;
        if (q < source_.size() && (source_[q] == '+' || source_[q] == '-')) ++q;
        if (digits_end(q, 10) > q) {
          end = digits_end(q, 10);
          is_float = true;
        }
      }
      if (is_float) {
        std::string text = source_.substr(pos_, end - pos_);
        text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
        Token token{TokenType::Float, text, line_};
        token.number = std::strtod(text.c_str(), nullptr);
        tokens_.push_back(std::move(token));
        advance_to(end);
        return true;
      }
    }
    int base = 10;
    size_t start = pos_;
    size_t end;
    const char prefix = pos_ + 1 < source_.size() ? static_cast<char>(std::tolower(source_[pos_ + 1])) : '\0';
    if (c == '0' && (prefix == 'b' || prefix == 'o' || prefix == 'x')) {
      base = prefix == 'b' ? 2 : (prefix == 'o' ? 8 : 16);
      start = pos_ + 2;
      if (at(start, "_")) ++start;  // 0x_1F
      end = digits_end(start, base);
      if (end == start) {  // "0x" alone: the integer 0, then a name
        base = 10;
        start = pos_;
        end = pos_ + 1;
      }
    } else if (c == '0') {
      end = pos_ + 1;  // 0(_?0)*
      while (end < source_.size()) {
        if (source_[end] == '0') {
          ++end;
        } else if (source_[end] == '_' && at(end + 1, "0")) {
          end += 2;
        } else {
          break;
        }
      }
    } else {
      end = digits_end(pos_, 10);
    }
    std::string digits = source_.substr(start, end - start);
    digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
    Token token{TokenType::Integer, source_.substr(pos_, end - pos_), line_};
    errno = 0;
    const unsigned long long value = std::strtoull(digits.c_str(), nullptr, base);
    if (errno == ERANGE || value > static_cast<unsigned long long>(INT64_MAX)) {
      fail("integer literal " + token.text + " does not fit in 64 bits");
    }
    token.integer = static_cast<int64_t>(value);
    tokens_.push_back(std::move(token));
    advance_to(end);
    return true;
  }

  bool lex_name() {
    if (!is_name_start(static_cast<unsigned char>(source_[pos_]))) return false;
    size_t end = pos_ + 1;
    while (end < source_.size() && is_name_char(static_cast<unsigned char>(source_[end]))) ++end;
    emit(TokenType::Name, source_.substr(pos_, end - pos_));
    advance_to(end);
    return true;
  }

  bool lex_string() {
    const char quote = source_[pos_];
    if (quote != '\'' && quote != '"') return false;
    size_t p = pos_ + 1;
    while (p < source_.size() && source_[p] != quote) p += source_[p] == '\\' ? 2 : 1;
    if (p >= source_.size()) fail(std::string("unexpected char '") + quote + "'");  // unterminated
    Token token{TokenType::String, unescape(source_.substr(pos_ + 1, p - pos_ - 1)), line_};
    tokens_.push_back(std::move(token));
    advance_to(p + 1);
    return true;
  }

  // jinja2 decodes a literal with .encode("ascii", "backslashreplace").decode("unicode-escape"):
  // non-ASCII characters become \x/\u/\U escapes first, then Python's escapes are decoded.
  std::string unescape(const std::string& raw) const {
    std::string ascii;
    for (const char32_t c : decode_utf8(raw)) {
      if (c < 0x80) {
        ascii += static_cast<char>(c);
      } else {
        char buffer[16];
        if (c <= 0xFF) {
          std::snprintf(buffer, sizeof(buffer), "\\x%02x", static_cast<unsigned>(c));
        } else if (c <= 0xFFFF) {
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", static_cast<unsigned>(c));
        } else {
          std::snprintf(buffer, sizeof(buffer), "\\U%08x", static_cast<unsigned>(c));
        }
        ascii += buffer;
      }
    }
    std::string out;
    for (size_t i = 0; i < ascii.size(); ++i) {
      const char c = ascii[i];
      if (c != '\\' || i + 1 >= ascii.size()) {
        append_utf8(out, static_cast<unsigned char>(c));
        if (c == '\\') fail("\\ at end of string");
        continue;
      }
      const char e = ascii[++i];
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t width = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          uint32_t code = 0;
          for (size_t k = 1; k <= width; ++k) {
            if (i + k >= ascii.size() || !std::isxdigit(static_cast<unsigned char>(ascii[i + k]))) {
              fail(std::string("truncated \\") + e + std::string(width, 'X') + " escape");
            }
            code = code * 16 + static_cast<uint32_t>(std::stoi(std::string(1, ascii[i + k]), nullptr, 16));
          }
          if (code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) fail("illegal Unicode character");
          append_utf8(out, code);
          i += width;
          break;
        }
        case 'N': fail("\\N{...} escapes are not supported");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t code = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i + 1 < ascii.size() && ascii[i + 1] >= '0' && ascii[i + 1] <= '7'; ++k) {
              code = code * 8 + static_cast<uint32_t>(ascii[++i] - '0');
            }
            append_utf8(out, code);
          } else {
            out += '\\';  // unknown escapes stay as written
            out += e;
          }
      }
    }
    return out;
  }

  void lex_operator(std::vector<char>& brackets) {
    for (const char* op : kOperators) {
      if (!at(pos_, op)) continue;
      const std::string text(op);
      if (text == "(" || text == "[" || text == "{") {
        brackets.push_back(text == "(" ? ')' : (text == "[" ? ']' : '}'));
      } else if (text == ")" || text == "]" || text == "}") {
        if (brackets.empty()) fail("unexpected '" + text + "'");
        if (brackets.back() != text[0]) fail("unexpected '" + text + "', expected '" + brackets.back() + "'");
        brackets.pop_back();
      }
      emit(TokenType::Operator, text);
      advance_to(pos_ + text.size());
      return;
    }
    fail("unexpected char '" + source_.substr(pos_, 1) + "'");
  }

  std::string source_;
  const std::string& name_;
  size_t pos_ = 0;
  size_t line_ = 1;
  bool line_starting_ = true;  // the last thing lexed ended with a newline (or nothing was lexed)
  std::vector<Token> tokens_;
};

// Line endings become \n, and one trailing newline is dropped (keep_trailing_newline=False).
std::string normalize_newlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::vector<Token> tokenize(const std::string& source, const std::string& template_name) {
  return Lexer(normalize_newlines(source), template_name).run();
}

}  // namespace finetune::jinja
