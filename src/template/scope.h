// A scope of template variables: the render context, the template's top level, a loop iteration,
// a macro call, a block. Lookups walk outwards through `parent`.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "value.h"

namespace finetune::jinja {

// Most scopes hold a handful of names and are searched linearly; one that grows past
// kIndexedScope names (a hostile template can assign thousands) gets a hash index.
struct Scope {
  static constexpr size_t kIndexedScope = 16;

  explicit Scope(std::shared_ptr<Scope> parent_scope = nullptr) : parent(std::move(parent_scope)) {}

  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> variables;
  std::unordered_map<std::string, size_t> index;  // name -> position in variables, once indexed

  const Value* find(const std::string& name) const {
    if (!index.empty()) {
      const auto it = index.find(name);
      return it == index.end() ? nullptr : &variables[it->second].second;
    }
    for (const auto& variable : variables) {
      if (variable.first == name) return &variable.second;
    }
    return nullptr;
  }

  void set(const std::string& name, Value value) {
    if (Value* existing = const_cast<Value*>(find(name))) {
      *existing = std::move(value);
      return;
    }
    variables.emplace_back(name, std::move(value));
    if (!index.empty()) {
      index.emplace(name, variables.size() - 1);
    } else if (variables.size() > kIndexedScope) {
      for (size_t i = 0; i < variables.size(); ++i) index.emplace(variables[i].first, i);
    }
  }
};

}  // namespace finetune::jinja
