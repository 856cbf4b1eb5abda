#include "renderer.h"

#include <algorithm>
#include <ctime>

#include "builtins.h"
#include "loop_context.h"
#include "macro.h"
#include "python_repr.h"
#include "python_text.h"

namespace finetune::jinja {

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
  scope_ = frame_scope(globals, program_.unbound);
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

std::shared_ptr<Scope> Renderer::frame_scope(std::shared_ptr<Scope> parent, const UnboundNames& unbound) {
  auto scope = std::make_shared<Scope>(std::move(parent));
  for (const std::string& name : unbound) scope->set(name, undefined_name(name));
  return scope;
}

std::string Renderer::render_captured(const Body& body, const UnboundNames& unbound, Flow* flow) {
  ScopeGuard scope(*this, frame_scope(scope_, unbound));
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
      Value content = Value::string(render_captured(node.body, node.unbound, &flow));
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
      scope_->set(node.macro.name, macro_value(node.macro, scope_));
      return Flow::Normal;
    }
    case Stmt::Kind::CallBlock: {
      const auto& node = static_cast<const CallBlockStmt&>(stmt);
      const Value caller = macro_value(node.caller, scope_);
      write(python_str(eval_call(*node.call, &caller)));
      return Flow::Normal;
    }
    case Stmt::Kind::FilterBlock: {
      const auto& node = static_cast<const FilterBlockStmt&>(stmt);
      Flow flow;
      const Value content = Value::string(render_captured(node.body, node.unbound, &flow));
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
      ScopeGuard scope(*this, frame_scope(scope_, node.unbound));
      for (size_t i = 0; i < node.targets.size(); ++i) assign(*scope_, node.targets[i], values[i]);
      return exec_body(node.body);
    }
    case Stmt::Kind::Block: {
      const auto& node = static_cast<const BlockStmt&>(stmt);
      if (node.required) throw RenderFailure("Required block '" + node.name + "' not found.");
      ScopeGuard scope(*this, frame_scope(node.scoped ? scope_ : root_scope_, node.unbound));
      exec_body(node.body);
      return Flow::Normal;
    }
    case Stmt::Kind::Break: return Flow::Break;
    case Stmt::Kind::Continue: return Flow::Continue;
    case Stmt::Kind::Generation: {
      // Note [Generation spans]
      Flow flow;
      const auto& node = static_cast<const BodyStmt&>(stmt);
      const std::string text = render_captured(node.body, node.unbound, &flow);
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
  auto run_else = [&] {
    ScopeGuard scope(*this, frame_scope(scope_, node.else_unbound));
    exec_body(node.else_body);
  };
  if (items.empty()) {
    run_else();
    return Flow::Normal;
  }
  // Note [Value nesting]: a loop object that outlives its loop keeps no values.
  struct Release {
    std::shared_ptr<LoopContext> loop;
    ~Release() { loop->release(); }
  } loop_holder{std::make_shared<LoopContext>(std::move(items))};
  LoopContext& loop = *loop_holder.loop;
  const Value loop_value = Value::object(loop_holder.loop);
  bool iterated = false;
  for (size_t i = 0; i < loop.length(); ++i) {
    charge(1);
    loop.set_index(i);
    ScopeGuard scope(*this, frame_scope(scope_, node.body_unbound));
    scope_->set("loop", loop_value);
    assign(*scope_, node.target, loop.item(i));
    // jinja2 marks the loop as having iterated at the end of the body, so an iteration that ends in
    // break or continue does not count for {% else %}.
    const Flow flow = exec_body(node.body);
    if (flow == Flow::Break) break;
    if (flow == Flow::Normal) iterated = true;
  }
  if (!iterated) run_else();
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

}  // namespace finetune::jinja
