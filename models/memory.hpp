#pragma once
// Memory per GPU on each pipeline stage: weights, gradients and optimizer states by ZeRO stage
// (mixed-precision Adam, 2 + 2 + 12 bytes per parameter: Rajbhandari et al. 2019 §3),
// activations (Korthikanti et al. 2022 Table 2, generalised to GQA, SwiGLU, MoE, flash
// attention and CP) times the micro-batches in flight under the schedule, embedding and LM
// head on the first and last stage, communication buffers and runtime overhead.

#include <cstdint>
#include <vector>

#include "plan/plan.hpp"

namespace meshwork::models {

struct StageMemory {
  std::int64_t stage = 0;
  std::int64_t layers = 0;
  double params = 0;  // parameters held by one GPU of this stage (after TP/EP sharding)
  double weights_bytes = 0;
  double gradients_bytes = 0;
  double optimizer_bytes = 0;
  double activations_bytes = 0;
  double buffers_bytes = 0;   // communication buckets and runtime overhead
  double total_bytes = 0;
  double capacity_bytes = 0;
  double in_flight_micro_batches = 0;
  [[nodiscard]] bool fits() const { return total_bytes <= capacity_bytes; }
};

// Activation bytes of one layer for one micro-batch on one GPU (Korthikanti Table 2 generalised).
double layer_activation_bytes(const plan::Plan& plan, bool moe_layer);

// Micro-batches (in units of one stage's worth of layers) whose activations a stage holds at
// its peak: GPipe m; 1F1B p - stage; interleaved from Megatron's warm-up count; ZB-H1 as 1F1B.
double in_flight_micro_batches(const plan::Plan& plan, std::int64_t stage, std::int64_t micro_batches);

// Mixed-precision Adam bytes per parameter (weights, gradients, optimizer) with ZeRO over
// `shards` data-parallel ranks (Rajbhandari et al. 2019, §5: P_os, P_os+g, P_os+g+p).
struct ModelStateBytes {
  double weights = 0, gradients = 0, optimizer = 0;
};
// Bytes of one gradient value as reduced and kept.
double gradient_bytes(plan::Precision precision);
ModelStateBytes model_state_bytes_per_param(std::int64_t zero_stage, double shards, plan::Precision precision);

std::vector<StageMemory> stage_memory(const plan::Plan& plan);

}  // namespace meshwork::models
