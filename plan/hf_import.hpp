#pragma once
// Import of a Hugging Face config.json into the model section: the fields every decoder config
// shares (num_hidden_layers, hidden_size, intermediate_size, attention and KV heads, vocab,
// activation, norm) and the MoE fields of Mixtral, Qwen-MoE and DeepSeek. Multimodal configs
// that nest the language model under `text_config` are read from there.

#include <filesystem>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/diagnostics.hpp"
#include "plan/plan.hpp"

namespace meshwork::plan {

// What a config says that the model section does not take, for the caller to report.
struct HfImportNotes {
  // The longest context the model supports (Llama 3.1: 131,072), not the sequence it is
  // trained on: the import leaves model.seq_length to the plan.
  std::optional<std::int64_t> max_position_embeddings;
  // Keys the config sets that meshwork does not model, each with its reason
  // ("num_nextn_predict_layers 1: DeepSeek's multi-token-prediction module is not modelled ...").
  std::vector<std::string> ignored;
};

// Fills `model` from a parsed config; reports what is missing or malformed under `path`.
// Returns false when the config cannot describe a model. The sequence length is taken only
// from a config that names the training length (`seq_length`) or has a learned position table
// of that many rows (GPT-2's `n_positions`); otherwise model.seq_length is left 0 for the plan.
bool import_hf_config(const nlohmann::json& config, ModelConfig& model, Diagnostics& diags,
                      std::string_view path = "model.hf_config", HfImportNotes* notes = nullptr);

bool import_hf_config_file(const std::filesystem::path& file, ModelConfig& model, Diagnostics& diags,
                           std::string_view path = "model.hf_config", HfImportNotes* notes = nullptr);

// Warns under `path` of what the import left out: each ignored key ("ignored ..."), and, when
// `seq_length_missing`, that the plan must give model.seq_length (naming the config's
// max_position_embeddings, which is not it). `remedy` ends that sentence ("give
// model.seq_length", "pass --seq-length").
void warn_hf_import_notes(const HfImportNotes& notes, bool seq_length_missing, std::string_view remedy, Diagnostics& diags,
                          std::string_view path);

}  // namespace meshwork::plan
