#pragma once
// Time of one op on one GPU: a roofline with the achievable efficiencies of the GPU's
// hardware profile (models/hardware.hpp). The estimate sums it over the per-op table; the
// simulator times each compute instruction of the Program with it.

#include "models/gemm_fit.hpp"
#include "models/hardware.hpp"
#include "models/op_table.hpp"
#include "plan/plan.hpp"

namespace meshwork::models {

// Adam's step streams, per parameter a GPU owns: the fused kernel (apex's or Transformer
// Engine's FusedAdam) reads and writes the fp32 master weight, m and v (24 bytes) and reads the
// gradient (4); with 16-bit weights a second pass copies the master weights into them, 4 read
// and 2 written (MixedPrecisionOptimizer._copy_main_params_to_model_params, a multi-tensor copy
// after the step, megatron/core/optimizer/optimizer.py, NVIDIA/Megatron-LM @0293807e; the
// distributed optimizer's copy_main_params_to_model_shards does the same for its shard).
inline constexpr double kAdamBytesPerParam = 28;
inline constexpr double kMasterCopyBytesPerParam = 6;
// Gradients reduced in bf16 (training.grad_reduce_in_bf16): before the step the optimizer copies
// its shard of them into fp32 main gradients, 2 bytes read and 4 written per parameter it owns
// (_copy_model_grads_to_main_grads, `shard_model_grad.float()`, in Megatron-core's
// DistributedOptimizer and Float16OptimizerWithFloat16Params, megatron/core/optimizer/,
// NVIDIA/Megatron-LM @0293807e). Only with the default optimizer states: Apex's DistributedFusedAdam
// and Transformer Engine's FusedAdam (training.optimizer_states) read the bf16 shard themselves.
inline constexpr double kMainGradCopyBytesPerParam = 6;
// Gradient clipping (training.clip_grad > 0), per parameter a GPU owns: its fp32 gradient read
// for the norm (multi_tensor_l2norm) and read and written again when scaled by the clipping
// coefficient, which Megatron-core with Transformer Engine does every step, the coefficient
// clamped to 1 on the device rather than tested on the host (megatron/core/optimizer/
// clip_grads.py, get_grad_norm_fp32 and clip_grad_by_total_norm_fp32, NVIDIA/Megatron-LM
// @0293807e). The norm's all-reduce of one float over the model-parallel and data-parallel
// ranks is latency alone and is not priced.
inline constexpr double kClipGradBytesPerParam = 12;
// fp16's loss scaler, per parameter a GPU owns, once a step before clipping: the fp32 gradient
// read, checked for inf and NaN and written unscaled (torch._amp_foreach_non_finite_check_and_
// unscale_ in MixedPrecisionOptimizer._unscale_main_grads_and_check_for_nan, megatron/core/
// optimizer/optimizer.py, NVIDIA/Megatron-LM @0293807e); a step with a non-finite gradient is
// skipped. The found-inf flag's all-reduce is latency alone and is not priced.
inline constexpr double kUnscaleGradBytesPerParam = 8;

class ComputeTimer {
 public:
  explicit ComputeTimer(const plan::Plan& plan);
  // Seconds for an op of `kind` doing `flops` and moving `bytes` through HBM; an FP8 GEMM's
  // operand casts (`cast_bytes`, Op::cast_bytes) at the memory-bound rate on top. A grouped
  // GEMM (Op::gemm_groups) is timed as one GEMM of its whole size (op_table.hpp says why).
  // An attention op's `phase` picks its kernel's pass: the forward's pace for the forward and a
  // recomputed forward, the backward's for the backward. A GEMM an FP8 plan keeps in 16 bits
  // (`sixteen_bit`, Op::sixteen_bit) runs at the 16-bit peak and its size curve. Every caller
  // that times instructions or ops passes all of them (no defaults: a backward timed as a
  // forward, or the head at FP8's rate, is wrong without a sign).
  [[nodiscard]] double operator()(OpKind kind, double flops, double bytes, double cast_bytes, OpPhase phase, bool sixteen_bit) const;
  // A forward op with no FP8 casts: the streaming kinds' (optimizer, elementwise) form.
  [[nodiscard]] double operator()(OpKind kind, double flops, double bytes) const { return (*this)(kind, flops, bytes, 0, OpPhase::forward, false); }
  [[nodiscard]] double operator()(const Op& op) const { return (*this)(op.kind, op.flops, op.bytes, op.cast_bytes, op.phase, op.sixteen_bit); }
  [[nodiscard]] double hbm_bytes_per_s() const { return hbm_bytes_per_s_; }
  // The streaming rate of an op of `kind` (memory-bound kinds): a calibrated kernel's where
  // `meshwork calibrate` measured one, the achievable memory bandwidth otherwise.
  [[nodiscard]] double bytes_per_s(OpKind kind) const;
  [[nodiscard]] const HardwareProfile& hardware() const { return hw_; }

 private:
  HardwareProfile hw_;
  double peak_flops_ = 0;
  // The attention's: the BF16 peak in FP8 training unless training.fp8_attention (Transformer
  // Engine runs dot-product attention in BF16 unless its recipe sets fp8_dpa).
  double attention_peak_flops_ = 0;
  double hbm_bytes_per_s_ = 0;
  // The 16-bit GEMMs' peak: the plan's own peak unless it trains in FP8 (Op::sixteen_bit).
  double sixteen_bit_peak_flops_ = 0;
  // The size curves of GEMMs, of the 16-bit GEMMs and of the attention at their own peaks
  // (compute_time.cpp, curve_at).
  GemmCurve gemm_curve_, sixteen_bit_curve_, attention_curve_;
  bool flash_ = false;
  // The fused kernel's paces over the best GEMM's at the plan's keys per call (models::attention_paces).
  double forward_over_gemm_ = 0, backward_over_gemm_ = 0;
};

}  // namespace meshwork::models
