// Translation of a glob into NFA states, component by component as glob_translate does (its regex
// for each construct is noted beside it), and the one-pass match.
#include "path_glob.h"

#include <algorithm>
#include <stdexcept>

namespace finetune {
namespace {

using Bytes = std::bitset<256>;

Bytes byte_set(unsigned char c) {
  Bytes bytes;
  bytes.set(c);
  return bytes;
}

Bytes any_byte() { return Bytes().set(); }  // [\s\S]: '.' under re.DOTALL
Bytes not_slash() { return any_byte().reset(static_cast<unsigned char>('/')); }  // [^/]

GlobStep one(const Bytes& bytes) { return {GlobStep::kOne, bytes}; }
GlobStep run(const Bytes& bytes) { return {GlobStep::kRun, bytes}; }

// The bytes of a bracket expression's inside ("[" and "]" stripped): '!' first negates; a '-'
// between two characters is a range, first or last it is literal.
Bytes class_bytes(const std::string& inside, const std::string& pattern) {
  Bytes bytes;
  const size_t first = !inside.empty() && inside[0] == '!' ? 1 : 0;
  for (size_t k = first; k < inside.size(); ++k) {
    const auto low = static_cast<unsigned char>(inside[k]);
    if (k + 2 < inside.size() && inside[k + 1] == '-') {
      const auto high = static_cast<unsigned char>(inside[k + 2]);
      if (high < low) throw std::invalid_argument("glob " + pattern + ": the range " + inside.substr(k, 3) + " is reversed");
      for (unsigned c = low; c <= high; ++c) bytes.set(c);
      k += 2;
    } else {
      bytes.set(low);
    }
  }
  return first == 1 ? ~bytes : bytes;
}

// One path component without "**": '*' ([^/]*), '?' ([^/]), '[...]' and literal characters.
void translate_component(const std::string& part, const std::string& pattern, std::vector<GlobStep>& steps) {
  for (size_t i = 0; i < part.size(); ++i) {
    const char c = part[i];
    if (c == '*') {
      const bool after_star = !steps.empty() && steps.back().kind == GlobStep::kRun;
      if (!after_star) steps.push_back(run(not_slash()));  // "**" inside a component: one star
    } else if (c == '?') {
      steps.push_back(one(not_slash()));
    } else if (c == '[') {
      size_t j = i + 1;
      if (j < part.size() && part[j] == '!') ++j;
      if (j < part.size() && part[j] == ']') ++j;
      while (j < part.size() && part[j] != ']') ++j;
      if (j >= part.size()) {  // no closing bracket: a literal '['
        steps.push_back(one(byte_set('[')));
        continue;
      }
      steps.push_back(one(class_bytes(part.substr(i + 1, j - i - 1), pattern)));
      i = j;
    } else {
      steps.push_back(one(byte_set(static_cast<unsigned char>(c))));
    }
  }
}

std::vector<std::string> split_components(const std::string& pattern) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t slash; (slash = pattern.find('/', start)) != std::string::npos; start = slash + 1)
    parts.push_back(pattern.substr(start, slash - start));
  parts.push_back(pattern.substr(start));
  return parts;
}

std::vector<GlobStep> translate(const std::string& pattern) {
  const std::vector<std::string> parts = split_components(pattern);
  std::vector<GlobStep> steps;
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    const std::string& part = parts[i];
    if (part == "*") {  // [^/]+
      steps.push_back(one(not_slash()));
      steps.push_back(run(not_slash()));
    } else if (part == "**" && last) {  // [\s\S]*
      steps.push_back(run(any_byte()));
      continue;
    } else if (part == "**") {  // (?:[\s\S]+/)?
      steps.push_back({GlobStep::kOptional, Bytes(), steps.size() + 4});
      steps.push_back(one(any_byte()));
      steps.push_back(run(any_byte()));
      steps.push_back(one(byte_set('/')));
      continue;
    } else {
      if (part.find("**") != std::string::npos)
        throw std::invalid_argument("glob " + pattern + ": '**' can only be an entire path component");
      translate_component(part, pattern, steps);
    }
    if (!last) steps.push_back(one(byte_set('/')));
  }
  return steps;
}

// The live states at one position of the path, each once.
class LiveStates {
 public:
  explicit LiveStates(const std::vector<GlobStep>& steps) : steps_(steps), added_at_(steps.size() + 1, kNever) {}

  void clear(size_t position) {
    position_ = position;
    states_.clear();
  }
  // `state` and every state it reaches without consuming a byte (moves that only go forward).
  void add(size_t state) {
    pending_.push_back(state);
    while (!pending_.empty()) {
      const size_t reached = pending_.back();
      pending_.pop_back();
      if (added_at_[reached] == position_) continue;
      added_at_[reached] = position_;
      states_.push_back(reached);
      if (reached == steps_.size() || steps_[reached].kind == GlobStep::kOne) continue;
      pending_.push_back(reached + 1);
      if (steps_[reached].kind == GlobStep::kOptional) pending_.push_back(steps_[reached].skip_to);
    }
  }
  const std::vector<size_t>& states() const { return states_; }

 private:
  static constexpr size_t kNever = static_cast<size_t>(-1);
  const std::vector<GlobStep>& steps_;
  size_t position_ = 0;
  std::vector<size_t> states_, pending_;
  std::vector<size_t> added_at_;  // per state: the position it was last added at
};

}  // namespace

PathGlob::PathGlob(const std::string& pattern) : steps_(translate(pattern)) {}

bool PathGlob::matches(const std::string& path) const {
  const size_t accept = steps_.size();
  LiveStates first(steps_), second(steps_);
  LiveStates *live = &first, *next = &second;
  live->clear(0);
  live->add(0);
  for (size_t position = 1; position <= path.size(); ++position) {
    const auto byte = static_cast<unsigned char>(path[position - 1]);
    next->clear(position);
    for (const size_t state : live->states())
      if (state != accept && steps_[state].bytes.test(byte))
        next->add(steps_[state].kind == GlobStep::kRun ? state : state + 1);
    if (next->states().empty()) return false;
    std::swap(live, next);
  }
  const auto& last = live->states();
  return std::find(last.begin(), last.end(), accept) != last.end();
}

}  // namespace finetune
