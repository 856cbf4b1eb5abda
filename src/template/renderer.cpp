#include "renderer.h"

#include <algorithm>
#include <ctime>

#include "builtins.h"
#include "loop_context.h"
#include "operators.h"
#include "python_repr.h"
#include "python_text.h"

namespace finetune::jinja {

// Note [Evaluation depth]
constexpr int kMaxEvaluationDepth = 1000;

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

class Renderer::ScopeGuard {
 public:
  ScopeGuard(Renderer& renderer, std::shared_ptr<Scope> scope) : renderer_(renderer), saved_(renderer.scope_) {
    renderer_.scope_ = std::move(scope);
  }
  explicit ScopeGuard(Renderer& renderer) : ScopeGuard(renderer, std::make_shared<Scope>(Scope{renderer.scope_, {}})) {}
  ~ScopeGuard() { renderer_.scope_ = std::move(saved_); }
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;

 private:
  Renderer& renderer_;
  std::shared_ptr<Scope> saved_;
};

class Renderer::DepthGuard {
 public:
  explicit DepthGuard(Renderer& renderer) : renderer_(renderer) {
    if (++renderer_.depth_ > kMaxEvaluationDepth) {
      throw RenderFailure("template evaluation nested deeper than " + std::to_string(kMaxEvaluationDepth) + " levels");
    }
  }
  ~DepthGuard() { --renderer_.depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  Renderer& renderer_;
};

Renderer::Renderer(const TemplateProgram& program, const TemplateOptions& options)
    : program_(program), options_(options) {}

Renderer::~Renderer() {
  // Note [Value nesting]: every tracked object is still alive, so releasing one destroys no other.
  for (const auto& object : tracked_) object->release();
}

Template::Output Renderer::render(const nlohmann::ordered_json& context) {
  auto globals = std::make_shared<Scope>();
  try {
    if (!context.is_object() && !context.is_null()) throw RenderFailure("the render context must be a JSON object");
    if (context.is_object()) {
      for (const auto& [key, value] : context.items()) globals->set(key, value_from_json(value));
    }
  } catch (const RenderFailure& failure) {
    throw TemplateError(program_.name, 0, failure.what());
  }
  scope_ = std::make_shared<Scope>(Scope{globals, {}});
  root_scope_ = scope_;
  buffers_.assign(1, std::string());
  exec_body(program_.body);

  Template::Output output;
  output.text = std::move(buffers_.front());
  // Note [Generation spans]: character positions to byte offsets, in one walk of the text.
  std::vector<size_t> positions;
  for (const auto& [begin, end] : generation_characters_) {
    positions.push_back(begin);
    positions.push_back(end);
  }
  std::sort(positions.begin(), positions.end());
  positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
  std::vector<size_t> offsets(positions.size());
  size_t characters = 0;
  size_t next = 0;
  for (size_t byte = 0; byte <= output.text.size() && next < positions.size(); ++byte) {
    const bool starts_character =
        byte == output.text.size() || (static_cast<unsigned char>(output.text[byte]) & 0xC0) != 0x80;
    if (!starts_character) continue;
    while (next < positions.size() && positions[next] == characters) offsets[next++] = byte;
    ++characters;
  }
  for (; next < positions.size(); ++next) {  // past the end: a span of text that was never written out
    offsets[next] = output.text.size() + (positions[next] - (characters - 1));
  }
  auto offset_of = [&](size_t position) {
    return offsets[static_cast<size_t>(std::lower_bound(positions.begin(), positions.end(), position) - positions.begin())];
  };
  for (const auto& [begin, end] : generation_characters_) output.generation_spans.emplace_back(offset_of(begin), offset_of(end));
  return output;
}

// --- budget

void Renderer::charge(uint64_t units) {
  iterations_ += units;
  if (iterations_ > options_.max_iterations) {
    throw RenderFailure("template exceeded its budget of " + std::to_string(options_.max_iterations) +
                        " loop iterations (a loop or filter over too many items?)");
  }
}

void Renderer::charge_size(size_t size) {
  if (size > options_.max_output_bytes) {
    throw RenderFailure("template built a value of " + std::to_string(size) + " bytes or items, over the limit of " +
                        std::to_string(options_.max_output_bytes));
  }
  charge(size / 64);
}

std::tm Renderer::local_time() const {
  if (options_.local_time) return options_.local_time();
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  return local;
}

void Renderer::track(std::shared_ptr<Object> object) {
  charge(1);
  tracked_.push_back(std::move(object));
}

// --- output

void Renderer::write(const std::string& text) {
  std::string& buffer = buffers_.back();
  if (buffer.size() + text.size() > options_.max_output_bytes) {
    throw RenderFailure("template output exceeds " + std::to_string(options_.max_output_bytes) + " bytes");
  }
  charge(text.size() / 64);
  buffer += text;
}

void Renderer::push_buffer() { buffers_.emplace_back(); }

std::string Renderer::pop_buffer() {
  std::string text = std::move(buffers_.back());
  buffers_.pop_back();
  return text;
}

size_t Renderer::top_level_characters() {
  const std::string& root = buffers_.front();
  for (; counted_bytes_ < root.size(); ++counted_bytes_) {
    counted_characters_ += (static_cast<unsigned char>(root[counted_bytes_]) & 0xC0) != 0x80;
  }
  return counted_characters_;
}

std::string Renderer::render_captured(const Body& body, Flow* flow) {
  ScopeGuard scope(*this);
  push_buffer();
  *flow = exec_body(body);
  return pop_buffer();
}

// --- statements

Renderer::Flow Renderer::exec_body(const Body& body) {
  for (const StmtPtr& stmt : body) {
    const Flow flow = exec(*stmt);
    if (flow != Flow::Normal) return flow;
  }
  return Flow::Normal;
}

Renderer::Flow Renderer::exec(const Stmt& stmt) {
  try {
    DepthGuard depth(*this);
    return exec_node(stmt);
  } catch (const RenderFailure& failure) {
    throw TemplateError(program_.name, stmt.line, failure.what());
  }
}

Renderer::Flow Renderer::exec_node(const Stmt& stmt) {
  switch (stmt.kind) {
    case Stmt::Kind::Text: write(static_cast<const TextStmt&>(stmt).text); return Flow::Normal;
    case Stmt::Kind::Output: write(python_str(eval(*static_cast<const OutputStmt&>(stmt).value))); return Flow::Normal;
    case Stmt::Kind::If: {
      const auto& node = static_cast<const IfStmt&>(stmt);
      for (const auto& [test, body] : node.branches) {
        if (truthy(eval(*test))) return exec_body(body);
      }
      return exec_body(node.else_body);
    }
    case Stmt::Kind::For: return exec_for(static_cast<const ForStmt&>(stmt));
    case Stmt::Kind::Set: {
      const auto& node = static_cast<const SetStmt&>(stmt);
      assign(*scope_, node.target, eval(*node.value));
      return Flow::Normal;
    }
    case Stmt::Kind::SetBlock: {
      const auto& node = static_cast<const SetBlockStmt&>(stmt);
      Flow flow;
      Value content = Value::string(render_captured(node.body, &flow));
      if (flow != Flow::Normal) return flow;  // loop control left the block before its assignment
      if (node.filter) {
        const Value* saved = block_content_;
        block_content_ = &content;
        content = eval(*node.filter);
        block_content_ = saved;
      }
      assign(*scope_, node.target, content);
      return Flow::Normal;
    }
    case Stmt::Kind::Macro: {
      const auto& node = static_cast<const MacroStmt&>(stmt);
      scope_->set(node.macro.name, Value::object(std::make_shared<MacroObject>(node.macro, scope_)));
      return Flow::Normal;
    }
    case Stmt::Kind::CallBlock: {
      const auto& node = static_cast<const CallBlockStmt&>(stmt);
      const Value caller = Value::object(std::make_shared<MacroObject>(node.caller, scope_));
      write(python_str(eval_call(*node.call, &caller)));
      return Flow::Normal;
    }
    case Stmt::Kind::FilterBlock: {
      const auto& node = static_cast<const FilterBlockStmt&>(stmt);
      Flow flow;
      const Value content = Value::string(render_captured(node.body, &flow));
      if (flow != Flow::Normal) return flow;
      const Value* saved = block_content_;
      block_content_ = &content;
      const Value result = eval(*node.filter);
      block_content_ = saved;
      write(python_str(result));
      return Flow::Normal;
    }
    case Stmt::Kind::With: {
      const auto& node = static_cast<const WithStmt&>(stmt);
      ValueList values;
      for (const ExprPtr& value : node.values) values.push_back(eval(*value));
      ScopeGuard scope(*this);
      for (size_t i = 0; i < node.targets.size(); ++i) assign(*scope_, node.targets[i], values[i]);
      return exec_body(node.body);
    }
    case Stmt::Kind::Block: {
      const auto& node = static_cast<const BlockStmt&>(stmt);
      if (node.required) throw RenderFailure("Required block '" + node.name + "' not found.");
      ScopeGuard scope(*this, std::make_shared<Scope>(Scope{node.scoped ? scope_ : root_scope_, {}}));
      exec_body(node.body);
      return Flow::Normal;
    }
    case Stmt::Kind::Break: return Flow::Break;
    case Stmt::Kind::Continue: return Flow::Continue;
    case Stmt::Kind::Generation: {
      // Note [Generation spans]
      Flow flow;
      const std::string text = render_captured(static_cast<const BodyStmt&>(stmt).body, &flow);
      const size_t begin = top_level_characters();
      generation_characters_.emplace_back(begin, begin + code_point_count(text));
      write(text);
      return Flow::Normal;
    }
  }
  return Flow::Normal;
}

Renderer::Flow Renderer::exec_for(const ForStmt& node) {
  ValueList items = iterate(eval(*node.iterable));
  if (node.condition) {
    ValueList kept;
    for (Value& item : items) {
      charge(1);
      ScopeGuard scope(*this);
      assign(*scope_, node.target, item);
      if (truthy(eval(*node.condition))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    ScopeGuard scope(*this);
    exec_body(node.else_body);
    return Flow::Normal;
  }
  // Note [Value nesting]: a loop object that outlives its loop keeps no values.
  struct Release {
    std::shared_ptr<LoopContext> loop;
    ~Release() { loop->release(); }
  } loop_holder{std::make_shared<LoopContext>(std::move(items))};
  LoopContext& loop = *loop_holder.loop;
  const Value loop_value = Value::object(loop_holder.loop);
  for (size_t i = 0; i < loop.length(); ++i) {
    charge(1);
    loop.set_index(i);
    ScopeGuard scope(*this);
    scope_->set("loop", loop_value);
    assign(*scope_, node.target, loop.item(i));
    if (exec_body(node.body) == Flow::Break) break;
  }
  return Flow::Normal;
}

void Renderer::assign(Scope& scope, const Target& target, const Value& value) {
  switch (target.kind) {
    case Target::Kind::Name: scope.set(target.name, value); return;
    case Target::Kind::Tuple: {
      const ValueList items = iterate(value);
      if (items.size() < target.items.size()) {
        throw RenderFailure("not enough values to unpack (expected " + std::to_string(target.items.size()) + ", got " +
                            std::to_string(items.size()) + ")");
      }
      if (items.size() > target.items.size()) {
        throw RenderFailure("too many values to unpack (expected " + std::to_string(target.items.size()) + ")");
      }
      for (size_t i = 0; i < items.size(); ++i) assign(scope, target.items[i], items[i]);
      return;
    }
    case Target::Kind::NamespaceAttr: {
      const Value ns = lookup(target.name);
      auto* object = ns.is_object() ? dynamic_cast<Namespace*>(&ns.as_object()) : nullptr;
      if (object == nullptr) throw RenderFailure("cannot assign attribute on non-namespace object");
      object->set(target.attribute, value);
      return;
    }
  }
}

Value Renderer::lookup(const std::string& name) const {
  for (const Scope* scope = scope_.get(); scope != nullptr; scope = scope->parent.get()) {
    if (const Value* value = scope->find(name)) return *value;
  }
  Value global = find_global(name);
  if (!global.is_undefined()) return global;
  return undefined_name(name);
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

  ScopeGuard scope(*this, std::make_shared<Scope>(Scope{closure, {}}));
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

// --- expressions

Value Renderer::eval(const Expr& expr) {
  try {
    DepthGuard depth(*this);
    return eval_node(expr);
  } catch (const RenderFailure& failure) {
    throw TemplateError(program_.name, expr.line, failure.what());
  }
}

Value Renderer::eval_node(const Expr& expr) {
  switch (expr.kind) {
    case Expr::Kind::Literal: return static_cast<const LiteralExpr&>(expr).value;
    case Expr::Kind::Name: return lookup(static_cast<const NameExpr&>(expr).name);
    case Expr::Kind::List:
    case Expr::Kind::Tuple: {
      ValueList items;
      for (const ExprPtr& item : static_cast<const SequenceExpr&>(expr).items) items.push_back(eval(*item));
      return expr.kind == Expr::Kind::List ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case Expr::Kind::Dict: {
      Dict dict;
      for (const auto& [key, value] : static_cast<const DictExpr&>(expr).items) {
        Value k = eval(*key);
        dict.set(std::move(k), eval(*value));
      }
      return Value::dict(std::move(dict));
    }
    case Expr::Kind::GetAttr: {
      const auto& node = static_cast<const GetAttrExpr&>(expr);
      return get_attribute(eval(*node.object), node.name);
    }
    case Expr::Kind::GetItem: {
      const auto& node = static_cast<const GetItemExpr&>(expr);
      const Value object = eval(*node.object);
      if (node.index->kind != Expr::Kind::Slice) return get_item(object, eval(*node.index));
      const auto& slice = static_cast<const SliceExpr&>(*node.index);
      const Value start = slice.start ? eval(*slice.start) : Value::none();
      const Value stop = slice.stop ? eval(*slice.stop) : Value::none();
      const Value step = slice.step ? eval(*slice.step) : Value::none();
      return get_slice(object, &start, &stop, &step);
    }
    case Expr::Kind::Slice: throw RenderFailure("a slice is only valid inside []");
    case Expr::Kind::Call: return eval_call(static_cast<const CallExpr&>(expr), nullptr);
    case Expr::Kind::Filter: return eval_filter(static_cast<const FilterExpr&>(expr));
    case Expr::Kind::Test: return Value::boolean(eval_test(static_cast<const FilterExpr&>(expr)));
    case Expr::Kind::Not: return Value::boolean(!truthy(eval(*static_cast<const UnaryExpr&>(expr).operand)));
    case Expr::Kind::Negate: return python_negate(eval(*static_cast<const UnaryExpr&>(expr).operand));
    case Expr::Kind::Positive: return python_positive(eval(*static_cast<const UnaryExpr&>(expr).operand));
    case Expr::Kind::Chain: return eval_chain(static_cast<const ChainExpr&>(expr));
    case Expr::Kind::Concat: {
      std::string text;
      for (const ExprPtr& item : static_cast<const ConcatExpr&>(expr).items) {
        const std::string piece = python_str(eval(*item));
        charge_size(text.size() + piece.size());
        text += piece;
      }
      return Value::string(std::move(text));
    }
    case Expr::Kind::Compare: return eval_compare(static_cast<const CompareExpr&>(expr));
    case Expr::Kind::Conditional: {
      const auto& node = static_cast<const ConditionalExpr&>(expr);
      if (truthy(eval(*node.test))) return eval(*node.then_value);
      if (node.else_value) return eval(*node.else_value);
      return Value::undefined("the inline if-expression on line " + std::to_string(expr.line) +
                              " evaluated to false and no else section was defined.");
    }
  }
  throw RenderFailure("unknown expression");
}

Arguments Renderer::eval_args(const CallArgs& args) {
  Arguments out;
  for (const ExprPtr& arg : args.positional) out.positional.push_back(eval(*arg));
  for (const auto& [key, value] : args.keywords) out.keywords.emplace_back(key, eval(*value));
  if (args.star_args) {
    for (Value& item : iterate(eval(*args.star_args))) out.positional.push_back(std::move(item));
  }
  if (args.star_kwargs) {
    const Value extra = eval(*args.star_kwargs);
    if (!extra.is_dict()) throw RenderFailure("argument after ** must be a mapping, not " + type_name(extra));
    for (const auto& [key, value] : extra.as_dict().items()) {
      if (!key.is_string()) throw RenderFailure("keywords must be strings");
      out.keywords.emplace_back(key.as_string(), value);
    }
  }
  return out;
}

Value Renderer::eval_call(const CallExpr& node, const Value* caller) {
  const Value callee = eval(*node.callee);
  Arguments args = eval_args(node.args);
  if (caller != nullptr) args.keywords.emplace_back("caller", *caller);
  return call(callee, args);
}

Value Renderer::call(const Value& callee, Arguments& args) {
  if (callee.is_undefined()) throw_undefined(callee);
  if (callee.is_object() && callee.as_object().callable()) return callee.as_object().call(*this, args);
  throw RenderFailure("'" + type_name(callee) + "' object is not callable");
}

Value Renderer::eval_filter(const FilterExpr& node) {
  const Value operand = node.operand ? eval(*node.operand) : *block_content_;
  Arguments args = eval_args(node.args);
  return apply_filter(node.name, operand, args);
}

bool Renderer::eval_test(const FilterExpr& node) {
  const Value operand = eval(*node.operand);
  Arguments args = eval_args(node.args);
  return apply_test(node.name, operand, args);
}

Value Renderer::apply_filter(const std::string& name, const Value& operand, Arguments& args) {
  const FilterFunction filter = find_filter(name);
  if (filter == nullptr) throw RenderFailure("No filter named '" + name + "'.");
  return filter(*this, operand, args);
}

bool Renderer::apply_test(const std::string& name, const Value& operand, Arguments& args) {
  const TestFunction test = find_test(name);
  if (test == nullptr) throw RenderFailure("No test named '" + name + "'.");
  return test(*this, operand, args);
}

Value Renderer::eval_chain(const ChainExpr& node) {
  Value value = eval(*node.first);
  for (const auto& [op, operand] : node.rest) {
    if (op == ChainOp::And) {
      if (!truthy(value)) return value;
      value = eval(*operand);
    } else if (op == ChainOp::Or) {
      if (truthy(value)) return value;
      value = eval(*operand);
    } else {
      value = python_binary(op, value, eval(*operand), *this);
    }
  }
  return value;
}

Value Renderer::eval_compare(const CompareExpr& node) {
  Value left = eval(*node.first);
  for (const auto& [op, operand] : node.rest) {
    Value right = eval(*operand);
    bool result = false;
    switch (op) {
      case CompareOp::Equal: result = python_equal(left, right); break;
      case CompareOp::NotEqual: result = !python_equal(left, right); break;
      case CompareOp::Less: result = python_compare(left, right) == -1; break;
      case CompareOp::LessEqual: {
        const int c = python_compare(left, right);
        result = c == -1 || c == 0;
        break;
      }
      case CompareOp::Greater: result = python_compare(left, right) == 1; break;
      case CompareOp::GreaterEqual: {
        const int c = python_compare(left, right);
        result = c == 1 || c == 0;
        break;
      }
      case CompareOp::In: result = python_contains(right, left); break;
      case CompareOp::NotIn: result = !python_contains(right, left); break;
    }
    if (!result) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

}  // namespace finetune::jinja
