// The global functions of transformers' template environment: jinja2's range (the sandbox's,
// refusing more than 100000 items), dict, namespace, cycler and joiner, and transformers'
// raise_exception and strftime_now.
#include <cctype>
#include <ctime>
#include <unordered_map>

#include "builtins.h"
#include "filters.h"
#include "python_repr.h"
#include "renderer.h"

namespace finetune::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

using GlobalFunction = Value (*)(Renderer& renderer, Arguments& args);

class BuiltinFunction : public Object {
 public:
  BuiltinFunction(std::string name, GlobalFunction function) : name_(std::move(name)), function_(function) {}
  std::string type_name() const override { return "function"; }
  std::string repr() const override { return "<function " + name_ + ">"; }
  bool callable() const override { return true; }
  Value call(Renderer& renderer, Arguments& args) const override { return function_(renderer, args); }

 private:
  std::string name_;
  GlobalFunction function_;
};

int64_t range_argument(const Value& value) {
  if (!value.is_integral()) {
    throw RenderFailure("'" + type_name(value) + "' object cannot be interpreted as an integer");
  }
  return value.as_int();
}

Value global_range(Renderer& renderer, Arguments& args) {
  if (!args.keywords.empty()) throw RenderFailure("range() takes no keyword arguments");
  if (args.positional.empty() || args.positional.size() > 3) {
    throw RenderFailure("range expected at most 3 arguments, got " + std::to_string(args.positional.size()));
  }
  int64_t start = 0;
  int64_t stop;
  int64_t step = 1;
  if (args.positional.size() == 1) {
    stop = range_argument(args.positional[0]);
  } else {
    start = range_argument(args.positional[0]);
    stop = range_argument(args.positional[1]);
    if (args.positional.size() == 3) step = range_argument(args.positional[2]);
  }
  if (step == 0) throw RenderFailure("range() arg 3 must not be zero");
  // Python's len(range(...)), in 128 bits so that extreme bounds cannot overflow.
  __int128 length = 0;
  if (step > 0 && start < stop) length = ((__int128)stop - start - 1) / step + 1;
  if (step < 0 && start > stop) length = ((__int128)start - stop - 1) / -(__int128)step + 1;
  if (length > kMaxRange) {
    throw RenderFailure("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  renderer.charge_size(static_cast<size_t>(length));
  ValueList items;
  items.reserve(static_cast<size_t>(length));
  for (__int128 i = 0; i < length; ++i) items.push_back(Value::integer(static_cast<int64_t>(start + i * step)));
  return Value::list(std::move(items));
}

// dict(mapping or pairs, **kwargs), as Python's dict() and jinja2's namespace() take them.
Dict dict_from_arguments(const std::string& function, const Arguments& args) {
  if (args.positional.size() > 1) {
    throw RenderFailure(function + " expected at most 1 argument, got " + std::to_string(args.positional.size()));
  }
  Dict dict;
  if (!args.positional.empty()) {
    const Value& source = args.positional.front();
    if (source.is_dict()) {
      dict = source.as_dict();
    } else {
      for (const Value& pair : iterate(source)) {
        const ValueList parts = iterate(pair);
        if (parts.size() != 2) {
          throw RenderFailure("dictionary update sequence element has length " + std::to_string(parts.size()) +
                              "; 2 is required");
        }
        dict.set(parts[0], parts[1]);
      }
    }
  }
  for (const auto& [key, value] : args.keywords) dict.set(Value::string(key), value);
  return dict;
}

Value global_dict(Renderer& renderer, Arguments& args) {
  Dict dict = dict_from_arguments("dict", args);
  renderer.charge(dict.size());
  return Value::dict(std::move(dict));
}

Value global_namespace(Renderer& renderer, Arguments& args) {
  const Dict initial = dict_from_arguments("namespace", args);
  auto ns = std::make_shared<Namespace>();
  for (const auto& [key, value] : initial.items()) {
    if (!key.is_string()) throw RenderFailure("namespace attribute names must be strings");
    ns->set(key.as_string(), value);
  }
  renderer.track(ns);
  return Value::object(std::move(ns));
}

// cycler(*items): .next() returns the current item and advances, .current, .reset().
class Cycler : public Object, public std::enable_shared_from_this<Cycler> {
 public:
  explicit Cycler(ValueList items) : items_(std::move(items)) {
    for (const Value& item : items_) depth_ = std::max(depth_, item.depth() + 1);
  }
  std::string type_name() const override { return "Cycler"; }
  int depth() const override { return depth_; }

  Value attribute(const std::string& name) const override {
    if (name == "current") return items_[position_];
    if (name == "next" || name == "reset") {
      return Value::object(std::make_shared<CyclerMethod>(std::const_pointer_cast<Cycler>(shared_from_this()), name));
    }
    return Object::attribute(name);
  }

 private:
  class CyclerMethod : public Object {
   public:
    CyclerMethod(std::shared_ptr<Cycler> cycler, std::string name) : cycler_(std::move(cycler)), name_(std::move(name)) {}
    std::string type_name() const override { return "method"; }
    int depth() const override { return cycler_->depth() + 1; }
    bool callable() const override { return true; }
    Value call(Renderer&, Arguments& args) const override {
      if (!args.positional.empty() || !args.keywords.empty()) throw RenderFailure(name_ + "() takes no arguments");
      if (name_ == "reset") {
        cycler_->position_ = 0;
        return Value::none();
      }
      const Value current = cycler_->items_[cycler_->position_];
      cycler_->position_ = (cycler_->position_ + 1) % cycler_->items_.size();
      return current;
    }

   private:
    std::shared_ptr<Cycler> cycler_;
    std::string name_;
  };

  ValueList items_;
  size_t position_ = 0;
  int depth_ = 0;
};

Value global_cycler(Renderer&, Arguments& args) {
  if (!args.keywords.empty()) throw RenderFailure("cycler() takes no keyword arguments");
  if (args.positional.empty()) throw RenderFailure("at least one item has to be provided");
  return Value::object(std::make_shared<Cycler>(args.positional));
}

// joiner(sep=", "): returns "" the first time it is called, then sep.
class Joiner : public Object {
 public:
  explicit Joiner(std::string separator) : separator_(std::move(separator)) {}
  std::string type_name() const override { return "Joiner"; }
  bool callable() const override { return true; }
  Value call(Renderer&, Arguments& args) const override {
    if (!args.positional.empty() || !args.keywords.empty()) throw RenderFailure("joiner takes no arguments");
    if (!used_) {
      used_ = true;
      return Value::string("");
    }
    return Value::string(separator_);
  }

 private:
  std::string separator_;
  mutable bool used_ = false;
};

Value global_joiner(Renderer&, Arguments& args) {
  auto bound = bind_arguments("joiner", args, {"sep"});
  return Value::object(std::make_shared<Joiner>(bound[0] ? soft_str(*bound[0]) : ", "));
}

Value global_lipsum(Renderer&, Arguments&) {
  throw RenderFailure("lipsum() is not supported by this template engine");
}

// transformers: raise jinja2.exceptions.TemplateError(message).
Value global_raise_exception(Renderer&, Arguments& args) {
  auto bound = bind_arguments("raise_exception", args, {"message"}, 1);
  throw RenderFailure(python_str(*bound[0]));
}

// transformers: datetime.now().strftime(format). A naive datetime: %z and %Z are empty, %f is
// the microseconds (0 with a clock that gives whole seconds).
Value global_strftime_now(Renderer& renderer, Arguments& args) {
  auto bound = bind_arguments("strftime_now", args, {"format"}, 1);
  if (!bound[0]->is_string()) {
    throw RenderFailure("strftime() argument 1 must be str, not " + type_name(*bound[0]));
  }
  const std::string& format = bound[0]->as_string();
  const std::tm now = renderer.local_time();
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%' || i + 1 >= format.size()) {
      out += format[i];
      continue;
    }
    // A directive: % [flags -_0^#] [width] [E|O] conversion, as glibc's strftime reads it.
    const size_t start = i++;
    while (i < format.size() && std::string("-_0^#").find(format[i]) != std::string::npos) ++i;
    while (i < format.size() && i - start < 8 && std::isdigit(static_cast<unsigned char>(format[i]))) ++i;
    if (i < format.size() && (format[i] == 'E' || format[i] == 'O')) ++i;
    if (i >= format.size()) {
      out += format.substr(start);
      break;
    }
    const char conversion = format[i];
    if (conversion == 'z' || conversion == 'Z') continue;
    if (conversion == 'f') {
      out += "000000";
      continue;
    }
    char buffer[512];
    const std::string spec = format.substr(start, i + 1 - start);
    const size_t n = std::strftime(buffer, sizeof(buffer), spec.c_str(), &now);
    out.append(buffer, n);
    renderer.charge_size(out.size());
  }
  return Value::string(std::move(out));
}

}  // namespace

Value find_global(const std::string& name) {
  static const std::unordered_map<std::string, Value> kGlobals = [] {
    std::unordered_map<std::string, Value> globals;
    const std::pair<const char*, GlobalFunction> functions[] = {
        {"range", global_range},       {"dict", global_dict},     {"namespace", global_namespace},
        {"cycler", global_cycler},     {"joiner", global_joiner}, {"lipsum", global_lipsum},
        {"raise_exception", global_raise_exception},              {"strftime_now", global_strftime_now},
    };
    for (const auto& [global, function] : functions) {
      globals.emplace(global, Value::object(std::make_shared<BuiltinFunction>(global, function)));
    }
    return globals;
  }();
  const auto it = kGlobals.find(name);
  return it == kGlobals.end() ? Value() : it->second;
}

}  // namespace finetune::jinja
