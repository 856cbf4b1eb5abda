#include "name_check.h"

#include "builtins.h"
#include "finetune/template/template.h"

namespace finetune::jinja {
namespace {

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

void check_filter_and_test_names(const Body& body, const std::string& template_name) {
  NameChecker(template_name).check_body(body, false);
}

}  // namespace finetune::jinja
