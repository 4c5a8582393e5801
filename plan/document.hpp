#pragma once
// A plan file as a tree: YAML or JSON text, checked and parsed into one JSON value, with the
// line of each key when the source is YAML. Everything that can be wrong with the bytes (too
// big, empty, binary, not UTF-8, a syntax error, nesting too deep, alias bombs) is found here.

#include <cstddef>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "plan/diagnostics.hpp"

namespace meshwork::plan {

// No plan comes near this; anything larger is refused before it is parsed.
inline constexpr std::size_t kMaxPlanFileBytes = 1 << 20;
// Plans nest a few levels; deeper input is refused rather than recursed into.
inline constexpr int kMaxNestingDepth = 32;
// Bounds the JSON tree a YAML file may expand to through anchors and aliases.
inline constexpr std::size_t kMaxNodes = 100000;

enum class Format { detect, yaml, json };

struct Document {
  nlohmann::json root;
  std::map<std::string, int> lines;  // "parallelism.tp" -> 1-based line of that key (YAML only)
};

struct DocumentResult {
  std::optional<Document> document;
  Diagnostics diagnostics;
};

// Parses text already in memory. `format` detect: JSON if it starts with '{', else YAML.
DocumentResult parse_document(std::string_view text, Format format = Format::detect);

// Reads and parses a file; the format follows the extension (.json, .yaml, .yml), else detect.
DocumentResult read_document(const std::filesystem::path& path);

// Reads a whole text file of at most max_bytes; on failure returns nullopt and says why.
std::optional<std::string> read_text_file(const std::filesystem::path& path, std::size_t max_bytes,
                                          std::string& error);

}  // namespace meshwork::plan
