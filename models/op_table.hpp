#pragma once
// The per-op table of one transformer layer for one micro-batch on one rank: every op of the
// forward and backward pass (backward split into input- and weight-gradient parts, which
// zero-bubble schedules move apart), with its FLOPs, the bytes it moves through HBM and, for
// GEMMs, its sharded shape under TP, SP, CP and EP. Lowering builds the Program from it; the
// estimate times it. FLOPs count what eq. 7 of Korthikanti et al. counts (GEMMs and the
// attention matmuls); norms and elementwise ops carry bytes only.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "plan/plan.hpp"

namespace meshwork::models {

// Bytes per activation element the cost models count: 4 in fp32 (the CPU executor), 2 for
// 16-bit training (bf16, fp16, and fp8 recipes, which keep activations in bf16).
inline double activation_bytes(plan::Precision p) { return p == plan::Precision::fp32 ? 4 : 2; }

}  // namespace meshwork::models

namespace meshwork::models {

// One byte each, so that a Program instruction stays 72 bytes (models/program.hpp). `data`: a
// micro-batch's copy from the host to the GPU (models::batch_tensors), at the host link's rate.
enum class OpKind : std::uint8_t { gemm, attention, elementwise, norm, embedding, loss, optimizer, data };
enum class OpPhase : std::uint8_t { forward, backward_input, backward_weight, recompute };

struct GemmShape {
  double m = 0, n = 0, k = 0;  // [m x k] x [k x n]
};

struct Op {
  // "qkv", "attention", "mlp_fc1"... the same names in traces: a literal, never owned (an op
  // table of strings was a tenth of the estimate's allocations).
  std::string_view name;
  OpKind kind = OpKind::gemm;
  OpPhase phase = OpPhase::forward;
  double flops = 0;
  double bytes = 0;  // HBM traffic
  GemmShape shape;
  // FP8 training (training.precision fp8): the HBM traffic of the kernels that cast this GEMM's
  // activation or gradient operand to e4m3 (fp8_cast_bytes_per_element per element), timed at
  // the memory-bound rate on top of the GEMM; 0 for every other op and precision.
  double cast_bytes = 0;
  // A grouped GEMM (an MoE layer's local experts in one launch, Megatron-core's GroupedMLP,
  // --moe-grouped-gemm): `gemm_groups` members of equal share, `flops` and `shape` their sum,
  // each with weights of its own (counted in `bytes`). It is timed as one GEMM of its whole
  // size: the members' tiles share one grid, so the launch and the last wave's idle SMs are
  // paid once, and block-sparse expert kernels run within a few percent of dense GEMMs of
  // the same total (MegaBlocks, Gale et al. 2023, arXiv:2211.15841). What that leaves out:
  // each member's rows padded to the kernel's tile (64 to 256 rows in CUTLASS's Hopper
  // grouped GEMM, examples/57_hopper_grouped_gemm), which matters only when a member gets
  // fewer rows than a tile, as in inference, not in training's thousands. 1 for every other op.
  double gemm_groups = 1;
  // A GEMM an FP8 plan runs in 16 bits, timed at the 16-bit peak: the output layer, which is
  // Megatron-core's own ColumnParallelLinear (a torch matmul, not a Transformer Engine module,
  // so FP8 autocast does not reach it: GPTModel.__init__ in megatron/core/models/gpt/
  // gpt_model.py, NVIDIA/Megatron-LM @007562f9), and the MoE router's gating GEMM (TopKRouter,
  // a plain linear). DeepSeek-V3 keeps both in BF16 as well (DeepSeek-AI 2024,
  // arXiv:2412.19437 §3.3.1: "the embedding module, the output head, MoE gating modules").
  // False for every op of a plan in another precision.
  bool sixteen_bit = false;
};

// Bytes an FP8 GEMM's operand costs to cast, per element: Transformer Engine's fused
// cast-transpose reads the bf16 tensor once (2 bytes) and writes it in e4m3 twice (1 byte each:
// as it is, for this GEMM, and transposed, for the weight-gradient GEMM that reads it later),
// computing the amax in the same pass (TE's `fp8_cast_transpose_fused`, and for the output
// gradient `fp8_cast_transpose_bgrad_fused`, in transformer_engine/pytorch/module/linear.py).
// The weight-gradient GEMM reads those transposed copies and casts nothing; the weights' own
// casts, once a step with TE's FP8 weight caching (`is_first_microbatch`), are not counted.
inline constexpr double kFp8CastBytesPerElement = 4;

struct OpTableOptions {
  double routing_imbalance = 1.0;  // MoE: hottest expert rank's tokens over the mean
};

// Ops of one layer (dense or MoE) for one micro-batch on one rank of the plan's mesh. With full
// recomputation the layer's forward is repeated (OpPhase::recompute) when `recomputed`; the
// two-argument form takes it from the plan for a layer that recompute_method recomputes.
std::vector<Op> layer_ops(const plan::Plan& plan, bool moe_layer, bool recomputed);
std::vector<Op> layer_ops(const plan::Plan& plan, bool moe_layer);
// Whether full recomputation repeats the layer at `index_in_chunk` (0-based within its model
// chunk): every layer under recompute_method uniform, the first recompute_num_layers of each
// chunk under block (Megatron-LM's --recompute-method); none without full recomputation.
inline bool recomputes_layer(const plan::TrainingConfig& training, std::int64_t index_in_chunk) {
  if (training.recompute != plan::Recompute::full) return false;
  return training.recompute_method == plan::RecomputeMethod::uniform || index_in_chunk < training.recompute_num_layers;
}
// The tensors of one micro-batch a stage loads, as Megatron-LM's get_batch moves them: whole
// sequences (context parallelism slices them on the GPU, get_batch_on_this_cp_rank).
// `first`/`last`: the stage holds the first / last virtual stage (both with one stage).
struct BatchTensor {
  std::string_view name;  // Megatron's key: "tokens", "labels", "loss_mask", "attention_mask", "position_ids"
  double bytes = 0;
};
std::vector<BatchTensor> batch_tensors(const plan::Plan& plan, bool first, bool last);
// The op that copies them from the host ("batch_inputs" on the first stage, "batch_targets" on
// the last, "batch" when one stage is both): with tp_broadcast TP rank 0's copy of all five,
// with every_rank the stage's own; its broadcasts are models::comm_around's.
Op batch_op(const plan::Plan& plan, bool first, bool last);
// Ops outside the layers: the batch's load and the embedding on the first stage; the batch's
// load (of a pipeline of several stages), LM head and loss on the last.
std::vector<Op> first_stage_ops(const plan::Plan& plan);
std::vector<Op> last_stage_ops(const plan::Plan& plan);

// The backward pass's order of a layer's (or an end's) ops: the input-gradient ops in reverse,
// each followed by its own weight gradient when `weights` (ops without an input-gradient part,
// the embedding, by their weight gradient alone). The Program lowers it; the executor's
// single-rank reference plays it.
std::vector<const Op*> backward_order(const std::vector<Op>& ops, bool weights);

std::string_view to_string(OpKind k);
std::string_view to_string(OpPhase p);

}  // namespace meshwork::models
