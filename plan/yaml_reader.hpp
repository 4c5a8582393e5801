#pragma once
// YAML text to the JSON tree the plan reader takes, through libyaml's event parser (the
// reference C implementation, fuzzed upstream). The tree is built with an explicit stack, so
// no input recurses: nesting, anchors and aliases are bounded here, not by the stack.

#include <string_view>

#include "plan/document.hpp"

namespace meshwork::plan {

DocumentResult parse_yaml(std::string_view text);

}  // namespace meshwork::plan
