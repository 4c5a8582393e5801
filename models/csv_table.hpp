#pragma once
// The small CSV files of measurements that the hardware profiles are fitted on
// (docs/reference/gemm, docs/reference/attention): one reader for their common syntax.

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meshwork::models {

// Calls `row` with the fields of each data line of `file`, each trimmed of spaces and tabs: a
// UTF-8 byte-order mark, CRLF line ends, blank lines, lines starting with '#' and a header line
// (one starting with `header_prefix`) are allowed and skipped. `row` returns what is wrong with
// its line, or nothing. Returns the problems, one line each naming the file and the line number
// (an unreadable file, a line `row` refused, a file with no data line); empty when all is well.
std::vector<std::string> read_csv_rows(const std::filesystem::path& file, std::string_view header_prefix,
                                       const std::function<std::optional<std::string>(const std::vector<std::string_view>&)>& row);

// A whole field as a number; false when it is not one (trailing characters included).
bool parse_csv_number(std::string_view field, double& out);
bool parse_csv_number(std::string_view field, std::int64_t& out);

// The problems of read_csv_rows, one a line, as the readers' `error` strings give them.
std::string join_problems(const std::vector<std::string>& problems);

}  // namespace meshwork::models
