#pragma once
// Report writers: JSON (with the definitions the figures follow) and CSV (one row per report,
// for sweeps).

#include <string>

#include <nlohmann/json.hpp>

#include "report/report.hpp"

namespace meshwork::report {

nlohmann::json to_json(const Report& r);
// Reads what to_json wrote (Reports saved as files: the GUI, compare, MPI sweeps). Throws
// nlohmann::json::exception on a malformed document; use report_from_json_checked for files.
Report from_json(const nlohmann::json& j);
std::string csv_header();
std::string csv_row(const Report& r);
// FNV-1a 64-bit of a string, as 16 hex digits.
std::string fnv1a_hex(std::string_view text);

// The memory verdict as every command (and the GUI) shows it, one line: "memory: fits",
// "fits TIGHTLY" (less than the headroom left) or "DOES NOT FIT", with the fullest stage.
std::string memory_verdict_line(const Report& r);
// "8.03B parameters (6.98B non-embedding, 1.05B embedding)", the embedding with an untied LM head,, with ", 12.9B active
// per token" when experts make the two differ.
std::string parameters_line(const Parameters& p);
// The text reports' memory table, one row per pipeline stage (long pipelines: the first two,
// the fullest and the last), each line indented and ending in a newline.
std::string memory_table_text(const Report& r);
// "91% interval: step 12.10-13.38 s, MFU 41.2-45.6% (BASIS)", or "" without an interval.
std::string interval_line(const Report& r);
// A row's verdict in a table: "fits", "tight" or "OOM".
std::string_view memory_verdict_word(const Report& r);

}  // namespace meshwork::report
