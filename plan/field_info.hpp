#pragma once
// What one plan field is, apart from where it is stored: its key, aliases, unit, bounds and
// documentation. schema.hpp lists the fields of every section once, as describe() functions
// that a visitor walks; the loader, the writer, the range checks and the field reference in
// the README are such visitors. Adding a field is one line in describe() and a member in plan.hpp.

#include <limits>
#include <string_view>

#include "plan/units.hpp"

namespace meshwork::plan {

struct FieldInfo {
  std::string_view key;
  std::string_view doc;
  std::string_view aliases = {};  // comma-separated: "tp" or "num_experts,n_routed_experts"
  Unit unit = Unit::none;
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_exclusive = false;     // min < value rather than min <= value
  bool required = false;          // 0 or empty after loading is an error
  std::string_view default_text = {};  // printed instead of the default value ("= num_attention_heads")
};

// Calls f(alias) for each alias of a field.
template <class F>
void for_each_alias(const FieldInfo& info, F&& f) {
  std::string_view rest = info.aliases;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    f(rest.substr(0, comma));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
}

}  // namespace meshwork::plan
