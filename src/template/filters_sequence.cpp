// Filters on collections, with jinja2's semantics (its filters.py): the ones that return
// generators in jinja2 (map, select, unique, ...) return single-pass iterators here too.
#include <algorithm>
#include <unordered_set>

#include "filters.h"
#include "methods.h"
#include "operators.h"
#include "python_repr.h"
#include "python_text.h"
#include "renderer.h"

namespace finetune::jinja {
namespace {

ValueList walk(Renderer& renderer, const Value& value) {
  ValueList items = iterate(value);
  renderer.charge(items.size());
  return items;
}

Value lower_strings(const Value& value) {
  return value.is_string() ? Value::string(python_lower(value.as_string())) : value;
}

bool flag(const std::optional<Value>& value) { return value && truthy(*value); }

// Python's sorted(items, key=..., reverse=...): stable, and reverse keeps equal items in order.
void sort_by_keys(ValueList& items, std::vector<Value> keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return reverse ? python_compare(keys[b], keys[a]) == -1 : python_compare(keys[a], keys[b]) == -1;
  });
  ValueList sorted;
  sorted.reserve(items.size());
  for (const size_t i : order) sorted.push_back(std::move(items[i]));
  items = std::move(sorted);
}

Value filter_default(Renderer&, const Value& value, Arguments& args) {
  auto bound = bind_arguments("default", args, {"default_value", "boolean"});
  if (value.is_undefined() || (flag(bound[1]) && !truthy(value))) return bound[0] ? *bound[0] : Value::string("");
  return value;
}

Value filter_length(Renderer&, const Value& value, Arguments& args) {
  no_arguments("length", args);
  return Value::integer(static_cast<int64_t>(python_length(value)));
}

Value filter_list(Renderer& renderer, const Value& value, Arguments& args) {
  no_arguments("list", args);
  return Value::list(walk(renderer, value));
}

Value filter_first(Renderer&, const Value& value, Arguments& args) {
  no_arguments("first", args);
  if (value.is_iterator()) {
    IteratorState& state = value.as_iterator();
    if (state.position < state.items.size()) {
      const Value first = state.items[state.position];
      if (state.single_pass) ++state.position;
      return first;
    }
  } else {
    const ValueList items = iterate(value);
    if (!items.empty()) return items.front();
  }
  return Value::undefined("No first item, sequence was empty.");
}

Value filter_last(Renderer&, const Value& value, Arguments& args) {
  no_arguments("last", args);
  if (value.is_iterator() && value.as_iterator().single_pass) {
    throw RenderFailure("'" + type_name(value) + "' object is not reversible");
  }
  if (value.is_number() || value.is_none() || value.is_object()) {
    throw RenderFailure("'" + type_name(value) + "' object is not reversible");
  }
  const ValueList items = iterate(value);
  if (!items.empty()) return items.back();
  return Value::undefined("No last item, sequence was empty.");
}

Value filter_join(Renderer& renderer, const Value& value, Arguments& args) {
  auto bound = bind_arguments("join", args, {"d", "attribute"});
  const std::string separator = bound[0] ? soft_str(*bound[0]) : "";
  ValueList items = walk(renderer, value);
  if (bound[1] && !bound[1]->is_none()) {
    const AttributeGetter getter = attribute_getter(*bound[1]);
    for (Value& item : items) item = getter(item);
  }
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += python_str(items[i]);
    renderer.charge_size(out.size());
  }
  return Value::string(std::move(out));
}

Value filter_items(Renderer& renderer, const Value& value, Arguments& args) {
  no_arguments("items", args);
  if (value.is_undefined()) return make_generator("generator", {});
  if (!value.is_dict()) throw RenderFailure("Can only get item pairs from a mapping.");
  ValueList pairs;
  for (const auto& [key, item] : value.as_dict().items()) pairs.push_back(Value::tuple({key, item}));
  renderer.charge(pairs.size());
  return make_generator("generator", std::move(pairs));
}

Value filter_dictsort(Renderer& renderer, const Value& value, Arguments& args) {
  auto bound = bind_arguments("dictsort", args, {"case_sensitive", "by", "reverse"});
  const std::string by = bound[1] ? soft_str(*bound[1]) : "key";
  if (by != "key" && by != "value") throw RenderFailure("You can only sort by either \"key\" or \"value\"");
  if (value.is_undefined()) throw_undefined(value);
  if (!value.is_dict()) throw RenderFailure("'" + type_name(value) + "' object has no attribute 'items'");
  ValueList pairs;
  std::vector<Value> keys;
  for (const auto& [key, item] : value.as_dict().items()) {
    pairs.push_back(Value::tuple({key, item}));
    const Value& sort_key = by == "key" ? key : item;
    keys.push_back(flag(bound[0]) ? sort_key : lower_strings(sort_key));
  }
  renderer.charge(pairs.size());
  sort_by_keys(pairs, std::move(keys), flag(bound[2]));
  return Value::list(std::move(pairs));
}

// jinja2's make_multi_attrgetter: "a,b" sorts by a, then b.
std::vector<AttributeGetter> multi_getters(const std::optional<Value>& attribute) {
  std::vector<AttributeGetter> getters;
  if (attribute && attribute->is_string()) {
    const std::string& spec = attribute->as_string();
    size_t start = 0;
    while (true) {
      const size_t comma = spec.find(',', start);
      getters.push_back(attribute_getter(Value::string(spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start))));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  } else {
    getters.push_back(attribute_getter(attribute ? *attribute : Value::none()));
  }
  return getters;
}

Value filter_sort(Renderer& renderer, const Value& value, Arguments& args) {
  auto bound = bind_arguments("sort", args, {"reverse", "case_sensitive", "attribute"});
  ValueList items = walk(renderer, value);
  const std::vector<AttributeGetter> getters = multi_getters(bound[2]);
  std::vector<Value> keys;
  for (const Value& item : items) {
    ValueList key;
    for (const AttributeGetter& getter : getters) key.push_back(flag(bound[1]) ? getter(item) : lower_strings(getter(item)));
    keys.push_back(Value::list(std::move(key)));
  }
  sort_by_keys(items, std::move(keys), flag(bound[0]));
  return Value::list(std::move(items));
}

Value filter_unique(Renderer& renderer, const Value& value, Arguments& args) {
  auto bound = bind_arguments("unique", args, {"case_sensitive", "attribute"});
  const AttributeGetter getter = attribute_getter(bound[1] ? *bound[1] : Value::none());
  std::unordered_set<std::string> seen_strings;
  ValueList seen_others;
  ValueList kept;
  for (const Value& item : walk(renderer, value)) {
    Value key = getter(item);
    if (!flag(bound[0])) key = lower_strings(key);
    if (key.is_list() || key.is_dict()) throw RenderFailure("unhashable type: '" + type_name(key) + "'");
    bool fresh;
    if (key.is_string()) {
      fresh = seen_strings.insert(key.as_string()).second;
    } else {
      fresh = std::none_of(seen_others.begin(), seen_others.end(), [&](const Value& v) { return python_equal(v, key); });
      renderer.charge(seen_others.size() / 64);
      if (fresh) seen_others.push_back(key);
    }
    if (fresh) kept.push_back(item);
  }
  return make_generator("generator", std::move(kept));
}

Value filter_reverse(Renderer& renderer, const Value& value, Arguments& args) {
  no_arguments("reverse", args);
  if (value.is_string()) {
    std::vector<char32_t> text = decode_utf8(value.as_string());
    std::reverse(text.begin(), text.end());
    return Value::string(encode_utf8(text), value.markup());
  }
  const bool reversible_view = value.is_iterator() && !value.as_iterator().single_pass;
  if (value.is_sequence() || value.is_dict() || value.is_undefined() || reversible_view) {
    ValueList items = walk(renderer, value);
    std::reverse(items.begin(), items.end());
    std::string name = "reversed";
    if (value.is_list()) name = "list_reverseiterator";
    if (value.is_dict()) name = "dict_reversekeyiterator";
    if (reversible_view) name = "dict_reverse" + type_name(value).substr(5) + "iterator";
    return make_generator(name, std::move(items));
  }
  ValueList items = walk(renderer, value);  // a generator: jinja2 falls back to a reversed list
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value filter_map(Renderer& renderer, const Value& value, Arguments& args) {
  if (!truthy(value)) return make_generator("generator", {});
  ValueList items = walk(renderer, value);
  const auto attribute = std::find_if(args.keywords.begin(), args.keywords.end(),
                                      [](const auto& keyword) { return keyword.first == "attribute"; });
  if (args.positional.empty() && attribute != args.keywords.end()) {
    std::optional<Value> default_value;
    for (const auto& [key, item] : args.keywords) {
      if (key == "default") {
        if (!item.is_none()) default_value = item;
      } else if (key != "attribute") {
        throw RenderFailure("Unexpected keyword argument '" + key + "'");
      }
    }
    const AttributeGetter getter = attribute_getter(attribute->second, default_value);
    for (Value& item : items) item = getter(item);
    return make_generator("generator", std::move(items));
  }
  if (args.positional.empty()) throw RenderFailure("map requires a filter argument");
  const Value name = args.positional.front();
  if (!name.is_string()) throw RenderFailure("No filter named " + python_str(name) + ".");
  for (Value& item : items) {
    Arguments filter_args;
    filter_args.positional.assign(args.positional.begin() + 1, args.positional.end());
    filter_args.keywords = args.keywords;
    item = renderer.apply_filter(name.as_string(), item, filter_args);
  }
  return make_generator("generator", std::move(items));
}

Value select_or_reject(Renderer& renderer, const Value& value, Arguments& args, bool select, bool by_attribute) {
  if (!truthy(value)) return make_generator("generator", {});
  const ValueList items = walk(renderer, value);
  size_t offset = 0;
  AttributeGetter transform = [](const Value& item) { return item; };
  if (by_attribute) {
    if (args.positional.empty()) throw RenderFailure("Missing parameter for attribute name");
    transform = attribute_getter(args.positional.front());
    offset = 1;
  }
  std::optional<std::string> test;
  if (args.positional.size() > offset) {
    const Value& name = args.positional[offset];
    if (!name.is_string()) throw RenderFailure("No test named " + python_str(name) + ".");
    test = name.as_string();
  }
  ValueList kept;
  for (const Value& item : items) {
    const Value subject = transform(item);
    bool passed;
    if (test) {
      Arguments test_args;
      test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(offset) + 1, args.positional.end());
      test_args.keywords = args.keywords;
      passed = renderer.apply_test(*test, subject, test_args);
    } else {
      passed = truthy(subject);
    }
    if (passed == select) kept.push_back(item);
  }
  return make_generator("generator", std::move(kept));
}

Value filter_select(Renderer& r, const Value& v, Arguments& a) { return select_or_reject(r, v, a, true, false); }
Value filter_reject(Renderer& r, const Value& v, Arguments& a) { return select_or_reject(r, v, a, false, false); }
Value filter_selectattr(Renderer& r, const Value& v, Arguments& a) { return select_or_reject(r, v, a, true, true); }
Value filter_rejectattr(Renderer& r, const Value& v, Arguments& a) { return select_or_reject(r, v, a, false, true); }

Value min_or_max(Renderer& renderer, const Value& value, Arguments& args, bool want_max) {
  auto bound = bind_arguments(want_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  const ValueList items = walk(renderer, value);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const AttributeGetter getter = attribute_getter(bound[1] ? *bound[1] : Value::none());
  auto key = [&](const Value& item) { return flag(bound[0]) ? getter(item) : lower_strings(getter(item)); };
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value candidate = key(items[i]);
    if (python_compare(candidate, best_key) == (want_max ? 1 : -1)) {
      best = i;
      best_key = std::move(candidate);
    }
  }
  return items[best];
}

Value filter_min(Renderer& r, const Value& v, Arguments& a) { return min_or_max(r, v, a, false); }
Value filter_max(Renderer& r, const Value& v, Arguments& a) { return min_or_max(r, v, a, true); }

Value filter_sum(Renderer& renderer, const Value& value, Arguments& args) {
  auto bound = bind_arguments("sum", args, {"attribute", "start"});
  Value total = bound[1] ? *bound[1] : Value::integer(0);
  if (total.is_string()) throw RenderFailure("sum() can't sum strings [use ''.join(seq) instead]");
  const AttributeGetter getter = attribute_getter(bound[0] ? *bound[0] : Value::none());
  for (const Value& item : walk(renderer, value)) total = python_binary(ChainOp::Add, total, getter(item), renderer);
  return total;
}

Value filter_batch(Renderer& renderer, const Value& value, Arguments& args) {
  auto bound = bind_arguments("batch", args, {"linecount", "fill_with"}, 1);
  if (!bound[0]->is_integral() || bound[0]->as_int() <= 0) throw RenderFailure("batch() linecount must be a positive integer");
  const auto size = static_cast<size_t>(bound[0]->as_int());
  ValueList batches;
  ValueList current;
  for (const Value& item : walk(renderer, value)) {
    if (current.size() == size) {
      batches.push_back(Value::list(std::move(current)));
      current.clear();
    }
    current.push_back(item);
  }
  if (!current.empty()) {
    if (bound[1] && !bound[1]->is_none()) {
      renderer.charge_size(size);
      while (current.size() < size) current.push_back(*bound[1]);
    }
    batches.push_back(Value::list(std::move(current)));
  }
  return make_generator("generator", std::move(batches));
}

Value filter_slice(Renderer& renderer, const Value& value, Arguments& args) {
  auto bound = bind_arguments("slice", args, {"slices", "fill_with"}, 1);
  if (!bound[0]->is_integral() || bound[0]->as_int() <= 0) throw RenderFailure("slice() slices must be a positive integer");
  const auto slices = static_cast<size_t>(bound[0]->as_int());
  renderer.charge_size(slices);
  const ValueList items = walk(renderer, value);
  const size_t per_slice = items.size() / slices;
  const size_t with_extra = items.size() % slices;
  ValueList out;
  size_t offset = 0;
  for (size_t number = 0; number < slices; ++number) {
    const size_t start = offset + number * per_slice;
    if (number < with_extra) ++offset;
    const size_t end = offset + (number + 1) * per_slice;
    ValueList part(items.begin() + static_cast<std::ptrdiff_t>(start), items.begin() + static_cast<std::ptrdiff_t>(end));
    if (bound[1] && !bound[1]->is_none() && number >= with_extra) part.push_back(*bound[1]);
    out.push_back(Value::list(std::move(part)));
  }
  return make_generator("generator", std::move(out));
}

Value filter_attr(Renderer&, const Value& value, Arguments& args) {
  auto bound = bind_arguments("attr", args, {"name"}, 1);
  const std::string name = soft_str(*bound[0]);
  if (value.is_undefined()) throw_undefined(value);
  if (value.is_object()) return value.as_object().attribute(name);
  if (has_method(value, name)) return bound_method(value, name);
  return Value::undefined("'" + object_type_repr(value) + "' has no attribute '" + name + "'");
}

Value filter_unsupported(Renderer&, const Value&, Arguments&) {
  throw RenderFailure("this jinja2 filter is not supported by this template engine");
}

}  // namespace

const std::vector<NamedFilter>& sequence_filters() {
  static const std::vector<NamedFilter> kFilters = {
      {"attr", filter_attr},
      {"batch", filter_batch},
      {"count", filter_length},
      {"d", filter_default},
      {"default", filter_default},
      {"dictsort", filter_dictsort},
      {"first", filter_first},
      {"groupby", filter_unsupported},
      {"items", filter_items},
      {"join", filter_join},
      {"last", filter_last},
      {"length", filter_length},
      {"list", filter_list},
      {"map", filter_map},
      {"max", filter_max},
      {"min", filter_min},
      {"reject", filter_reject},
      {"rejectattr", filter_rejectattr},
      {"reverse", filter_reverse},
      {"select", filter_select},
      {"selectattr", filter_selectattr},
      {"slice", filter_slice},
      {"sort", filter_sort},
      {"sum", filter_sum},
      {"unique", filter_unique},
  };
  return kFilters;
}

}  // namespace finetune::jinja
