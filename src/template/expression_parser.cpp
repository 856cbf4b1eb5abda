#include "expression_parser.h"

#include <optional>

namespace finetune::jinja {

// What jinja2's compiler can evaluate when compiling (as_const): literals and operations on them.
// Names and calls never are, nor the filters that take the render context.
bool is_constant(const Expr& expr) {
  switch (expr.kind) {
    case Expr::Kind::Name:
    case Expr::Kind::Call: return false;
    case Expr::Kind::Conditional:  // without else, jinja2 folds it only when its test is true
      if (!static_cast<const ConditionalExpr&>(expr).else_value) return false;
      break;
    case Expr::Kind::Filter: {
      static const std::unordered_set<std::string> kContextFilters = {"map", "select", "reject", "selectattr",
                                                                       "rejectattr"};
      if (kContextFilters.count(static_cast<const FilterExpr&>(expr).name) != 0) return false;
      if (!static_cast<const FilterExpr&>(expr).operand) return false;
      break;
    }
    default: break;
  }
  bool constant = true;
  for_each_child(expr, [&](const Expr& child) { constant = constant && is_constant(child); });
  return constant;
}

void mark_constant_subscripts(Expr& expr) {
  if (expr.kind == Expr::Kind::GetItem) static_cast<GetItemExpr&>(expr).constant = true;
  for_each_child(expr, [](const Expr& child) { mark_constant_subscripts(const_cast<Expr&>(child)); });
}

void ExpressionParser::check_assignable(const std::string& name, size_t line) const {
  static const std::unordered_set<std::string> kConstants = {"true", "false", "none", "True", "False", "None"};
  if (kConstants.count(name) != 0) fail("can't assign to 'const'", line);
}

bool ExpressionParser::at_tuple_end(const std::vector<std::string>& extra_end) const {
  const Token& token = current();
  if (token.type == TokenType::VariableEnd || token.type == TokenType::BlockEnd || at_op(")")) return true;
  return token.type == TokenType::Name &&
         std::find(extra_end.begin(), extra_end.end(), token.text) != extra_end.end();
}

// jinja2's parse_assign_target: names, tuples of them (with or without parentheses), and with
// `with_namespace` a namespace attribute (ns.attr).
Target ExpressionParser::parse_target_tuple(const std::vector<std::string>& extra_end, bool with_namespace) {
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

Target ExpressionParser::parse_target_primary(bool with_namespace) {
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

Target ExpressionParser::target_from(const Expr& expr) const {
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

ExprPtr ExpressionParser::parse_expression(bool with_condexpr) {
  DepthGuard guard(*this);
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr ExpressionParser::parse_condexpr() {
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

ExprPtr ExpressionParser::parse_chain(ParseFunction parse_operand, std::initializer_list<std::pair<const char*, ChainOp>> ops, bool named) {
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

ExprPtr ExpressionParser::parse_or() {
  return parse_chain(&ExpressionParser::parse_and, {{"or", ChainOp::Or}}, true);
}

ExprPtr ExpressionParser::parse_and() {
  return parse_chain(&ExpressionParser::parse_not, {{"and", ChainOp::And}}, true);
}

ExprPtr ExpressionParser::parse_not() {
  if (!at_name("not")) return parse_compare();
  const size_t line = next().line;
  DepthGuard guard(*this);
  return finish(std::make_unique<UnaryExpr>(Expr::Kind::Not, line, parse_not()));
}

ExprPtr ExpressionParser::parse_compare() {
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

ExprPtr ExpressionParser::parse_math1() {
  return parse_chain(&ExpressionParser::parse_concat, {{"+", ChainOp::Add}, {"-", ChainOp::Subtract}}, false);
}

ExprPtr ExpressionParser::parse_concat() {
  const size_t line = current().line;
  ExprPtr first = parse_math2();
  if (!at_op("~")) return first;
  auto node = std::make_unique<ConcatExpr>(line);
  node->items.push_back(std::move(first));
  while (skip_op("~")) node->items.push_back(parse_math2());
  return finish(std::move(node));
}

ExprPtr ExpressionParser::parse_math2() {
  return parse_chain(&ExpressionParser::parse_pow,
                     {{"*", ChainOp::Multiply}, {"/", ChainOp::Divide}, {"//", ChainOp::FloorDivide},
                      {"%", ChainOp::Modulo}},
                     false);
}

ExprPtr ExpressionParser::parse_pow() {
  return parse_chain(&ExpressionParser::parse_unary_with_filter, {{"**", ChainOp::Power}}, false);
}

ExprPtr ExpressionParser::parse_unary_with_filter() {
  return parse_unary(true);
}

ExprPtr ExpressionParser::parse_unary(bool with_filter) {
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

ExprPtr ExpressionParser::parse_primary() {
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
ExprPtr ExpressionParser::parse_tuple(bool with_condexpr, const std::vector<std::string>& extra_end, bool explicit_parentheses) {
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

ExprPtr ExpressionParser::parse_list() {
  auto node = std::make_unique<SequenceExpr>(Expr::Kind::List, next().line);
  while (!at_op("]")) {
    if (!node->items.empty()) expect_op(",");
    if (at_op("]")) break;
    node->items.push_back(parse_expression(true));
  }
  expect_op("]");
  return finish(std::move(node));
}

ExprPtr ExpressionParser::parse_dict() {
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

ExprPtr ExpressionParser::parse_postfix(ExprPtr node) {
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

ExprPtr ExpressionParser::parse_filter_expr(ExprPtr node) {
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

ExprPtr ExpressionParser::parse_subscript(ExprPtr node) {
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

ExprPtr ExpressionParser::parse_subscribed() {
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

void ExpressionParser::parse_call_args(CallArgs& args) {
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

ExprPtr ExpressionParser::parse_call(ExprPtr callee) {
  auto node = std::make_unique<CallExpr>(current().line, std::move(callee));
  parse_call_args(node->args);
  return finish(std::move(node));
}

std::string ExpressionParser::parse_dotted_name() {
  std::string name = expect_name();
  while (skip_op(".")) name += "." + expect_name();
  return name;
}

ExprPtr ExpressionParser::parse_filter(ExprPtr node, bool start_inline) {
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

ExprPtr ExpressionParser::parse_test(ExprPtr node) {
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

}  // namespace finetune::jinja
