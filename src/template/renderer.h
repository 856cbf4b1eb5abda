// Runs a parsed template: statements write to output buffers, expressions evaluate to Values.
//
// Scopes follow jinja2: the render context is the outermost scope and top-level {% set %} shadows
// it; every loop iteration, macro call, caller, filter/set block, {% with %}, {% block %} and
// {% generation %} body gets a new scope whose assignments stay inside it ({% if %} does not), so a
// value set in a loop is gone at the next iteration, as the namespace() idiom expects. Macros see
// the scope they were defined in, as it is when they are called. A new scope starts with the names
// its frame assigns before reading bound to Undefined (Note [Static scoping] in scope_analysis.h).
//
// Note [Generation spans]
// transformers' AssistantTracker records, for each {% generation %} block, the length of what the
// template had yielded at top level before it and the length of the block's own output. Output
// written inside a macro, a caller, or a filter or set block is buffered in jinja2's generated code
// and yielded only later, so a block there is recorded at the top-level position reached when it
// ran; a buffer per nesting construct reproduces exactly that. The positions are counted in
// characters (code points) as Python does, and converted to byte offsets of the final text at the
// end.
//
// Note [Evaluation depth]
// Each statement executed and expression evaluated inside another adds one level; past
// kMaxEvaluationDepth (1000) the render fails rather than overflow the stack: about 1 MB of stack
// in a release build, 3 MB under AddressSanitizer. Real templates stay far below it (TRL's
// chat templates reach 24 levels on conversations with tools); a macro recursing 128 deep
// (max_macro_depth; jinja2 itself stops near 150-200) takes about 600.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ast.h"
#include "finetune/template/template.h"
#include "scope.h"
#include "value.h"

namespace finetune::jinja {

class Renderer {
 public:
  Renderer(const TemplateProgram& program, const TemplateOptions& options);
  ~Renderer();
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  Template::Output render(const nlohmann::ordered_json& context);

  // --- for builtins (filters, tests, globals, methods)

  Value call(const Value& callee, Arguments& args);
  Value apply_filter(const std::string& name, const Value& operand, Arguments& args);
  bool apply_test(const std::string& name, const Value& operand, Arguments& args);

  // The iteration budget: loop iterations, plus items that filters walk and strings they build
  // (one unit per 64 bytes, which also bounds the bytes a render can build in all: 64 times the
  // budget).
  void charge(uint64_t units);
  // A string or list of this many bytes/items may be built (max_output_bytes), and is charged.
  void charge_size(size_t size);

  std::tm local_time() const;
  // Keeps a namespace alive until the render ends, then releases it (Note [Value nesting]).
  void track(std::shared_ptr<Object> object);

  // Calls a macro or a caller (macro.h), binding `args` as jinja2 does.
  Value call_macro(const MacroDefinition& macro, const std::shared_ptr<Scope>& closure, Arguments& args);

 private:
  enum class Flow { Normal, Break, Continue };

  Flow exec_body(const Body& body);
  Flow exec(const Stmt& stmt);
  Flow exec_node(const Stmt& stmt);
  Flow exec_for(const ForStmt& node);
  Value eval(const Expr& expr);
  Value eval_node(const Expr& expr);
  Value eval_call(const CallExpr& node, const Value* caller);
  Value eval_filter(const FilterExpr& node);
  bool eval_test(const FilterExpr& node);
  Value eval_chain(const ChainExpr& node);
  Value eval_compare(const CompareExpr& node);
  Arguments eval_args(const CallArgs& args);

  Value lookup(const std::string& name) const;
  void assign(Scope& scope, const Target& target, const Value& value);

  // Output goes to the innermost buffer; pushing one captures what a body renders.
  void write(const std::string& text);
  void push_buffer();
  std::string pop_buffer();
  size_t top_level_characters();

  // A new scope, child of `parent`, with the frame's unbound names bound to Undefined
  // (Note [Static scoping] in scope_analysis.h).
  static std::shared_ptr<Scope> frame_scope(std::shared_ptr<Scope> parent, const UnboundNames& unbound);

  // Runs `body` in a new frame (child of the current scope) into its own buffer.
  std::string render_captured(const Body& body, const UnboundNames& unbound, Flow* flow);

  // Note [Evaluation depth]
  static constexpr int kMaxEvaluationDepth = 1000;

  class ScopeGuard {
   public:
    ScopeGuard(Renderer& renderer, std::shared_ptr<Scope> scope) : renderer_(renderer), saved_(renderer.scope_) {
      renderer_.scope_ = std::move(scope);
    }
    explicit ScopeGuard(Renderer& renderer) : ScopeGuard(renderer, std::make_shared<Scope>(renderer.scope_)) {}
    ~ScopeGuard() { renderer_.scope_ = std::move(saved_); }
    ScopeGuard(const ScopeGuard&) = delete;
    ScopeGuard& operator=(const ScopeGuard&) = delete;

   private:
    Renderer& renderer_;
    std::shared_ptr<Scope> saved_;
  };

  class DepthGuard {
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

  const TemplateProgram& program_;
  const TemplateOptions& options_;
  std::shared_ptr<Scope> scope_;
  std::shared_ptr<Scope> root_scope_;  // the template's top level
  std::vector<std::string> buffers_;
  size_t counted_bytes_ = 0;       // of buffers_[0], already counted in counted_characters_
  size_t counted_characters_ = 0;
  std::vector<std::pair<size_t, size_t>> generation_characters_;
  uint64_t iterations_ = 0;
  int macro_depth_ = 0;
  int depth_ = 0;
  const Value* block_content_ = nullptr;  // the body output a filter block's filter chain starts from
  std::vector<std::shared_ptr<Object>> tracked_;  // released at the end (Note [Value nesting])
};

}  // namespace finetune::jinja
