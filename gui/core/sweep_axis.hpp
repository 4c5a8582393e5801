#pragma once
// A sweep axis typed in the GUI: a field path and its values, as a list ("4, 8, 16",
// "selective, full") or a range ("8..64 *2" doubles from 8 to 64, "1..4 +1" steps by one).

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/sweep_spec.hpp"

namespace meshwork::gui {

inline constexpr std::size_t kMaxAxisValues = 256;

// The values, or an empty list with `error` saying what is wrong with the text.
std::vector<nlohmann::json> parse_axis_values(std::string_view text, std::string& error);

// An axis of plan field `path` (canonical or alias); false with `error` when the path names no
// field or the values do not parse.
bool make_axis(std::string_view path, std::string_view values, plan::SweepAxis& axis, std::string& error);

}  // namespace meshwork::gui
