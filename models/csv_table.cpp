#include "models/csv_table.hpp"

#include <charconv>
#include <cstdint>
#include <fstream>

namespace meshwork::models {
namespace {

std::string_view trim(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\r')) v.remove_suffix(1);
  return v;
}

template <class T>
bool parse(std::string_view field, T& out) {
  const auto r = std::from_chars(field.data(), field.data() + field.size(), out);
  return r.ec == std::errc() && r.ptr == field.data() + field.size();
}

}  // namespace

bool parse_csv_number(std::string_view field, double& out) { return parse(field, out); }
bool parse_csv_number(std::string_view field, std::int64_t& out) { return parse(field, out); }

std::vector<std::string> read_csv_rows(const std::filesystem::path& file, std::string_view header_prefix,
                                       const std::function<std::optional<std::string>(const std::vector<std::string_view>&)>& row) {
  std::ifstream in(file);
  if (!in) return {file.string() + ": cannot be read"};
  std::vector<std::string> problems;
  std::string line;
  int number = 0;
  int rows = 0;
  while (std::getline(in, line)) {
    ++number;
    std::string_view text = line;
    if (number == 1 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // a UTF-8 byte-order mark
    text = trim(text);
    if (text.empty() || text[0] == '#' || text.substr(0, header_prefix.size()) == header_prefix) continue;
    std::vector<std::string_view> fields;
    for (std::size_t from = 0;;) {
      const std::size_t comma = text.find(',', from);
      fields.push_back(trim(text.substr(from, comma == std::string_view::npos ? std::string_view::npos : comma - from)));
      if (comma == std::string_view::npos) break;
      from = comma + 1;
    }
    ++rows;
    if (auto problem = row(fields)) problems.push_back(file.string() + ":" + std::to_string(number) + ": " + *problem);
  }
  if (rows == 0 && problems.empty()) problems.push_back(file.string() + ": no measurements");
  return problems;
}

std::string join_problems(const std::vector<std::string>& problems) {
  std::string out;
  for (std::size_t i = 0; i < problems.size(); ++i) out += (i > 0 ? "\n" : "") + problems[i];
  return out;
}

}  // namespace meshwork::models
