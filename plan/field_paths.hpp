#pragma once
// Dotted field paths ("parallelism.tp", "training.micro_batch_size") resolved against the
// schema: the canonical path and every spelling of the field, for tools that edit plan trees
// (sweeps, the GUI) without knowing the aliases.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meshwork::plan {

struct FieldPath {
  std::string canonical;            // "parallelism.tensor_model_parallel_size"
  std::vector<std::string> parent;  // canonical keys of the sections above it
  std::vector<std::string> keys;    // the field's key and aliases
};

// nullopt when the path names no field (or names a section or a list).
std::optional<FieldPath> resolve_field_path(std::string_view dotted);

}  // namespace meshwork::plan
