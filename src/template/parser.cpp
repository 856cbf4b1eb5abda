#include "parser.h"

#include <algorithm>
#include <initializer_list>
#include <unordered_set>

#include "builtins.h"
#include "finetune/template/template.h"
#include "lexer.h"
#include "python_text.h"

namespace finetune::jinja {
namespace {

const std::unordered_set<std::string> kUnsupportedTags = {"extends", "include", "import", "from", "autoescape"};

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& name, int max_depth)
      : tokens_(std::move(tokens)), name_(name), max_depth_(max_depth) {}

  std::shared_ptr<TemplateProgram> run() {
    auto program = std::make_shared<TemplateProgram>();
    program->name = name_;
    program->body = subparse({});
    program->has_generation = has_generation_;
    return program;
  }

 private:
  // --- token stream

  const Token& current() const { return tokens_[pos_]; }
  const Token& look() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  const Token& next() {
    const Token& token = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return token;
  }
  static bool is_name(const Token& token, const char* name) {
    return token.type == TokenType::Name && token.text == name;
  }
  bool at_name(const char* name) const { return is_name(current(), name); }
  bool at_op(const char* op) const { return current().type == TokenType::Operator && current().text == op; }
  bool skip_name(const char* name) {
    if (!at_name(name)) return false;
    next();
    return true;
  }
  bool skip_op(const char* op) {
    if (!at_op(op)) return false;
    next();
    return true;
  }

  [[noreturn]] void fail(const std::string& message, size_t line) const { throw TemplateError(name_, line, message); }
  [[noreturn]] void fail(const std::string& message) const { fail(message, current().line); }

  static std::string describe(const Token& token) {
    switch (token.type) {
      case TokenType::Name:
      case TokenType::Operator: return token.text;
      case TokenType::Text: return "template data / text";
      case TokenType::VariableBegin: return "begin of print statement";
      case TokenType::VariableEnd: return "end of print statement";
      case TokenType::BlockBegin: return "begin of statement block";
      case TokenType::BlockEnd: return "end of statement block";
      case TokenType::String: return "string";
      case TokenType::Integer: return "integer";
      case TokenType::Float: return "float";
      case TokenType::End: return "end of template";
    }
    return "token";
  }

  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected token '") + op + "', got '" + describe(current()) + "'");
  }
  void expect(TokenType type, const char* what) {
    if (current().type != type) fail(std::string("expected token '") + what + "', got '" + describe(current()) + "'");
    next();
  }
  std::string expect_name() {
    if (current().type != TokenType::Name) fail("expected token 'name', got '" + describe(current()) + "'");
    return next().text;
  }

  // Note [Nesting limits]
  class DepthGuard {
   public:
    explicit DepthGuard(Parser& parser) : parser_(parser) {
      if (++parser_.depth_ > parser_.max_depth_) {
        parser_.fail("template nested deeper than " + std::to_string(parser_.max_depth_) + " levels");
      }
    }
    ~DepthGuard() { --parser_.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    Parser& parser_;
  };

  template <class T>
  std::unique_ptr<T> finish(std::unique_ptr<T> node) {
    int depth = 0;
    for_each_child(*node, [&](const Expr& child) { depth = std::max(depth, child.depth); });
    node->depth = depth + 1;
    if (node->depth > max_depth_) {
      fail("expression nested deeper than " + std::to_string(max_depth_) + " levels", node->line);
    }
    return node;
  }

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
        out.push_back(std::make_unique<OutputStmt>(expr_line, parse_expression(true)));
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

  // --- assignment targets

  void check_assignable(const std::string& name, size_t line) const {
    static const std::unordered_set<std::string> kConstants = {"true", "false", "none", "True", "False", "None"};
    if (kConstants.count(name) != 0) fail("can't assign to 'const'", line);
  }

  bool at_tuple_end(const std::vector<std::string>& extra_end) const {
    const Token& token = current();
    if (token.type == TokenType::VariableEnd || token.type == TokenType::BlockEnd || at_op(")")) return true;
    return token.type == TokenType::Name &&
           std::find(extra_end.begin(), extra_end.end(), token.text) != extra_end.end();
  }

  // jinja2's parse_assign_target: names, tuples of them (with or without parentheses), and with
  // `with_namespace` a namespace attribute (ns.attr).
  Target parse_target_tuple(const std::vector<std::string>& extra_end, bool with_namespace) {
    const size_t line = current().line;
    std::vector<Target> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (at_tuple_end(extra_end)) break;
      items.push_back(parse_target_primary(with_namespace));
      if (at_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (items.empty()) fail("Expected an expression, got '" + describe(current()) + "'");
      return std::move(items.front());
    }
    Target target;
    target.kind = Target::Kind::Tuple;
    target.items = std::move(items);
    target.line = line;
    return target;
  }

  Target parse_target_primary(bool with_namespace) {
    const Token token = current();
    if (token.type == TokenType::Name) {
      next();
      check_assignable(token.text, token.line);
      Target target;
      target.name = token.text;
      target.line = token.line;
      if (with_namespace && at_op(".")) {
        next();
        target.kind = Target::Kind::NamespaceAttr;
        target.attribute = expect_name();
      }
      return target;
    }
    if (at_op("(")) {
      next();
      ExprPtr expr = parse_tuple(true, {}, true);
      expect_op(")");
      return target_from(*expr);
    }
    fail("can't assign to '" + describe(token) + "'");
  }

  Target target_from(const Expr& expr) const {
    Target target;
    target.line = expr.line;
    if (expr.kind == Expr::Kind::Name) {
      target.name = static_cast<const NameExpr&>(expr).name;
      return target;
    }
    if (expr.kind == Expr::Kind::Tuple) {
      target.kind = Target::Kind::Tuple;
      for (const ExprPtr& item : static_cast<const SequenceExpr&>(expr).items) target.items.push_back(target_from(*item));
      return target;
    }
    fail("can't assign to this expression", expr.line);
  }

  // --- expressions

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    size_t line = current().line;
    ExprPtr expr = parse_or();
    while (skip_name("if")) {
      auto node = std::make_unique<ConditionalExpr>(line);
      node->then_value = std::move(expr);
      node->test = parse_or();
      if (skip_name("else")) {
        DepthGuard guard(*this);
        node->else_value = parse_condexpr();
      }
      expr = finish(std::move(node));
      line = current().line;
    }
    return expr;
  }

  template <class ParseOperand>
  ExprPtr parse_chain(ParseOperand parse_operand, std::initializer_list<std::pair<const char*, ChainOp>> ops,
                      bool named) {
    const size_t line = current().line;
    ExprPtr first = (this->*parse_operand)();
    std::unique_ptr<ChainExpr> chain;
    while (true) {
      const std::pair<const char*, ChainOp>* match = nullptr;
      for (const auto& op : ops) {
        if (named ? at_name(op.first) : at_op(op.first)) match = &op;
      }
      if (match == nullptr) break;
      next();
      if (!chain) chain = std::make_unique<ChainExpr>(line, std::move(first));
      chain->rest.emplace_back(match->second, (this->*parse_operand)());
    }
    if (!chain) return first;
    return finish(std::move(chain));
  }

  ExprPtr parse_or() { return parse_chain(&Parser::parse_and, {{"or", ChainOp::Or}}, true); }
  ExprPtr parse_and() { return parse_chain(&Parser::parse_not, {{"and", ChainOp::And}}, true); }

  ExprPtr parse_not() {
    if (!at_name("not")) return parse_compare();
    const size_t line = next().line;
    DepthGuard guard(*this);
    return finish(std::make_unique<UnaryExpr>(Expr::Kind::Not, line, parse_not()));
  }

  ExprPtr parse_compare() {
    const size_t line = current().line;
    ExprPtr first = parse_math1();
    std::unique_ptr<CompareExpr> node;
    static const std::pair<const char*, CompareOp> kOps[] = {
        {"==", CompareOp::Equal}, {"!=", CompareOp::NotEqual}, {"<", CompareOp::Less},
        {"<=", CompareOp::LessEqual}, {">", CompareOp::Greater}, {">=", CompareOp::GreaterEqual}};
    while (true) {
      std::optional<CompareOp> op;
      for (const auto& candidate : kOps) {
        if (at_op(candidate.first)) op = candidate.second;
      }
      if (op) {
        next();
      } else if (skip_name("in")) {
        op = CompareOp::In;
      } else if (at_name("not") && is_name(look(), "in")) {
        next();
        next();
        op = CompareOp::NotIn;
      } else {
        break;
      }
      if (!node) node = std::make_unique<CompareExpr>(line, std::move(first));
      node->rest.emplace_back(*op, parse_math1());
    }
    if (!node) return first;
    return finish(std::move(node));
  }

  ExprPtr parse_math1() {
    return parse_chain(&Parser::parse_concat, {{"+", ChainOp::Add}, {"-", ChainOp::Subtract}}, false);
  }

  ExprPtr parse_concat() {
    const size_t line = current().line;
    ExprPtr first = parse_math2();
    if (!at_op("~")) return first;
    auto node = std::make_unique<ConcatExpr>(line);
    node->items.push_back(std::move(first));
    while (skip_op("~")) node->items.push_back(parse_math2());
    return finish(std::move(node));
  }

  ExprPtr parse_math2() {
    return parse_chain(&Parser::parse_pow,
                       {{"*", ChainOp::Multiply}, {"/", ChainOp::Divide}, {"//", ChainOp::FloorDivide},
                        {"%", ChainOp::Modulo}},
                       false);
  }

  ExprPtr parse_pow() { return parse_chain(&Parser::parse_unary_with_filter, {{"**", ChainOp::Power}}, false); }

  ExprPtr parse_unary_with_filter() { return parse_unary(true); }

  ExprPtr parse_unary(bool with_filter) {
    const size_t line = current().line;
    ExprPtr node;
    if (at_op("-") || at_op("+")) {
      const Expr::Kind kind = at_op("-") ? Expr::Kind::Negate : Expr::Kind::Positive;
      next();
      DepthGuard guard(*this);
      node = finish(std::make_unique<UnaryExpr>(kind, line, parse_unary(false)));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& token = current();
    const size_t line = token.line;
    switch (token.type) {
      case TokenType::Name: {
        const std::string name = next().text;
        if (name == "true" || name == "True") return std::make_unique<LiteralExpr>(line, Value::boolean(true));
        if (name == "false" || name == "False") return std::make_unique<LiteralExpr>(line, Value::boolean(false));
        if (name == "none" || name == "None") return std::make_unique<LiteralExpr>(line, Value::none());
        for (auto& names : loaded_names_) names.insert(name);
        return std::make_unique<NameExpr>(line, name);
      }
      case TokenType::String: {
        std::string text = next().text;
        while (current().type == TokenType::String) text += next().text;  // adjacent literals join
        return std::make_unique<LiteralExpr>(line, Value::string(std::move(text)));
      }
      case TokenType::Integer: return std::make_unique<LiteralExpr>(line, Value::integer(next().integer));
      case TokenType::Float: return std::make_unique<LiteralExpr>(line, Value::number(next().number));
      case TokenType::Operator:
        if (at_op("(")) {
          next();
          ExprPtr node = parse_tuple(true, {}, true);
          expect_op(")");
          return node;
        }
        if (at_op("[")) return parse_list();
        if (at_op("{")) return parse_dict();
        break;
      default: break;
    }
    fail("unexpected '" + describe(token) + "'");
  }

  // Expressions separated by commas: a tuple when there is a comma (a trailing one allowed).
  ExprPtr parse_tuple(bool with_condexpr, const std::vector<std::string>& extra_end, bool explicit_parentheses) {
    const size_t line = current().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (at_tuple_end(extra_end)) break;
      items.push_back(parse_expression(with_condexpr));
      if (at_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items.front());
      if (!explicit_parentheses) fail("Expected an expression, got '" + describe(current()) + "'");
    }
    auto node = std::make_unique<SequenceExpr>(Expr::Kind::Tuple, line);
    node->items = std::move(items);
    return finish(std::move(node));
  }

  ExprPtr parse_list() {
    auto node = std::make_unique<SequenceExpr>(Expr::Kind::List, next().line);
    while (!at_op("]")) {
      if (!node->items.empty()) expect_op(",");
      if (at_op("]")) break;
      node->items.push_back(parse_expression(true));
    }
    expect_op("]");
    return finish(std::move(node));
  }

  ExprPtr parse_dict() {
    auto node = std::make_unique<DictExpr>(next().line);
    while (!at_op("}")) {
      if (!node->items.empty()) expect_op(",");
      if (at_op("}")) break;
      ExprPtr key = parse_expression(true);
      expect_op(":");
      ExprPtr value = parse_expression(true);
      node->items.emplace_back(std::move(key), std::move(value));
    }
    expect_op("}");
    return finish(std::move(node));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (at_op(".") || at_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (at_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (at_op("|")) {
        node = parse_filter(std::move(node), false);
      } else if (at_name("is")) {
        node = parse_test(std::move(node));
      } else if (at_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token token = next();
    if (token.text == ".") {
      const Token attr = next();
      if (attr.type == TokenType::Name) return finish(std::make_unique<GetAttrExpr>(token.line, std::move(node), attr.text));
      if (attr.type != TokenType::Integer) fail("expected name or number", attr.line);
      auto index = std::make_unique<LiteralExpr>(attr.line, Value::integer(attr.integer));
      return finish(std::make_unique<GetItemExpr>(token.line, std::move(node), std::move(index)));
    }
    std::vector<ExprPtr> args;
    while (!at_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    ExprPtr index;
    if (args.size() == 1) {
      index = std::move(args.front());
    } else {
      auto tuple = std::make_unique<SequenceExpr>(Expr::Kind::Tuple, token.line);
      tuple->items = std::move(args);
      index = finish(std::move(tuple));
    }
    return finish(std::make_unique<GetItemExpr>(token.line, std::move(node), std::move(index)));
  }

  ExprPtr parse_subscribed() {
    const size_t line = current().line;
    auto slice = std::make_unique<SliceExpr>(line);
    if (!skip_op(":")) {
      ExprPtr node = parse_expression(true);
      if (!skip_op(":")) return node;
      slice->start = std::move(node);
    }
    if (!at_op(":") && !at_op("]") && !at_op(",")) slice->stop = parse_expression(true);
    if (skip_op(":") && !at_op("]") && !at_op(",")) slice->step = parse_expression(true);
    return finish(std::move(slice));
  }

  void parse_call_args(CallArgs& args) {
    const size_t line = current().line;
    auto ensure = [&](bool ok) {
      if (!ok) fail("invalid syntax for function call expression", line);
    };
    DepthGuard guard(*this);
    expect_op("(");
    bool require_comma = false;
    while (!at_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (at_op(")")) break;
      }
      if (skip_op("*")) {
        ensure(!args.star_args && !args.star_kwargs);
        args.star_args = parse_expression(true);
      } else if (skip_op("**")) {
        ensure(!args.star_kwargs);
        args.star_kwargs = parse_expression(true);
      } else if (current().type == TokenType::Name && look().type == TokenType::Operator && look().text == "=") {
        ensure(!args.star_kwargs);
        std::string key = next().text;
        next();
        args.keywords.emplace_back(std::move(key), parse_expression(true));
      } else {
        ensure(!args.star_args && !args.star_kwargs && args.keywords.empty());
        args.positional.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto node = std::make_unique<CallExpr>(current().line, std::move(callee));
    parse_call_args(node->args);
    return finish(std::move(node));
  }

  std::string parse_dotted_name() {
    std::string name = expect_name();
    while (skip_op(".")) name += "." + expect_name();
    return name;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (at_op("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      const size_t line = current().line;
      auto filter = std::make_unique<FilterExpr>(Expr::Kind::Filter, line, std::move(node), parse_dotted_name());
      if (at_op("(")) parse_call_args(filter->args);
      node = finish(std::move(filter));
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    const size_t line = next().line;
    const bool negated = skip_name("not");
    auto test = std::make_unique<FilterExpr>(Expr::Kind::Test, line, std::move(node), parse_dotted_name());
    const Token& token = current();
    const bool starts_primary = token.type == TokenType::Name || token.type == TokenType::String ||
                                token.type == TokenType::Integer || token.type == TokenType::Float ||
                                at_op("(") || at_op("[") || at_op("{");
    if (at_op("(")) {
      parse_call_args(test->args);
    } else if (starts_primary && !at_name("else") && !at_name("or") && !at_name("and")) {
      if (at_name("is")) fail("You cannot chain multiple tests with is");
      DepthGuard guard(*this);
      test->args.positional.push_back(parse_postfix(parse_primary()));
    }
    ExprPtr result = finish(std::move(test));
    if (negated) result = finish(std::make_unique<UnaryExpr>(Expr::Kind::Not, line, std::move(result)));
    return result;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  const std::string& name_;
  int max_depth_;
  int depth_ = 0;
  int loop_depth_ = 0;
  bool has_generation_ = false;
  std::vector<std::unordered_set<std::string>> loaded_names_;  // one set per macro body being parsed
  std::unordered_set<std::string> block_names_;
};

// jinja2's compiler rejects an unknown filter or test, except in the soft frame of an {% if %}
// (condition and branches) or a conditional expression, where it fails only when applied.
class NameChecker {
 public:
  explicit NameChecker(const std::string& name) : name_(name) {}

  void check_body(const Body& body, bool soft) const {
    for (const StmtPtr& stmt : body) check_stmt(*stmt, soft);
  }

 private:
  void check_expr(const Expr& expr, bool soft) const {
    if (expr.kind == Expr::Kind::Filter || expr.kind == Expr::Kind::Test) {
      const auto& node = static_cast<const FilterExpr&>(expr);
      const bool known = expr.kind == Expr::Kind::Filter ? find_filter(node.name) != nullptr
                                                         : find_test(node.name) != nullptr;
      if (!known && !soft) {
        throw TemplateError(name_, expr.line, std::string("No ") + (expr.kind == Expr::Kind::Filter ? "filter" : "test") +
                                                  " named '" + node.name + "'.");
      }
    }
    const bool child_soft = soft || expr.kind == Expr::Kind::Conditional;
    for_each_child(expr, [&](const Expr& child) { check_expr(child, child_soft); });
  }

  void check_macro(const MacroDefinition& macro) const {
    for (const ExprPtr& value : macro.defaults) check_expr(*value, false);
    check_body(macro.body, false);
  }

  void check_stmt(const Stmt& stmt, bool soft) const {
    switch (stmt.kind) {
      case Stmt::Kind::Output: check_expr(*static_cast<const OutputStmt&>(stmt).value, soft); break;
      case Stmt::Kind::If: {
        const auto& node = static_cast<const IfStmt&>(stmt);
        for (const auto& [test, body] : node.branches) {
          check_expr(*test, true);
          check_body(body, true);
        }
        check_body(node.else_body, true);
        break;
      }
      case Stmt::Kind::For: {
        const auto& node = static_cast<const ForStmt&>(stmt);
        check_expr(*node.iterable, soft);
        if (node.condition) check_expr(*node.condition, false);
        check_body(node.body, false);
        check_body(node.else_body, false);
        break;
      }
      case Stmt::Kind::Set: check_expr(*static_cast<const SetStmt&>(stmt).value, soft); break;
      case Stmt::Kind::SetBlock: {
        const auto& node = static_cast<const SetBlockStmt&>(stmt);
        if (node.filter) check_expr(*node.filter, false);
        check_body(node.body, false);
        break;
      }
      case Stmt::Kind::Macro: check_macro(static_cast<const MacroStmt&>(stmt).macro); break;
      case Stmt::Kind::CallBlock: {
        const auto& node = static_cast<const CallBlockStmt&>(stmt);
        check_expr(*node.call, soft);
        check_macro(node.caller);
        break;
      }
      case Stmt::Kind::FilterBlock: {
        const auto& node = static_cast<const FilterBlockStmt&>(stmt);
        check_expr(*node.filter, false);
        check_body(node.body, false);
        break;
      }
      case Stmt::Kind::With: {
        const auto& node = static_cast<const WithStmt&>(stmt);
        for (const ExprPtr& value : node.values) check_expr(*value, soft);
        check_body(node.body, false);
        break;
      }
      case Stmt::Kind::Generation: check_body(static_cast<const BodyStmt&>(stmt).body, false); break;
      case Stmt::Kind::Block: check_body(static_cast<const BlockStmt&>(stmt).body, false); break;
      default: break;
    }
  }

  const std::string& name_;
};

}  // namespace

std::shared_ptr<TemplateProgram> parse_template(const std::string& source, const std::string& name,
                                                int max_nesting_depth) {
  std::shared_ptr<TemplateProgram> program = Parser(tokenize(source, name), name, max_nesting_depth).run();
  NameChecker(name).check_body(program->body, false);
  return program;
}

}  // namespace finetune::jinja
