#include "parser.h"

#include <algorithm>
#include <unordered_set>

#include "expression_parser.h"
#include "finetune/template/template.h"
#include "name_check.h"
#include "python_text.h"
#include "scope_analysis.h"

namespace finetune::jinja {
namespace {

const std::unordered_set<std::string> kUnsupportedTags = {"extends", "include", "import", "from", "autoescape"};

// jinja2's statements ({% for %}, {% if %}, {% set %}, {% macro %}, ...) over the expression
// grammar.
class Parser : public ExpressionParser {
 public:
  using ExpressionParser::ExpressionParser;

  std::shared_ptr<TemplateProgram> run() {
    auto program = std::make_shared<TemplateProgram>();
    program->name = name_;
    program->body = subparse({});
    program->has_generation = has_generation_;
    return program;
  }

 private:
  // --- statements

  Body subparse(const std::vector<std::string>& end_names) {
    Body body;
    while (true) {
      const Token& token = current();
      switch (token.type) {
        case TokenType::Text:
          body.push_back(std::make_unique<TextStmt>(token.line, token.text));
          next();
          break;
        case TokenType::VariableBegin: {
          next();
          const size_t line = current().line;
          ExprPtr value = parse_tuple(true, {}, false);
          if (is_constant(*value)) mark_constant_subscripts(*value);
          expect(TokenType::VariableEnd, "end of print statement");
          body.push_back(std::make_unique<OutputStmt>(line, std::move(value)));
          break;
        }
        case TokenType::BlockBegin: {
          next();
          if (current().type == TokenType::Name &&
              std::find(end_names.begin(), end_names.end(), current().text) != end_names.end()) {
            return body;
          }
          parse_statement(body);
          expect(TokenType::BlockEnd, "end of statement block");
          break;
        }
        case TokenType::End:
          if (!end_names.empty()) {
            std::string wanted;
            for (const std::string& end : end_names) wanted += (wanted.empty() ? "'" : " or '") + end + "'";
            fail("Unexpected end of template. Jinja was looking for the following tags: " + wanted + ".");
          }
          return body;
        default: fail("unexpected '" + describe(token) + "'");
      }
    }
  }

  // The body of a statement: its tag's end, then statements up to one of `end_names`, which is
  // consumed when `drop_end`.
  Body parse_statements(const std::vector<std::string>& end_names, bool drop_end) {
    skip_op(":");
    expect(TokenType::BlockEnd, "end of statement block");
    Body body = subparse(end_names);
    if (drop_end) next();
    return body;
  }

  void parse_statement(Body& out) {
    DepthGuard guard(*this);
    if (current().type != TokenType::Name) fail("tag name expected");
    const std::string tag = current().text;
    const size_t line = current().line;
    if (tag == "for") {
      out.push_back(parse_for());
    } else if (tag == "if") {
      out.push_back(parse_if());
    } else if (tag == "set") {
      out.push_back(parse_set());
    } else if (tag == "macro") {
      out.push_back(parse_macro());
    } else if (tag == "call") {
      out.push_back(parse_call_block());
    } else if (tag == "filter") {
      next();
      auto node = std::make_unique<FilterBlockStmt>(line);
      node->filter = parse_filter(nullptr, true);
      node->body = parse_nested_body({"endfilter"});
      out.push_back(std::move(node));
    } else if (tag == "with") {
      out.push_back(parse_with());
    } else if (tag == "block") {
      out.push_back(parse_block());
    } else if (tag == "print") {
      next();
      bool first = true;
      while (current().type != TokenType::BlockEnd) {
        if (!first) expect_op(",");
        first = false;
        const size_t expr_line = current().line;
        ExprPtr value = parse_expression(true);
        if (is_constant(*value)) mark_constant_subscripts(*value);
        out.push_back(std::make_unique<OutputStmt>(expr_line, std::move(value)));
      }
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail("'" + tag + "' outside of a loop");
      next();
      out.push_back(std::make_unique<Stmt>(tag == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, line));
    } else if (tag == "generation") {
      next();
      // transformers' AssistantTracker renders the body as a caller: a function of its own.
      auto node = std::make_unique<BodyStmt>(Stmt::Kind::Generation, line);
      const int saved_loop_depth = loop_depth_;
      loop_depth_ = 0;
      node->body = parse_statements({"endgeneration"}, true);
      loop_depth_ = saved_loop_depth;
      has_generation_ = true;
      out.push_back(std::move(node));
    } else if (kUnsupportedTags.count(tag) != 0) {
      fail("the '" + tag + "' tag is not supported (chat templates are single files)");
    } else {
      fail("Encountered unknown tag '" + tag + "'.");
    }
  }

  // A body rendered in place but into its own buffer (filter, set and generation blocks): loop
  // control still reaches an enclosing loop, as in jinja2's generated code.
  Body parse_nested_body(const std::vector<std::string>& end_names) { return parse_statements(end_names, true); }

  StmtPtr parse_for() {
    auto node = std::make_unique<ForStmt>(next().line);
    node->target = parse_target_tuple({"in"}, false);
    if (!skip_name("in")) fail("expected token 'in', got '" + describe(current()) + "'");
    node->iterable = parse_tuple(false, {"recursive"}, false);
    if (skip_name("if")) node->condition = parse_expression(true);
    if (at_name("recursive")) fail("recursive loops are not supported");
    ++loop_depth_;
    node->body = parse_statements({"endfor", "else"}, false);
    --loop_depth_;
    if (next().text == "else") node->else_body = parse_statements({"endfor"}, true);
    return node;
  }

  StmtPtr parse_if() {
    auto node = std::make_unique<IfStmt>(next().line);
    while (true) {
      ExprPtr test = parse_tuple(false, {}, false);
      Body body = parse_statements({"elif", "else", "endif"}, false);
      node->branches.emplace_back(std::move(test), std::move(body));
      const std::string end = next().text;
      if (end == "elif") continue;
      if (end == "else") node->else_body = parse_statements({"endif"}, true);
      break;
    }
    return node;
  }

  StmtPtr parse_set() {
    const size_t line = next().line;
    Target target = parse_target_tuple({}, true);
    if (skip_op("=")) {
      auto node = std::make_unique<SetStmt>(line);
      node->target = std::move(target);
      node->value = parse_tuple(true, {}, false);
      return node;
    }
    auto node = std::make_unique<SetBlockStmt>(line);
    node->target = std::move(target);
    node->filter = parse_filter(nullptr, false);
    node->body = parse_nested_body({"endset"});
    return node;
  }

  void parse_signature(MacroDefinition& macro) {
    expect_op("(");
    while (!at_op(")")) {
      if (!macro.params.empty()) expect_op(",");
      const size_t line = current().line;
      const std::string param = expect_name();
      check_assignable(param, line);
      if (skip_op("=")) {
        macro.defaults.push_back(parse_expression(true));
      } else if (!macro.defaults.empty()) {
        fail("non-default argument follows default argument");
      }
      macro.params.push_back(param);
    }
    expect_op(")");
    const auto caller = std::find(macro.params.begin(), macro.params.end(), "caller");
    if (caller != macro.params.end() &&
        static_cast<size_t>(caller - macro.params.begin()) < macro.params.size() - macro.defaults.size()) {
      fail("When defining macros or call blocks the special \"caller\" argument must be omitted or be given a default.");
    }
  }

  // The body of a macro or caller: a new function, so loop control does not cross it, and the
  // names it reads decide whether it takes caller / varargs / kwargs (jinja2's find_undeclared).
  void parse_macro_body(MacroDefinition& macro, const char* end_name) {
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    loaded_names_.emplace_back();
    macro.body = parse_statements({end_name}, true);
    const std::unordered_set<std::string> names = std::move(loaded_names_.back());
    loaded_names_.pop_back();
    loop_depth_ = saved_loop_depth;
    macro.uses_caller = names.count("caller") != 0;
    macro.uses_varargs = names.count("varargs") != 0;
    macro.uses_kwargs = names.count("kwargs") != 0;
  }

  StmtPtr parse_macro() {
    auto node = std::make_unique<MacroStmt>(next().line);
    const size_t line = current().line;
    node->macro.name = expect_name();
    check_assignable(node->macro.name, line);
    parse_signature(node->macro);
    parse_macro_body(node->macro, "endmacro");
    return node;
  }

  StmtPtr parse_call_block() {
    auto node = std::make_unique<CallBlockStmt>(next().line);
    node->caller.name = "caller";
    if (at_op("(")) parse_signature(node->caller);
    ExprPtr call = parse_expression(true);
    if (call->kind != Expr::Kind::Call) fail("expected call", node->line);
    node->call.reset(static_cast<CallExpr*>(call.release()));
    parse_macro_body(node->caller, "endcall");
    return node;
  }

  StmtPtr parse_block() {
    auto node = std::make_unique<BlockStmt>(next().line);
    node->name = expect_name();
    if (!block_names_.insert(node->name).second) fail("block '" + node->name + "' defined twice");
    node->scoped = skip_name("scoped");
    node->required = skip_name("required");
    // A block is a function of its own in jinja2: loop control does not cross it.
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    node->body = parse_statements({"endblock"}, true);
    loop_depth_ = saved_loop_depth;
    if (current().type == TokenType::Name) {
      if (current().text != node->name) fail("'" + node->name + "' block ended with '" + current().text + "'");
      next();
    }
    if (node->required) {
      for (const StmtPtr& stmt : node->body) {
        const bool blank = stmt->kind == Stmt::Kind::Text &&
                           python_strip(static_cast<const TextStmt&>(*stmt).text, std::nullopt, true, true).empty();
        if (!blank) fail("Required blocks can only contain comments or whitespace", stmt->line);
      }
    }
    return node;
  }

  StmtPtr parse_with() {
    auto node = std::make_unique<WithStmt>(next().line);
    while (current().type != TokenType::BlockEnd) {
      if (!node->targets.empty()) expect_op(",");
      node->targets.push_back(parse_target_tuple({}, false));
      expect_op("=");
      node->values.push_back(parse_expression(true));
    }
    node->body = parse_statements({"endwith"}, true);
    return node;
  }

  int loop_depth_ = 0;  // loops around the statement being parsed, within the current function
  bool has_generation_ = false;
  std::unordered_set<std::string> block_names_;
};

}  // namespace

std::shared_ptr<TemplateProgram> parse_template(const std::string& source, const std::string& name,
                                                int max_nesting_depth) {
  std::shared_ptr<TemplateProgram> program = Parser(tokenize(source, name), name, max_nesting_depth).run();
  check_filter_and_test_names(program->body, name);
  analyze_scopes(*program);
  return program;
}

}  // namespace finetune::jinja
