// Python's operators on template values: + - * / // % ** (including str and list + and *, and
// str % args formatting), unary - and +, and `in`. Python ints are unbounded; here they are 64-bit
// and an overflowing result is an error.
#pragma once

#include "ast.h"
#include "value.h"

namespace finetune::jinja {

Value python_binary(ChainOp op, const Value& left, const Value& right, Renderer& renderer);
Value python_negate(const Value& operand);
Value python_positive(const Value& operand);
bool python_contains(const Value& container, const Value& item);

}  // namespace finetune::jinja
