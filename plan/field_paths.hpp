#pragma once
// Dotted field paths ("parallelism.tp", "training.micro_batch_size") resolved against the
// schema: the canonical path and every spelling of the field, for tools that edit plan trees
// (sweeps, the GUI) without knowing the aliases.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace meshwork::plan {

struct FieldPath {
  std::string canonical;            // "parallelism.tensor_model_parallel_size"
  std::vector<std::string> parent;  // canonical keys of the sections above it
  std::vector<std::string> keys;    // the field's key and aliases
};

// nullopt when the path names no field (or names a section or a list).
std::optional<FieldPath> resolve_field_path(std::string_view dotted);

// Sets the field in a plan's document tree, whatever spelling the tree used for it (the old
// spelling is removed); sections on the way are created, and a section given as a preset name
// (`model: gpt3-175b`, `gpu: h100-sxm`) becomes {preset: NAME} with the field beside it.
void set_field(nlohmann::json& tree, const FieldPath& field, nlohmann::json value);
// Removes the field (any spelling) so the default or the preset's value applies again.
void erase_field(nlohmann::json& tree, const FieldPath& field);
// The value the tree gives the field (any spelling), or nullptr when it gives none.
const nlohmann::json* find_field(const nlohmann::json& tree, const FieldPath& field);

}  // namespace meshwork::plan
