#include "plan/document.hpp"

#include <algorithm>
#include <charconv>
#include <set>
#include <fstream>
#include <system_error>

#include "plan/units.hpp"
#include "plan/yaml_reader.hpp"

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

// nlohmann's message without its "[json.exception.parse_error.101] parse error at line 3,
// column 1: " prefix; the line goes into the diagnostic.
Diagnostic json_syntax_error(const nlohmann::json::parse_error& e, std::string_view text, std::size_t offset) {
  std::string message = e.what();
  if (const auto colon = message.find(": "); colon != std::string::npos && message.find("parse error") < colon) {
    message = message.substr(colon + 2);
  }
  const std::size_t byte = std::min<std::size_t>(e.byte + offset, text.size());
  const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(byte > 0 ? byte - 1 : 0), '\n');
  return {"", "JSON syntax error: " + message, Severity::error, static_cast<int>(line)};
}

// `first`: the offset of the first non-blank byte, where parsing starts (line numbers still
// count from the start of the file).
DocumentResult parse_json(std::string_view whole, std::size_t first) {
  const std::string_view text = whole.substr(first);
  DocumentResult out;
  // The parser itself is iterative, but a deep tree is useless to us and costly to destroy:
  // depth is bounded while parsing. Duplicate keys, which nlohmann would silently overwrite,
  // are caught with a stack of the keys seen in each open object.
  std::vector<std::set<std::string>> keys;
  bool too_deep = false;
  std::optional<Diagnostic> duplicate;
  auto callback = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (depth > kMaxNestingDepth) too_deep = true;
    if (too_deep || duplicate) return false;
    switch (event) {
      case E::object_start: keys.emplace_back(); break;
      case E::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case E::key:
        if (!keys.empty() && parsed.is_string()) {
          const std::string key = parsed.get<std::string>();
          if (!keys.back().insert(key).second) duplicate = Diagnostic{key, "duplicate key", Severity::error, 0};
        }
        break;
      default: break;
    }
    return true;
  };
  try {
    Document doc;
    doc.root = nlohmann::json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true,
                                     /*ignore_comments=*/false);
    if (too_deep) {
      out.diagnostics.error("", "nested deeper than " + std::to_string(kMaxNestingDepth) + " levels");
      return out;
    }
    if (duplicate) {
      duplicate->message = "duplicate key \"" + duplicate->path + "\" in one object";
      duplicate->path.clear();
      out.diagnostics.add(*duplicate);
      return out;
    }
    out.document = std::move(doc);
  } catch (const nlohmann::json::parse_error& e) {
    out.diagnostics.add(json_syntax_error(e, whole, first));
  } catch (const nlohmann::json::exception& e) {
    // out_of_range: a number that does not fit a double ("1e999").
    std::string message = e.what();
    if (const auto bracket = message.find("] "); bracket != std::string::npos) message = message.substr(bracket + 2);
    out.diagnostics.error("", "JSON error: " + message);
  }
  return out;
}

// "a list", "a number": the JSON type in the words of a plan file.
std::string kind_of(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::array: return "a list";
    case nlohmann::json::value_t::object: return "a mapping";
    case nlohmann::json::value_t::string: return "a string";
    case nlohmann::json::value_t::boolean: return "a boolean";
    case nlohmann::json::value_t::null: return "nothing";
    default: return "a number";
  }
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
  out = format == Format::json ? parse_json(text, first) : parse_yaml(text);
  if (out.document && !out.document->root.is_object()) {
    out.diagnostics.error("", "a plan must be a mapping of sections (model, training, ...) at the top level, not " +
                                  kind_of(out.document->root));
    out.document.reset();
  }
  return out;
}

std::optional<std::string> read_text_file(const std::filesystem::path& path, std::size_t max_bytes,
                                          std::string& error) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found) {
    error = "does not exist";
    return std::nullopt;
  }
  if (ec) {
    error = "cannot be read: " + ec.message();
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
  // Bounded read: files such as those in /proc report size 0 and may be endless.
  std::string text(max_bytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) {
    error = "read failed";
    return std::nullopt;
  }
  text.resize(static_cast<std::size_t>(in.gcount()));
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
    out.diagnostics.error("", "the file " + error);
    return out;
  }
  Format format = Format::detect;
  const auto ext = path.extension().string();
  if (ext == ".json") format = Format::json;
  if (ext == ".yaml" || ext == ".yml") format = Format::yaml;
  return parse_document(*text, format);
}

}  // namespace meshwork::plan
