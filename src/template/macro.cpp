#include "macro.h"

#include <algorithm>
#include <optional>

#include "python_repr.h"
#include "renderer.h"

namespace finetune::jinja {
namespace {

// A macro, or the caller of a {% call %} block. It sees the scope it was defined in; holding that
// scope weakly keeps scope -> macro -> scope from being a reference cycle.
class MacroObject : public Object {
 public:
  MacroObject(const MacroDefinition& macro, const std::shared_ptr<Scope>& closure)
      : macro_(macro), closure_(closure) {}

  std::string type_name() const override { return "Macro"; }
  std::string repr() const override { return "<Macro " + python_string_repr(macro_.name) + ">"; }
  bool callable() const override { return true; }

  Value call(Renderer& renderer, Arguments& args) const override {
    const std::shared_ptr<Scope> closure = closure_.lock();
    if (!closure) throw RenderFailure("macro '" + macro_.name + "' called after the scope that defined it ended");
    return renderer.call_macro(macro_, closure, args);
  }

  Value attribute(const std::string& name) const override {
    if (name == "name") return Value::string(macro_.name);
    if (name == "arguments") {
      ValueList params;
      for (const std::string& param : macro_.params) params.push_back(Value::string(param));
      return Value::tuple(std::move(params));
    }
    if (name == "catch_kwargs") return Value::boolean(macro_.uses_kwargs);
    if (name == "catch_varargs") return Value::boolean(macro_.uses_varargs);
    if (name == "caller") return Value::boolean(macro_.uses_caller);
    return Object::attribute(name);
  }

 private:
  const MacroDefinition& macro_;
  std::weak_ptr<Scope> closure_;
};

}  // namespace

Value macro_value(const MacroDefinition& macro, const std::shared_ptr<Scope>& closure) {
  return Value::object(std::make_shared<MacroObject>(macro, closure));
}

Value Renderer::call_macro(const MacroDefinition& macro, const std::shared_ptr<Scope>& closure, Arguments& args) {
  if (macro_depth_ >= options_.max_macro_depth) {
    throw RenderFailure("macro calls nested deeper than " + std::to_string(options_.max_macro_depth) + " levels");
  }
  struct MacroDepth {
    int& depth;
    explicit MacroDepth(int& d) : depth(++d) {}
    ~MacroDepth() { --depth; }
  } macro_depth(macro_depth_);
  charge(1);

  // jinja2's Macro.__call__: positional arguments first, then keywords for the remaining parameters.
  const size_t count = macro.params.size();
  std::vector<std::optional<Value>> values(count);
  auto take_keyword = [&](const std::string& name) -> std::optional<Value> {
    for (auto it = args.keywords.begin(); it != args.keywords.end(); ++it) {
      if (it->first == name) {
        Value value = std::move(it->second);
        args.keywords.erase(it);
        return value;
      }
    }
    return std::nullopt;
  };
  for (size_t i = 0; i < count && i < args.positional.size(); ++i) values[i] = args.positional[i];
  bool found_caller = false;
  if (args.positional.size() < count) {
    for (size_t i = args.positional.size(); i < count; ++i) {
      values[i] = take_keyword(macro.params[i]);
      found_caller = found_caller || macro.params[i] == "caller";
    }
  } else {
    found_caller = std::find(macro.params.begin(), macro.params.end(), "caller") != macro.params.end();
  }
  std::optional<Value> caller;
  if (macro.uses_caller && !found_caller) {
    caller = take_keyword("caller");
    if (!caller) caller = Value::undefined("No caller defined");
  }
  Value kwargs;
  if (macro.uses_kwargs) {
    Dict extra;
    for (auto& [key, value] : args.keywords) extra.set(Value::string(key), std::move(value));
    kwargs = Value::dict(std::move(extra));
  } else if (!args.keywords.empty()) {
    for (const auto& keyword : args.keywords) {
      if (keyword.first == "caller") {
        throw RenderFailure("macro '" + macro.name +
                            "' was invoked with two values for the special caller argument. This is most likely a bug.");
      }
    }
    throw RenderFailure("macro '" + macro.name + "' takes no keyword argument '" + args.keywords.front().first + "'");
  }
  Value varargs;
  if (macro.uses_varargs) {
    varargs = Value::tuple(args.positional.size() > count
                               ? ValueList(args.positional.begin() + static_cast<std::ptrdiff_t>(count), args.positional.end())
                               : ValueList());
  } else if (args.positional.size() > count) {
    throw RenderFailure("macro '" + macro.name + "' takes not more than " + std::to_string(count) + " argument(s)");
  }

  ScopeGuard scope(*this, frame_scope(closure, macro.unbound));
  for (size_t i = 0; i < count; ++i) {
    if (values[i]) scope_->set(macro.params[i], *values[i]);
  }
  if (caller) scope_->set("caller", *caller);
  if (macro.uses_kwargs) scope_->set("kwargs", kwargs);
  if (macro.uses_varargs) scope_->set("varargs", varargs);
  const size_t first_default = count - macro.defaults.size();
  for (size_t i = 0; i < count; ++i) {
    if (values[i]) continue;
    if (i >= first_default) {
      scope_->set(macro.params[i], eval(*macro.defaults[i - first_default]));
    } else {
      scope_->set(macro.params[i], Value::undefined("parameter '" + macro.params[i] + "' was not provided"));
    }
  }
  push_buffer();
  exec_body(macro.body);
  return Value::string(pop_buffer());
}

}  // namespace finetune::jinja
