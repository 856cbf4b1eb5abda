#include "loop_context.h"

namespace finetune::jinja {
namespace {

// loop.cycle / loop.changed, bound to their loop.
class LoopMethod : public Object {
 public:
  LoopMethod(std::shared_ptr<LoopContext> loop, std::string name) : loop_(std::move(loop)), name_(std::move(name)) {}

  std::string type_name() const override { return "method"; }
  std::string repr() const override { return "<bound method LoopContext." + name_ + ">"; }
  bool callable() const override { return true; }
  Value call(Renderer&, Arguments& args) const override {
    return name_ == "cycle" ? loop_->cycle(args) : loop_->changed(args);
  }

 private:
  std::shared_ptr<LoopContext> loop_;
  std::string name_;
};

}  // namespace

std::string LoopContext::repr() const {
  return "<LoopContext " + std::to_string(index0_ + 1) + "/" + std::to_string(items_.size()) + ">";
}

Value LoopContext::attribute(const std::string& name) const {
  if (released_ && name != "cycle" && name != "changed") {
    return Value::undefined("the loop of this loop object has ended");
  }
  const auto length = static_cast<int64_t>(items_.size());
  const auto index0 = static_cast<int64_t>(index0_);
  if (name == "index0") return Value::integer(index0);
  if (name == "index") return Value::integer(index0 + 1);
  if (name == "revindex0") return Value::integer(length - index0 - 1);
  if (name == "revindex") return Value::integer(length - index0);
  if (name == "first") return Value::boolean(index0 == 0);
  if (name == "last") return Value::boolean(index0 + 1 == length);
  if (name == "length") return Value::integer(length);
  if (name == "depth") return Value::integer(1);
  if (name == "depth0") return Value::integer(0);
  if (name == "previtem") {
    return index0 == 0 ? Value::undefined("there is no previous item") : items_[index0_ - 1];
  }
  if (name == "nextitem") {
    return index0 + 1 >= length ? Value::undefined("there is no next item") : items_[index0_ + 1];
  }
  if (name == "cycle" || name == "changed") {
    auto self = std::const_pointer_cast<LoopContext>(shared_from_this());
    return Value::object(std::make_shared<LoopMethod>(std::move(self), name));
  }
  return Object::attribute(name);
}

Value LoopContext::call(Renderer&, Arguments&) const {
  throw RenderFailure("Tried to call non recursive loop. Maybe you forgot the 'recursive' modifier.");
}

Value LoopContext::cycle(const Arguments& args) const {
  if (released_) throw RenderFailure("loop.cycle() called after its loop ended");
  if (args.positional.empty()) throw RenderFailure("no items for cycling given");
  return args.positional[index0_ % args.positional.size()];
}

Value LoopContext::changed(const Arguments& args) {
  if (released_) throw RenderFailure("loop.changed() called after its loop ended");
  const Value value = Value::tuple(args.positional);
  if (changed_called_ && python_equal(value, last_changed_)) return Value::boolean(false);
  changed_called_ = true;
  last_changed_ = value;
  return Value::boolean(true);
}

}  // namespace finetune::jinja
