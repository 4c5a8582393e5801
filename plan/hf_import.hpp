#pragma once
// Import of a Hugging Face config.json into the model section: the fields every decoder config
// shares (num_hidden_layers, hidden_size, intermediate_size, attention and KV heads, vocab,
// activation, norm) and the MoE fields of Mixtral, Qwen-MoE and DeepSeek. Multimodal configs
// that nest the language model under `text_config` are read from there.

#include <filesystem>
#include <string_view>

#include <nlohmann/json.hpp>

#include "plan/diagnostics.hpp"
#include "plan/plan.hpp"

namespace meshwork::plan {

// Fills `model` from a parsed config; reports what is missing or malformed under `path`.
// Returns false when the config cannot describe a model.
bool import_hf_config(const nlohmann::json& config, ModelConfig& model, Diagnostics& diags,
                      std::string_view path = "model.hf_config");

bool import_hf_config_file(const std::filesystem::path& file, ModelConfig& model, Diagnostics& diags,
                           std::string_view path = "model.hf_config");

}  // namespace meshwork::plan
