// jinja2's `loop` variable inside {% for %}: index/index0, revindex/revindex0, first/last, length,
// previtem/nextitem, depth/depth0, cycle(...) and changed(...).
#pragma once

#include <memory>
#include <string>

#include "value.h"

namespace finetune::jinja {

class LoopContext : public Object, public std::enable_shared_from_this<LoopContext> {
 public:
  explicit LoopContext(ValueList items) : items_(std::move(items)) {}

  size_t length() const { return items_.size(); }
  const Value& item(size_t index) const { return items_[index]; }
  void set_index(size_t index0) { index0_ = index0; }

  std::string type_name() const override { return "LoopContext"; }
  std::string repr() const override;
  Value attribute(const std::string& name) const override;
  bool callable() const override { return true; }  // in jinja2, for recursive loops
  Value call(Renderer& renderer, Arguments& args) const override;

  void release() override {
    items_.clear();
    index0_ = 0;
    released_ = true;
    last_changed_ = Value();
  }

  Value cycle(const Arguments& args) const;
  Value changed(const Arguments& args);

 private:
  ValueList items_;
  size_t index0_ = 0;
  bool changed_called_ = false;
  bool released_ = false;
  Value last_changed_;
};

}  // namespace finetune::jinja
