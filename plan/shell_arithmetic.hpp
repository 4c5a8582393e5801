#pragma once
// $(( )) arithmetic as plan/shell_script.cpp evaluates it statically. Internal to the shell reader.

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace meshwork::plan::shell {

// An integer expression: + - * / % (C's precedence), unary minus and parentheses over decimal
// numbers and variables ($X, ${X} or X), `value_of` giving a variable's text (nullopt: unset).
// Nullopt when it cannot be known: an unset or non-numeric variable, division by zero,
// overflow (bash would wrap), or nesting deeper than 64.
std::optional<long long> shell_arithmetic(std::string_view e, const std::function<std::optional<std::string>(const std::string&)>& value_of);

}  // namespace meshwork::plan::shell
