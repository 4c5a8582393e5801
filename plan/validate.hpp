#pragma once
// Resolution (derived sizes filled in) and validation of a whole plan: the per-field bounds of
// schema.hpp and the rules that tie fields together (the mesh against the GPU count, heads by
// TP, layers by stages, batch by micro-batch and DP, sequence by CP, experts by EP...). Every
// problem is reported, with the path of the field it is about.

#include <cstdint>
#include <optional>
#include <vector>

#include "plan/diagnostics.hpp"
#include "plan/field_info.hpp"
#include "plan/plan.hpp"

namespace meshwork::plan {

// Fills the derived fields that are still 0: query groups, head width, FFN widths, DP or the
// GPU count, intra-node bandwidth. Reports what cannot be derived.
void resolve(Plan& plan, Diagnostics& diags);

// Bounds and required fields of schema.hpp.
void check_field_ranges(const Plan& plan, Diagnostics& diags);

// The bounds of one field's value (the reader checks values as given, before defaults).
void check_bounds(double value, const FieldInfo& info, const std::string& path, Diagnostics& diags);

// All rules, on a resolved plan (check_field_ranges included).
Diagnostics validate(const Plan& plan);

// Layers of each model chunk of each stage, [stage][chunk] (chunk c of stage s is virtual
// stage c * pp + s, which holds the model's (c pp + s)-th slice; Megatron's assignment), by the
// plan's rule: an even split; uneven first/last stages (decoder_first/last_pipeline_num_layers,
// with interleaving the first stage's first chunk and the last stage's last chunk differ, as
// Llama 3 §3.3.2); the embedding and loss counted as layers (account_for_*_in_pipeline_split);
// or an explicit layout (pipeline_model_parallel_layout). A chunk may hold no layer (only the
// embedding or the loss). nullopt with a diagnostic when the layers do not fit the rule.
std::optional<std::vector<std::vector<std::int64_t>>> pipeline_chunks(const Plan& plan, Diagnostics* diags = nullptr);
// The same summed per stage.
std::optional<std::vector<std::int64_t>> layers_per_stage(const Plan& plan, Diagnostics* diags = nullptr);
// pipeline_chunks(), empty when the plan's split is invalid.
std::vector<std::vector<std::int64_t>> layers_per_chunk(const Plan& plan);
// The global index of the first layer of a stage's chunk in such a split.
std::int64_t first_layer_of_chunk(const std::vector<std::vector<std::int64_t>>& chunks, std::int64_t stage, std::int64_t chunk);
// The same for every chunk at once, [stage][chunk], in one pass over the virtual stages.
std::vector<std::vector<std::int64_t>> chunk_first_layers(const std::vector<std::vector<std::int64_t>>& chunks);

// The GPU's dense peak for a training precision, TFLOP/s (0 when it has none).
double peak_tflops(const GpuSpec& gpu, Precision precision);
// The peak the attention's matmuls run at: the BF16 one in FP8 training unless
// training.fp8_attention (Transformer Engine runs dot-product attention in BF16 unless its recipe
// sets fp8_dpa), and the precision's otherwise, or where the GPU gives no BF16 peak (validate
// warns). The cost model and `meshwork calibrate` use it alike.
double attention_peak_tflops(const GpuSpec& gpu, const TrainingConfig& training);

// a * b, or nullopt on overflow.
std::optional<std::int64_t> checked_mul(std::int64_t a, std::int64_t b);

}  // namespace meshwork::plan
