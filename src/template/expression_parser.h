// The token stream and jinja2's expression grammar (its Parser from parse_expression down, and
// assignment targets), which the statement parser (parser.cpp) builds on. Note [Nesting limits] is
// in parser.h.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ast.h"
#include "finetune/template/template.h"
#include "lexer.h"

namespace finetune::jinja {

// Whether jinja2's compiler evaluates `expr` when compiling (literals and operations on them).
bool is_constant(const Expr& expr);
// Marks every subscript in `expr` as inside a constant output (GetItemExpr::constant).
void mark_constant_subscripts(Expr& expr);

class ExpressionParser {
 public:
  ExpressionParser(std::vector<Token> tokens, const std::string& name, int max_depth)
      : tokens_(std::move(tokens)), name_(name), max_depth_(max_depth) {}

 protected:

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
    explicit DepthGuard(ExpressionParser& parser) : parser_(parser) {
      if (++parser_.depth_ > parser_.max_depth_) {
        parser_.fail("template nested deeper than " + std::to_string(parser_.max_depth_) + " levels");
      }
    }
    ~DepthGuard() { --parser_.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    ExpressionParser& parser_;
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

  // Assignment targets: names, tuples of targets, namespace attributes.
  void check_assignable(const std::string& name, size_t line) const;
  bool at_tuple_end(const std::vector<std::string>& extra_end) const;
  Target parse_target_tuple(const std::vector<std::string>& extra_end, bool with_namespace);
  Target parse_target_primary(bool with_namespace);
  Target target_from(const Expr& expr) const;

  // Expressions, from the loosest binding (conditional expressions) to the tightest.
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_condexpr();
  using ParseFunction = ExprPtr (ExpressionParser::*)();
  ExprPtr parse_chain(ParseFunction parse_operand, std::initializer_list<std::pair<const char*, ChainOp>> ops, bool named);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary_with_filter();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_tuple(bool with_condexpr, const std::vector<std::string>& extra_end, bool explicit_parentheses);
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();
  void parse_call_args(CallArgs& args);
  ExprPtr parse_call(ExprPtr callee);
  std::string parse_dotted_name();
  ExprPtr parse_filter(ExprPtr node, bool start_inline);
  ExprPtr parse_test(ExprPtr node);

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  const std::string& name_;
  int max_depth_;
  int depth_ = 0;  // Note [Nesting limits]
  // The names read inside each macro body being parsed (jinja2's find_undeclared decides from them
  // whether a macro takes caller, varargs and kwargs).
  std::vector<std::unordered_set<std::string>> loaded_names_;
};

}  // namespace finetune::jinja
