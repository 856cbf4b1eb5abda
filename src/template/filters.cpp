// find_filter over the filter families, and what the families share.
#include "filters.h"

#include <unordered_map>

#include "python_repr.h"

namespace finetune::jinja {

FilterFunction find_filter(const std::string& name) {
  static const std::unordered_map<std::string, FilterFunction> kAll = [] {
    std::unordered_map<std::string, FilterFunction> all;
    for (const auto* family : {&text_filters(), &sequence_filters()}) {
      for (const NamedFilter& filter : *family) all.emplace(filter.name, filter.function);
    }
    return all;
  }();
  const auto it = kAll.find(name);
  return it == kAll.end() ? nullptr : it->second;
}

Value make_generator(const std::string& type_name, ValueList items) {
  auto state = std::make_shared<IteratorState>();
  state->type_name = type_name;
  state->items = std::move(items);
  return Value::iterator(std::move(state));
}

AttributeGetter attribute_getter(const Value& attribute, const std::optional<Value>& default_value) {
  ValueList parts;
  if (attribute.is_string()) {
    const std::string& path = attribute.as_string();
    size_t start = 0;
    while (true) {
      const size_t dot = path.find('.', start);
      const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      const bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
      parts.push_back(digits && part.size() < 19 ? Value::integer(std::stoll(part)) : Value::string(part));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
  } else if (!attribute.is_none()) {
    parts.push_back(attribute);
  }
  return [parts, default_value](const Value& item) {
    Value value = item;
    for (const Value& part : parts) {
      value = get_item(value, part);
      if (default_value && value.is_undefined()) value = *default_value;
    }
    return value;
  };
}

std::string soft_str(const Value& value) { return python_str(value); }

void no_arguments(const std::string& filter, Arguments& args) {
  if (!args.positional.empty() || !args.keywords.empty()) {
    throw RenderFailure(filter + "() takes no arguments besides the value it filters");
  }
}

}  // namespace finetune::jinja
