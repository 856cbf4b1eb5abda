// A scope of template variables: the render context, the template's top level, a loop iteration,
// a macro call, a block. Lookups walk outwards through `parent`.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "value.h"

namespace finetune::jinja {

struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> variables;

  const Value* find(const std::string& name) const {
    for (const auto& variable : variables) {
      if (variable.first == name) return &variable.second;
    }
    return nullptr;
  }

  void set(const std::string& name, Value value) {
    for (auto& variable : variables) {
      if (variable.first == name) {
        variable.second = std::move(value);
        return;
      }
    }
    variables.emplace_back(name, std::move(value));
  }
};

}  // namespace finetune::jinja
