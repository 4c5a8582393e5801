#include "plan/backend_limits.hpp"

#include <string>

#include "plan/derived.hpp"

namespace meshwork::plan {

namespace {

std::string text(std::int64_t v) { return std::to_string(v); }

// The one Trainer (exec/trainer.hpp) runs every mesh the Program lowers (TP with SP, PP under
// every schedule, DP with ZeRO 0-3, CP, EP) on either backend, with these exceptions of its
// model (GptChunk's, which CudaChunk follows op for op); `who` names the backend.
void trainer_limits(const Plan& plan, Diagnostics& d, const std::string& who) {
  const auto& par = plan.parallelism;
  const auto& m = plan.model;
  if (m.is_moe()) {
    // exec/moe.cpp: dropless top-k routing without shared experts or biases, experts split
    // over TP (expert tensor parallelism = TP); ZeRO 1-2 shard their optimizer state over
    // expert data parallelism, but ZeRO-3 does not shard their parameters between uses.
    if (par.zero_stage > 2) d.error("parallelism.zero_stage", who + " runs MoE with ZeRO 0-2 only (experts' parameters are not sharded between uses)");
    if (m.moe.moe_shared_expert_intermediate_size > 0) d.error("model.moe.moe_shared_expert_intermediate_size", who + " has no shared experts (must be 0)");
    if (m.moe.capacity_factor > 0) d.error("model.moe.capacity_factor", who + "'s routing is dropless (must be 0)");
    if (m.add_bias_linear) d.error("model.add_bias_linear", who + "'s experts have no biases (must be false with MoE)");
  }
  if (m.mla.kv_lora_rank > 0) d.error("model.mla.kv_lora_rank", who + " has no multi-head latent attention");
  if (par.num_distributed_optimizer_instances > 1) {
    d.error("parallelism.num_distributed_optimizer_instances", who + " shards the optimizer over all of DP x CP (must be 1; the estimate and the simulator price several instances)");
  }
  if (par.context_parallel_size > 1 && par.context_parallel_comm_type == CpCommType::p2p) {
    // exec/gpt.cpp (and CudaChunk) gathers every member's K and V, then runs the whole attention: what the
    // Program prices as all_gather. Its measured CP time is that of all_gather, not the ring's.
    d.warning("parallelism.context_parallel_comm_type",
              who + " exchanges K and V before the attention, as all_gather does: to compare its measured step with a "
              "prediction, predict the plan with context_parallel_comm_type: all_gather (the p2p ring hides the exchange under the attention)");
  }
  const std::int64_t micro = derive(plan).micro_batches_per_step;
  if (par.virtual_pipeline_model_parallel_size > 1 && micro % par.pipeline_model_parallel_size != 0) {
    d.error("training.global_batch_size", "the interleaved schedule needs micro-batches per step (" + text(micro) +
                                              ") to be a multiple of parallelism.pipeline_model_parallel_size (" + text(par.pipeline_model_parallel_size) + ")");
  }
}

// The CUDA backend (exec/cuda/: CudaChunk on cuBLASLt and kernels/cuda, NCCL) plays the same
// Trainer as the CPU backend (issue 23) and its chunk has every op of GptChunk, so it runs
// every plan the CPU backend runs, with the CPU's limits.
void cuda_limits(const Plan& plan, Diagnostics& d) {
  trainer_limits(plan, d, "the CUDA backend");
  if (plan.training.precision != Precision::fp8) return;
  // FP8: each layer's linear GEMMs in e4m3 (exec/cuda/cuda_chunk.cpp, CudaChunk::linear), whose
  // cuBLASLt kernels need both dimensions of every product in 16-byte steps (cuBLAS docs,
  // cublasLtMatmul(), FP8 requirements: k a multiple of 16, n of 8; each dimension is the k of
  // the forward or of the input gradient). A product that misses it runs in bf16.
  const auto& m = plan.model;
  const std::int64_t t = plan.parallelism.tensor_model_parallel_size;
  const auto need = [&](const char* field, const char* what, std::int64_t per_rank) {
    if (per_rank % 16 != 0) {
      d.warning(field, std::string("the CUDA backend's FP8 GEMMs need every linear layer's dimensions per tensor-parallel rank in multiples of 16; ") + what +
                           " is " + text(per_rank) + ": its products run in bf16");
    }
  };
  need("model.hidden_size", "the hidden size", m.hidden_size);
  need("model.kv_channels", "the query projection's columns per rank (heads / TP x kv_channels)", m.num_attention_heads / t * m.kv_channels);
  need("model.num_query_groups", "the key and value projections' columns per rank (query groups / TP x kv_channels)", m.num_query_groups / t * m.kv_channels);
  need("model.ffn_hidden_size", "the MLP's hidden size per rank", m.ffn_hidden_size / t);
  if (m.is_moe()) need("model.moe.moe_ffn_hidden_size", "an expert's hidden size per rank", m.moe.moe_ffn_hidden_size / t);
}

}  // namespace

std::string_view to_string(Backend b) { return b == Backend::cpu ? "cpu" : "cuda"; }

std::optional<Backend> parse_backend(std::string_view name) {
  if (name == "cpu") return Backend::cpu;
  if (name == "cuda") return Backend::cuda;
  return std::nullopt;
}

Diagnostics backend_diagnostics(const Plan& plan, Backend backend) {
  Diagnostics d;
  if (backend == Backend::cpu) trainer_limits(plan, d, "the CPU backend");
  else cuda_limits(plan, d);
  return d;
}

}  // namespace meshwork::plan
