#pragma once

#include <string>

namespace meshwork::plan {

// Every plan field as a Markdown table: path, type and unit, default, aliases, meaning.
std::string field_reference_markdown();

}  // namespace meshwork::plan
