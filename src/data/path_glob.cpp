// Translation of a glob into an ECMAScript regex, component by component as glob_translate does.
#include "path_glob.h"

#include <stdexcept>
#include <vector>

namespace finetune {
namespace {

const char* const kAnyChar = "[\\s\\S]";  // Python's '.' under re.DOTALL

std::string escaped(char c) {
  static const std::string special = "\\^$.|?*+()[]{}";
  return special.find(c) == std::string::npos ? std::string(1, c) : "\\" + std::string(1, c);
}

// One path component without "**": '*', '?', '[...]' and literal characters.
std::string translate_component(const std::string& part) {
  std::string out;
  for (size_t i = 0; i < part.size(); ++i) {
    const char c = part[i];
    if (c == '*') {
      if (out.size() < 5 || out.compare(out.size() - 5, 5, "[^/]*") != 0) out += "[^/]*";  // "**" inside: one star
    } else if (c == '?') {
      out += "[^/]";
    } else if (c == '[') {
      size_t j = i + 1;
      if (j < part.size() && part[j] == '!') ++j;
      if (j < part.size() && part[j] == ']') ++j;
      while (j < part.size() && part[j] != ']') ++j;
      if (j >= part.size()) {  // no closing bracket: a literal '['
        out += "\\[";
        continue;
      }
      std::string stuff = part.substr(i + 1, j - i - 1);
      i = j;
      if (stuff.empty()) {
        out += "(?!)";  // an empty class never matches
        continue;
      }
      std::string cls = "[";
      size_t k = 0;
      if (stuff[0] == '!') cls += "^", k = 1;
      for (; k < stuff.size(); ++k) {
        const char d = stuff[k];
        // A '-' between two characters is a range; first or last it is literal.
        if (d == '-' && k > (stuff[0] == '!' ? 1u : 0u) && k + 1 < stuff.size()) cls += "-";
        else cls += (d == '\\' || d == ']' || d == '[' || d == '^' || d == '-') ? "\\" + std::string(1, d) : std::string(1, d);
      }
      out += cls + "]";
    } else {
      out += escaped(c);
    }
  }
  return out;
}

std::vector<std::string> split_components(const std::string& pattern) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t slash; (slash = pattern.find('/', start)) != std::string::npos; start = slash + 1)
    parts.push_back(pattern.substr(start, slash - start));
  parts.push_back(pattern.substr(start));
  return parts;
}

std::string translate(const std::string& pattern) {
  const std::vector<std::string> parts = split_components(pattern);
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    const std::string& part = parts[i];
    if (part == "*") {
      out += last ? "[^/]+" : "[^/]+/";
    } else if (part == "**") {
      out += last ? std::string(kAnyChar) + "*" : "(?:" + std::string(kAnyChar) + "+/)?";
    } else {
      if (part.find("**") != std::string::npos)
        throw std::invalid_argument("glob " + pattern + ": '**' can only be an entire path component");
      out += translate_component(part);
      if (!last) out += "/";
    }
  }
  return out;
}

}  // namespace

PathGlob::PathGlob(const std::string& pattern) : regex_(translate(pattern)) {}

}  // namespace finetune
