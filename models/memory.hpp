#pragma once
// Memory per GPU on each pipeline stage, as Megatron-LM (and FSDP, for ZeRO-3) allocates it:
// weights, gradients and optimizer states by ZeRO stage (mixed-precision Adam, 2 + 2 + 12
// bytes per parameter: Rajbhandari et al. 2019 §3); activations (Korthikanti et al. 2022
// Table 2, generalised to GQA, SwiGLU, MoE, flash attention, CP and dropout or its absence)
// for the micro-batches each model chunk holds at the schedule's peak; embedding and LM head
// on the first and last stage; runtime memory (CUDA context, NCCL, workspaces).
//
// What the verdict adds: a plan fits when every stage's total is within its GPU's memory, and
// fits tightly (a warning) when less than cluster.memory_headroom_fraction of it is left.
// The headroom stands for what this model does not count: the PyTorch caching allocator's
// fragmentation (freed blocks it cannot reuse for larger requests; PyTorch's CUDA-semantics
// notes on memory management and expandable_segments), transient buffers of fused kernels and
// peaks between the model's accounting points. Rajbhandari et al. 2019 (ZeRO, §3.2 and §6.3)
// report out-of-memory from fragmentation "with over 30% of memory still available" in the
// extreme; the default of 5% is an assumption for a tuned Megatron job, not a measurement.

#include <cstdint>
#include <vector>

#include "plan/plan.hpp"

namespace meshwork::models {

struct StageMemory {
  std::int64_t stage = 0;
  std::int64_t layers = 0;
  double params = 0;  // parameters held by one GPU of this stage (after TP/EP sharding)
  // Weights at the peak: the shard ZeRO-3 keeps plus the layers it has gathered.
  double weights_bytes = 0;
  // Gradients at the peak: the kept buffer (whole, or the shard under ZeRO 2/3) plus, when
  // sharded, the unsharded buckets waiting for their reduce-scatter.
  double gradients_bytes = 0;
  double optimizer_bytes = 0;
  double activations_bytes = 0;
  double buffers_bytes = 0;   // runtime: CUDA context, NCCL channels, library workspaces
  double total_bytes = 0;
  double capacity_bytes = 0;
  double headroom_bytes = 0;  // what the plan should leave free (memory_headroom_fraction)
  // Micro-batches whose activations the stage holds at its peak, in units of the whole
  // stage's layers (chunks in flight / chunks per stage under interleaving).
  double in_flight_micro_batches = 0;
  [[nodiscard]] bool fits() const { return total_bytes <= capacity_bytes; }
  [[nodiscard]] bool tight() const { return fits() && capacity_bytes - total_bytes < headroom_bytes; }
};

// Activation bytes of one layer for one micro-batch on one GPU (Korthikanti Table 2 generalised),
// for a layer that full recomputation does not repeat (`recomputed` false) or does.
double layer_activation_bytes(const plan::Plan& plan, bool moe_layer, bool recomputed);
double layer_activation_bytes(const plan::Plan& plan, bool moe_layer);

// Model chunks in flight on a stage at its peak, by the schedule's warm-up (Megatron-LM's
// schedules.py): GPipe m; 1F1B and ZB-H1 min(m, p - stage); interleaved
// min(m v, (p - stage - 1) 2 + (v - 1) p + 1), or all m v when m = p (Megatron warms up with
// every micro-batch then). Without a pipeline, 1.
std::int64_t peak_chunks_in_flight(const plan::Plan& plan, std::int64_t stage, std::int64_t micro_batches);
// The same in units of the stage's layers: peak_chunks_in_flight / v.
double in_flight_micro_batches(const plan::Plan& plan, std::int64_t stage, std::int64_t micro_batches);

// Mixed-precision Adam bytes per parameter (weights, gradients, optimizer) with ZeRO over
// `shards` data-parallel ranks (Rajbhandari et al. 2019, §5: P_os, P_os+g, P_os+g+p).
struct ModelStateBytes {
  double weights = 0, gradients = 0, optimizer = 0;
};
// Bytes of one gradient value as reduced and kept.
double gradient_bytes(const plan::TrainingConfig& training);
// Bytes of one value of an optimizer state kept in `dtype` (fp8: one byte; the per-tensor
// scales Transformer Engine keeps beside non-fp32 states are not counted).
double state_bytes(plan::Precision dtype);
// The optimizer's own bytes per parameter it owns: the master weights (training.optimizer_states
// .master_weights; none in fp32 training) and Adam's two moments (12 with the defaults).
double optimizer_state_bytes_per_param(const plan::TrainingConfig& training);
ModelStateBytes model_state_bytes_per_param(std::int64_t zero_stage, double shards, const plan::TrainingConfig& training);
// The gradient buffer one GPU keeps for the `dense` and `expert` parameters it holds (after TP
// and EP sharding): whole, or its ZeRO 2/3 shard, as stage_memory counts it without the
// buckets in flight. Megatron-core zeroes it at the start of every step
// (DistributedDataParallel.zero_grad_buffer in training.py's train_step): one write of it.
double gradient_buffer_bytes(const plan::Plan& plan, double dense, double expert);

// Runtime memory outside the model on every GPU (see memory.cpp for its parts).
double runtime_overhead_bytes();

std::vector<StageMemory> stage_memory(const plan::Plan& plan);
// The same, of the plan's layers per chunk (plan::layers_per_chunk), their first layers
// (plan::chunk_first_layers) and its micro-batches per step, as the estimate has them.
std::vector<StageMemory> stage_memory(const plan::Plan& plan, const std::vector<std::vector<std::int64_t>>& chunks,
                                      const std::vector<std::vector<std::int64_t>>& firsts, std::int64_t micro_batches);

}  // namespace meshwork::models
