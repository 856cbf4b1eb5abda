// The parsed template: expression and statement nodes, as jinja2's parser builds them.
// Chains of one precedence level (a + b - c, a and b and c) are one node with a list of operands,
// so a long chain does not make a deep tree (Note [Nesting limits] in parser.h).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "value.h"

namespace finetune::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Expr {
  enum class Kind {
    Literal, Name, List, Tuple, Dict, GetAttr, GetItem, Slice, Call, Filter, Test,
    Not, Negate, Positive, Chain, Concat, Compare, Conditional
  };
  Expr(Kind kind, size_t line) : kind(kind), line(line) {}
  virtual ~Expr() = default;

  Kind kind;
  size_t line;
  int depth = 1;  // nodes on the longest path down from here
};

struct LiteralExpr : Expr {
  LiteralExpr(size_t line, Value value) : Expr(Kind::Literal, line), value(std::move(value)) {}
  Value value;
};

struct NameExpr : Expr {
  NameExpr(size_t line, std::string name) : Expr(Kind::Name, line), name(std::move(name)) {}
  std::string name;
};

struct SequenceExpr : Expr {  // List or Tuple
  using Expr::Expr;
  std::vector<ExprPtr> items;
};

struct DictExpr : Expr {
  explicit DictExpr(size_t line) : Expr(Kind::Dict, line) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct GetAttrExpr : Expr {  // object.name
  GetAttrExpr(size_t line, ExprPtr object, std::string name)
      : Expr(Kind::GetAttr, line), object(std::move(object)), name(std::move(name)) {}
  ExprPtr object;
  std::string name;
};

struct GetItemExpr : Expr {  // object[index]; index may be a SliceExpr
  GetItemExpr(size_t line, ExprPtr object, ExprPtr index)
      : Expr(Kind::GetItem, line), object(std::move(object)), index(std::move(index)) {}
  ExprPtr object;
  ExprPtr index;
  // Inside a {{ }} whose whole expression is constant: jinja2's compiler evaluates that expression
  // when compiling, subscripts through the sandbox's getitem, so a slice of something unsliceable
  // gives Undefined there instead of the TypeError it raises at render time.
  bool constant = false;
};

struct SliceExpr : Expr {  // start:stop:step, each optional
  explicit SliceExpr(size_t line) : Expr(Kind::Slice, line) {}
  ExprPtr start, stop, step;
};

struct CallArgs {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  ExprPtr star_args;    // *args
  ExprPtr star_kwargs;  // **kwargs
};

struct CallExpr : Expr {
  CallExpr(size_t line, ExprPtr callee) : Expr(Kind::Call, line), callee(std::move(callee)) {}
  ExprPtr callee;
  CallArgs args;
};

// operand|name(args), or operand is name(args). A filter's operand is null at the head of a filter
// block's chain (the block's output goes there).
struct FilterExpr : Expr {
  FilterExpr(Kind kind, size_t line, ExprPtr operand, std::string name)
      : Expr(kind, line), operand(std::move(operand)), name(std::move(name)) {}
  ExprPtr operand;
  std::string name;
  CallArgs args;
};

struct UnaryExpr : Expr {  // Not, Negate, Positive
  UnaryExpr(Kind kind, size_t line, ExprPtr operand) : Expr(kind, line), operand(std::move(operand)) {}
  ExprPtr operand;
};

enum class ChainOp { Add, Subtract, Multiply, Divide, FloorDivide, Modulo, Power, And, Or };

struct ChainExpr : Expr {  // first op1 e1 op2 e2 ..., left to right
  ChainExpr(size_t line, ExprPtr first) : Expr(Kind::Chain, line), first(std::move(first)) {}
  ExprPtr first;
  std::vector<std::pair<ChainOp, ExprPtr>> rest;
};

struct ConcatExpr : Expr {  // a ~ b ~ c
  explicit ConcatExpr(size_t line) : Expr(Kind::Concat, line) {}
  std::vector<ExprPtr> items;
};

enum class CompareOp { Equal, NotEqual, Less, LessEqual, Greater, GreaterEqual, In, NotIn };

struct CompareExpr : Expr {  // a < b <= c: Python chained comparison
  CompareExpr(size_t line, ExprPtr first) : Expr(Kind::Compare, line), first(std::move(first)) {}
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
};

struct ConditionalExpr : Expr {  // then_value if test else else_value (else optional)
  explicit ConditionalExpr(size_t line) : Expr(Kind::Conditional, line) {}
  ExprPtr test, then_value, else_value;
};

// Names a frame (the template, a loop body, a macro, a block body) assigns without reading them
// first: jinja2 binds them to Undefined when the frame starts (Note [Static scoping] in
// scope_analysis.h). Filled in by analyze_scopes after parsing.
using UnboundNames = std::vector<std::string>;

// Assignment targets: a name, a tuple of targets, or a namespace attribute (ns.attr).
struct Target {
  enum class Kind { Name, Tuple, NamespaceAttr };
  Kind kind = Kind::Name;
  std::string name;  // Name, NamespaceAttr: the variable
  std::string attribute;
  std::vector<Target> items;
  size_t line = 0;
};

// A macro, or the caller of a {% call %} block.
struct MacroDefinition {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  Body body;
  bool uses_caller = false;   // the body reads `caller`
  bool uses_varargs = false;  // ... `varargs`: extra positional arguments are accepted
  bool uses_kwargs = false;   // ... `kwargs`: unknown keyword arguments are accepted
  UnboundNames unbound;
};

struct Stmt {
  enum class Kind { Text, Output, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, With, Break, Continue, Generation, Block };
  Stmt(Kind kind, size_t line) : kind(kind), line(line) {}
  virtual ~Stmt() = default;

  Kind kind;
  size_t line;
};

struct TextStmt : Stmt {
  TextStmt(size_t line, std::string text) : Stmt(Kind::Text, line), text(std::move(text)) {}
  std::string text;
};

struct OutputStmt : Stmt {
  OutputStmt(size_t line, ExprPtr value) : Stmt(Kind::Output, line), value(std::move(value)) {}
  ExprPtr value;
};

struct IfStmt : Stmt {
  explicit IfStmt(size_t line) : Stmt(Kind::If, line) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, elif...
  Body else_body;
};

struct ForStmt : Stmt {
  explicit ForStmt(size_t line) : Stmt(Kind::For, line) {}
  Target target;
  ExprPtr iterable;
  ExprPtr condition;  // for x in xs if condition
  Body body;
  Body else_body;
  UnboundNames body_unbound;  // per iteration
  UnboundNames else_unbound;
};

struct SetStmt : Stmt {
  explicit SetStmt(size_t line) : Stmt(Kind::Set, line) {}
  Target target;
  ExprPtr value;
};

struct SetBlockStmt : Stmt {  // {% set x | filter %}...{% endset %}
  explicit SetBlockStmt(size_t line) : Stmt(Kind::SetBlock, line) {}
  Target target;
  ExprPtr filter;  // null, or a filter chain headed by a FilterExpr with a null operand
  Body body;
  UnboundNames unbound;
};

struct MacroStmt : Stmt {
  explicit MacroStmt(size_t line) : Stmt(Kind::Macro, line) {}
  MacroDefinition macro;
};

struct CallBlockStmt : Stmt {  // {% call(params) callee(args) %}body{% endcall %}
  explicit CallBlockStmt(size_t line) : Stmt(Kind::CallBlock, line) {}
  std::unique_ptr<CallExpr> call;
  MacroDefinition caller;
};

struct FilterBlockStmt : Stmt {
  explicit FilterBlockStmt(size_t line) : Stmt(Kind::FilterBlock, line) {}
  ExprPtr filter;  // a chain headed by a FilterExpr with a null operand
  Body body;
  UnboundNames unbound;
};

struct WithStmt : Stmt {
  explicit WithStmt(size_t line) : Stmt(Kind::With, line) {}
  std::vector<Target> targets;
  std::vector<ExprPtr> values;
  Body body;
  UnboundNames unbound;
};

struct BodyStmt : Stmt {  // Generation: {% generation %}body{% endgeneration %}
  BodyStmt(Kind kind, size_t line) : Stmt(kind, line) {}
  Body body;
  UnboundNames unbound;
};

// {% block name [scoped] [required] %}: rendered in place (a template that extends nothing). Its
// body sees the template's top-level variables, and with `scoped` also the enclosing ones.
struct BlockStmt : Stmt {
  explicit BlockStmt(size_t line) : Stmt(Kind::Block, line) {}
  std::string name;
  bool scoped = false;
  bool required = false;
  Body body;
  UnboundNames unbound;
};

struct TemplateProgram {
  std::string name;
  Body body;
  UnboundNames unbound;
  bool has_generation = false;
};

}  // namespace finetune::jinja

namespace finetune::jinja {

// Calls `visit` on each direct child expression of `expr`.
template <class Visit>
void for_each_child(const Expr& expr, Visit&& visit) {
  auto maybe = [&](const ExprPtr& child) {
    if (child) visit(*child);
  };
  auto args = [&](const CallArgs& call) {
    for (const ExprPtr& arg : call.positional) visit(*arg);
    for (const auto& keyword : call.keywords) visit(*keyword.second);
    maybe(call.star_args);
    maybe(call.star_kwargs);
  };
  switch (expr.kind) {
    case Expr::Kind::Literal:
    case Expr::Kind::Name: break;
    case Expr::Kind::List:
    case Expr::Kind::Tuple:
      for (const ExprPtr& item : static_cast<const SequenceExpr&>(expr).items) visit(*item);
      break;
    case Expr::Kind::Dict:
      for (const auto& [key, value] : static_cast<const DictExpr&>(expr).items) {
        visit(*key);
        visit(*value);
      }
      break;
    case Expr::Kind::GetAttr: visit(*static_cast<const GetAttrExpr&>(expr).object); break;
    case Expr::Kind::GetItem: {
      const auto& node = static_cast<const GetItemExpr&>(expr);
      visit(*node.object);
      visit(*node.index);
      break;
    }
    case Expr::Kind::Slice: {
      const auto& node = static_cast<const SliceExpr&>(expr);
      maybe(node.start);
      maybe(node.stop);
      maybe(node.step);
      break;
    }
    case Expr::Kind::Call: {
      const auto& node = static_cast<const CallExpr&>(expr);
      visit(*node.callee);
      args(node.args);
      break;
    }
    case Expr::Kind::Filter:
    case Expr::Kind::Test: {
      const auto& node = static_cast<const FilterExpr&>(expr);
      maybe(node.operand);
      args(node.args);
      break;
    }
    case Expr::Kind::Not:
    case Expr::Kind::Negate:
    case Expr::Kind::Positive: visit(*static_cast<const UnaryExpr&>(expr).operand); break;
    case Expr::Kind::Chain: {
      const auto& node = static_cast<const ChainExpr&>(expr);
      visit(*node.first);
      for (const auto& item : node.rest) visit(*item.second);
      break;
    }
    case Expr::Kind::Concat:
      for (const ExprPtr& item : static_cast<const ConcatExpr&>(expr).items) visit(*item);
      break;
    case Expr::Kind::Compare: {
      const auto& node = static_cast<const CompareExpr&>(expr);
      visit(*node.first);
      for (const auto& item : node.rest) visit(*item.second);
      break;
    }
    case Expr::Kind::Conditional: {
      const auto& node = static_cast<const ConditionalExpr&>(expr);
      visit(*node.test);
      visit(*node.then_value);
      maybe(node.else_value);
      break;
    }
  }
}

}  // namespace finetune::jinja
