#include "plan/document.hpp"

#include <charconv>
#include <fstream>
#include <sstream>
#include <system_error>

#include <yaml-cpp/yaml.h>

#include "plan/units.hpp"

namespace meshwork::plan {
namespace {

// Byte offset of the first invalid UTF-8 sequence, or npos (RFC 3629: no overlongs, no
// surrogates, nothing above U+10FFFF).
std::size_t invalid_utf8_at(std::string_view s) {
  std::size_t i = 0;
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  while (i < s.size()) {
    const unsigned char c = byte(i);
    std::size_t len = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1Fu;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0Fu;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07u;
    } else {
      return i;
    }
    if (i + len > s.size()) return i;
    for (std::size_t k = 1; k < len; ++k) {
      if ((byte(i + k) & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (byte(i + k) & 0x3Fu);
    }
    const std::uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

bool is_yaml_null(std::string_view s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

// YAML 1.2 core schema resolution of a plain scalar: null, bool, int, float, else string.
// YAML 1.1's yes/no/on/off stay strings, so that `p2p: yes` is reported, not guessed.
nlohmann::json resolve_plain_scalar(const std::string& s) {
  if (is_yaml_null(s)) return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  std::string_view v = s;
  const bool negative = !v.empty() && v.front() == '-';
  if (!v.empty() && (v.front() == '-' || v.front() == '+')) v.remove_prefix(1);
  auto all_of = [](std::string_view t, auto pred) {
    if (t.empty()) return false;
    for (char c : t) {
      if (!pred(c)) return false;
    }
    return true;
  };
  auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  if (all_of(v, is_digit)) {
    std::int64_t i = 0;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), i);
    if (ec == std::errc() && end == v.data() + v.size()) return negative ? -i : i;
    if (auto d = parse_number(s)) return *d;  // out of int64 range: keep as a float
    return s;
  }
  if (v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'o')) {
    const int base = v[1] == 'x' ? 16 : 8;
    std::int64_t i = 0;
    auto [end, ec] = std::from_chars(v.data() + 2, v.data() + v.size(), i, base);
    if (ec == std::errc() && end == v.data() + v.size()) return negative ? -i : i;
    return s;
  }
  // Floats: digits with one optional '.', an optional exponent; from_chars alone would also
  // take "inf" and "nan", which YAML spells .inf and .nan (kept as strings: not finite).
  bool has_digit = false;
  for (char c : v) {
    if (is_digit(c)) has_digit = true;
    else if (c != '.' && c != 'e' && c != 'E' && c != '-' && c != '+') return s;
  }
  if (has_digit) {
    if (auto d = parse_number(s)) return *d;
  }
  return s;
}

class YamlConverter {
 public:
  YamlConverter(Document& doc, Diagnostics& diags) : doc_(doc), diags_(diags) {}

  nlohmann::json convert(const YAML::Node& node, const std::string& path, int depth) {
    if (++nodes_ > kMaxNodes) {
      if (!too_many_) diags_.error("", "the file expands to more than " + std::to_string(kMaxNodes) +
                                           " values (anchors and aliases?); a plan is far smaller");
      too_many_ = true;
      return nullptr;
    }
    if (depth > kMaxNestingDepth) {
      if (!too_deep_) diags_.error(path, "nested deeper than " + std::to_string(kMaxNestingDepth) + " levels");
      too_deep_ = true;
      return nullptr;
    }
    switch (node.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null:
        return nullptr;
      case YAML::NodeType::Scalar:
        if (node.Tag() == "?") return resolve_plain_scalar(node.Scalar());
        return node.Scalar();  // quoted or explicitly tagged: a string
      case YAML::NodeType::Sequence: {
        nlohmann::json arr = nlohmann::json::array();
        std::size_t i = 0;
        for (const auto& item : node) {
          arr.push_back(convert(item, index_path(path, i++), depth + 1));
          if (too_many_ || too_deep_) break;
        }
        return arr;
      }
      case YAML::NodeType::Map: {
        nlohmann::json obj = nlohmann::json::object();
        for (const auto& kv : node) {
          if (!kv.first.IsScalar()) {
            diags_.add({path, "a key must be a plain name, not a list or mapping", Severity::error,
                        kv.first.Mark().line + 1});
            continue;
          }
          const std::string key = kv.first.Scalar();
          const std::string child = join_path(path, key);
          if (obj.contains(key)) {
            diags_.add({child, "duplicate key", Severity::error, kv.first.Mark().line + 1});
            continue;
          }
          doc_.lines.emplace(child, kv.first.Mark().line + 1);
          obj[key] = convert(kv.second, child, depth + 1);
          if (too_many_ || too_deep_) break;
        }
        return obj;
      }
    }
    return nullptr;
  }

 private:
  Document& doc_;
  Diagnostics& diags_;
  std::size_t nodes_ = 0;
  bool too_many_ = false;
  bool too_deep_ = false;
};

DocumentResult parse_yaml(std::string_view text) {
  DocumentResult out;
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(std::string(text));
  } catch (const YAML::Exception& e) {
    Diagnostic d{"", "YAML syntax error: " + e.msg, Severity::error, e.mark.is_null() ? 0 : e.mark.line + 1};
    if (!e.mark.is_null()) d.message += " (line " + std::to_string(e.mark.line + 1) + ", column " +
                                        std::to_string(e.mark.column + 1) + ")";
    out.diagnostics.add(std::move(d));
    return out;
  }
  if (docs.empty() || docs.front().IsNull()) {
    out.diagnostics.error("", "the file holds no plan (it is empty or only comments)");
    return out;
  }
  if (docs.size() > 1) {
    out.diagnostics.error("", "the file holds " + std::to_string(docs.size()) +
                                  " YAML documents; a plan file holds one");
    return out;
  }
  Document doc;
  YamlConverter converter(doc, out.diagnostics);
  doc.root = converter.convert(docs.front(), "", 0);
  if (out.diagnostics.has_errors()) return out;
  out.document = std::move(doc);
  return out;
}

DocumentResult parse_json(std::string_view text) {
  DocumentResult out;
  try {
    // Depth is bounded before the tree is built: the parser itself is iterative, but a deep
    // tree is useless to us and costly to destroy.
    int depth = 0;
    int max_depth = 0;
    bool too_deep = false;
    auto guard = [&](int d, nlohmann::json::parse_event_t event, nlohmann::json&) {
      (void)event;
      depth = d;
      if (depth > max_depth) max_depth = depth;
      if (depth > kMaxNestingDepth) too_deep = true;
      return !too_deep;
    };
    Document doc;
    doc.root = nlohmann::json::parse(text.begin(), text.end(), guard, /*allow_exceptions=*/true,
                                     /*ignore_comments=*/false);
    if (too_deep) {
      out.diagnostics.error("", "nested deeper than " + std::to_string(kMaxNestingDepth) + " levels");
      return out;
    }
    out.document = std::move(doc);
  } catch (const nlohmann::json::parse_error& e) {
    out.diagnostics.error("", std::string("JSON syntax error: ") + e.what());
  }
  return out;
}

}  // namespace

DocumentResult parse_document(std::string_view text, Format format) {
  DocumentResult out;
  if (text.size() > kMaxPlanFileBytes) {
    out.diagnostics.error("", "the file is " + std::to_string(text.size()) + " bytes; a plan is at most " +
                                  std::to_string(kMaxPlanFileBytes) + " bytes");
    return out;
  }
  if (const auto nul = text.find('\0'); nul != std::string_view::npos) {
    out.diagnostics.error("", "the file is binary, not a plan (a NUL byte at offset " + std::to_string(nul) + ")");
    return out;
  }
  if (const auto bad = invalid_utf8_at(text); bad != std::string_view::npos) {
    out.diagnostics.error("", "the file is not UTF-8 text (invalid byte at offset " + std::to_string(bad) + ")");
    return out;
  }
  std::size_t first = 0;
  // A UTF-8 byte-order mark is allowed and skipped.
  if (text.substr(0, 3) == "\xEF\xBB\xBF") first = 3;
  first = text.find_first_not_of(" \t\r\n", first);
  if (first == std::string_view::npos) {
    out.diagnostics.error("", "the file is empty");
    return out;
  }
  if (format == Format::detect) format = text[first] == '{' ? Format::json : Format::yaml;
  out = format == Format::json ? parse_json(text.substr(first)) : parse_yaml(text);
  if (out.document && !out.document->root.is_object()) {
    out.diagnostics.error("", "a plan must be a mapping of sections (model, training, ...) at the top level, not a " +
                                  std::string(out.document->root.type_name()));
    out.document.reset();
  }
  return out;
}

std::optional<std::string> read_text_file(const std::filesystem::path& path, std::size_t max_bytes,
                                          std::string& error) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    error = "no such file";
    return std::nullopt;
  }
  if (std::filesystem::is_directory(status)) {
    error = "is a directory, not a file";
    return std::nullopt;
  }
  if (!std::filesystem::is_regular_file(status)) {
    error = "is not a regular file";
    return std::nullopt;
  }
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) {
    error = "cannot read its size: " + ec.message();
    return std::nullopt;
  }
  if (size > max_bytes) {
    error = "is " + std::to_string(size) + " bytes; at most " + std::to_string(max_bytes) +
            " are read (refused before parsing)";
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = "cannot be opened for reading";
    return std::nullopt;
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) {
    error = "read failed";
    return std::nullopt;
  }
  std::string text = buf.str();
  if (text.size() > max_bytes) {  // it grew while we read it
    error = "is larger than " + std::to_string(max_bytes) + " bytes";
    return std::nullopt;
  }
  return text;
}

DocumentResult read_document(const std::filesystem::path& path) {
  DocumentResult out;
  std::string error;
  auto text = read_text_file(path, kMaxPlanFileBytes, error);
  if (!text) {
    out.diagnostics.error("", path.string() + " " + error);
    return out;
  }
  Format format = Format::detect;
  const auto ext = path.extension().string();
  if (ext == ".json") format = Format::json;
  if (ext == ".yaml" || ext == ".yml") format = Format::yaml;
  return parse_document(*text, format);
}

}  // namespace meshwork::plan
