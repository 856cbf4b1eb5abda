// The renderer's expressions: evaluation of every expression node, calls, filters and tests.
#include "builtins.h"
#include "operators.h"
#include "python_repr.h"
#include "renderer.h"

namespace finetune::jinja {

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
      return get_slice(object, start, stop, step, node.constant);
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
