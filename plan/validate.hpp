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

// Layers of each pipeline stage (uneven first/last stages as Megatron's
// decoder_first/last_pipeline_num_layers); nullopt with a diagnostic when they do not fit.
std::optional<std::vector<std::int64_t>> layers_per_stage(const Plan& plan, Diagnostics* diags = nullptr);
// Layers of each model chunk of each stage, [stage][chunk]; empty when the stages are invalid.
// Evenly split, except interleaving with uneven ends: the first stage's first chunk and the
// last stage's last chunk hold fewer (Llama 3).
std::vector<std::vector<std::int64_t>> layers_per_chunk(const Plan& plan);

// The GPU's dense peak for a training precision, TFLOP/s (0 when it has none).
double peak_tflops(const GpuSpec& gpu, Precision precision);

// a * b, or nullopt on overflow.
std::optional<std::int64_t> checked_mul(std::int64_t a, std::int64_t b);

}  // namespace meshwork::plan
