#include "models/compute_time.hpp"

#include <algorithm>

#include "models/gemm_fit.hpp"
#include "plan/validate.hpp"

namespace meshwork::models {
namespace {

// Decoder attention is causal: a flash kernel computes about half of the s x s blocks.
constexpr double kCausalFlashFraction = 0.5;
// A flash kernel's backward recomputes the scores: 2.5 times its forward's FLOPs (five matmuls
// against two, Dao 2023 §4.1), where MFU counts the backward as twice the forward.
constexpr double kFlashBackwardFlopsOverMfu = 2.5 / 2;

// A generation's size curve is measured on its 16-bit GEMMs (docs/reference/gemm, `meshwork
// calibrate`). Its half size stands for a fixed time, not a count of multiply-adds: a GEMM
// costs 2 (macs + half) / (peak max), so a small GEMM's fixed part, 2 half / (peak max), is
// its launch, prologue, epilogue and the last wave's idle SMs. The two curves fitted on
// measured tables put it at 8 us each: Hopper's half (2.58e9 at 989 TFLOP/s) and Blackwell's
// (5.57e9 at 2,250) (models/hardware.cpp). A GEMM at another peak (FP8's, twice BF16's on
// Hopper and Blackwell; fp32's, far below) keeps that time, so its half size scales with its
// peak. It is the upper end of what is physical: the launch and the 16-bit epilogue do not
// shrink, but an FP8 prologue loads 1-byte operands and the last wave's tiles multiply faster,
// so FP8's true fixed time lies between half and all of BF16's (half is what the curve gave
// before, unscaled). No measured FP8 table says where (docs/efficiency-constants.md). A half
// size measured on the machine (`meshwork calibrate` fits it at the plan's own peak) is kept.
GemmCurve curve_at(const HardwareProfile& hw, double peak_flops, const plan::GpuSpec& gpu) {
  const double sixteen_bit = sixteen_bit_peak_tflops(gpu) * 1e12;
  if (gpu.calibration.gemm_half_macs > 0 || sixteen_bit <= 0 || peak_flops <= 0) return {hw.gemm_max_efficiency, hw.gemm_half_macs};
  return {hw.gemm_max_efficiency, hw.gemm_half_macs * peak_flops / sixteen_bit};
}

// The keys one call of the attention kernel loops over, which its pace follows (models::
// AttentionPace): the sequence, or with context parallelism's p2p ring one chunk of it, a call
// per step of the ring; all_gather's one call runs its queries over all s keys.
double keys_per_call(const plan::Plan& p) {
  const double s = static_cast<double>(p.model.seq_length);
  const std::int64_t cp = p.parallelism.context_parallel_size;
  return cp > 1 && p.parallelism.context_parallel_comm_type == plan::CpCommType::p2p ? s / static_cast<double>(cp) : s;
}

}  // namespace

double ComputeTimer::bytes_per_s(OpKind kind) const {
  // Kinds whose pace `meshwork calibrate` measured on the executor's kernel (bytes as the
  // cost model counts them) rather than STREAM's.
  double e = 0;
  switch (kind) {
    case OpKind::elementwise: e = hw_.elementwise_efficiency; break;
    case OpKind::norm: e = hw_.norm_efficiency; break;
    case OpKind::loss: e = hw_.loss_efficiency; break;
    case OpKind::embedding: e = hw_.embedding_efficiency; break;
    case OpKind::optimizer: e = hw_.optimizer_efficiency; break;
    case OpKind::data:
      if (hw_.host_link_bytes_per_s > 0) return hw_.host_link_bytes_per_s;
      break;
    default: break;
  }
  return e > 0 ? hbm_bytes_per_s_ / hw_.memory_efficiency * e : hbm_bytes_per_s_;
}

ComputeTimer::ComputeTimer(const plan::Plan& p)
    : hw_(hardware_profile(p.cluster.gpu)),
      peak_flops_(plan::peak_tflops(p.cluster.gpu, p.training.precision) * 1e12),
      attention_peak_flops_(plan::attention_peak_tflops(p.cluster.gpu, p.training) * 1e12),
      hbm_bytes_per_s_(p.cluster.gpu.hbm_gbytes_per_s * 1e9 * hw_.memory_efficiency),
      sixteen_bit_peak_flops_(p.training.precision == plan::Precision::fp8 ? sixteen_bit_peak_tflops(p.cluster.gpu) * 1e12 : peak_flops_),
      gemm_curve_(curve_at(hw_, peak_flops_, p.cluster.gpu)),
      sixteen_bit_curve_(curve_at(hw_, sixteen_bit_peak_flops_, p.cluster.gpu)),
      attention_curve_(curve_at(hw_, attention_peak_flops_, p.cluster.gpu)),
      flash_(p.training.flash_attention) {
  const AttentionKernelPaces& paces = attention_paces(hw_, p.training.attention_kernel);
  const double keys = keys_per_call(p);
  forward_over_gemm_ = paces.forward.at(keys);
  backward_over_gemm_ = paces.backward.at(keys);
}

double ComputeTimer::operator()(OpKind kind, double flops, double bytes, double cast_bytes, OpPhase phase, bool sixteen_bit) const {
  double t = hw_.kernel_overhead_s;
  switch (kind) {
    case OpKind::gemm:
      t += sixteen_bit ? flops / (sixteen_bit_peak_flops_ * sixteen_bit_curve_.efficiency(flops / 2))
                       : flops / (peak_flops_ * gemm_curve_.efficiency(flops / 2));
      // FP8: the cast kernels run before the GEMM, memory-bound, as elementwise kernels do, each
      // a launch of its own (models/op_table.hpp, kFp8CastBytesPerElement).
      if (cast_bytes > 0) t += hw_.kernel_overhead_s + cast_bytes / bytes_per_s(OpKind::elementwise);
      break;
    case OpKind::attention: {
      if (hw_.attention_max_efficiency > 0 && flops > 0) {
        // Measured on the executor's own attention kernel (`meshwork calibrate`), fitted
        // against the op's size as GEMMs are: its arithmetic and score passes together.
        const double e = GemmCurve{hw_.attention_max_efficiency, hw_.attention_half_macs}.efficiency(flops / 2);
        t += flops / (attention_peak_flops_ * e);
        break;
      }
      // Causal flash attention skips the masked half of the score blocks (Dao 2023 §3.1); the
      // op's FLOPs stay the full matrix, as MFU counts them. A fused kernel runs each pass at its
      // measured pace over the best GEMM's (training.attention_kernel, models/hardware.cpp): the
      // forward and a recomputed forward at the forward's, the backward at the backward's, which
      // does 2.5 times the forward's FLOPs where MFU counts 2 (the scores recomputed, Dao 2023
      // §4.1). Like the GEMMs, it runs at the in-training fraction of its isolated pace (the curve's
      // maximum, gemm_max_efficiency), and a small op pays the GEMM curve's fixed time; at the
      // tables' sizes (16K tokens a call) that curve is 0.93 at 512 tokens and above 0.99 from 4K,
      // so the shortest lengths' fixed work is counted by both curves by at most 7%. FP8 attention
      // (training.fp8_attention) keeps the BF16 kernels' paces over its FP8 peak: no FP8 table is
      // among docs/reference/attention (FlashAttention-3's FP8 forward, "close to 1.2 PFLOP/s" of
      // 1,979, Shah et al. 2024's abstract, is about BF16's share).
      const bool backward = phase == OpPhase::backward_input || phase == OpPhase::backward_weight;
      const double kernel_flops = flash_ && backward ? flops * kFlashBackwardFlopsOverMfu : flops;
      const double executed = flash_ ? kernel_flops * kCausalFlashFraction : flops;
      const double pace = flash_ ? (backward ? backward_over_gemm_ : forward_over_gemm_) : 1;
      const double compute = executed / (attention_peak_flops_ * attention_curve_.efficiency(flops / 2) * pace);
      const double memory = bytes / hbm_bytes_per_s_;
      // Fused (flash) attention overlaps its memory traffic with its math; unfused attention
      // runs batched GEMMs and separate softmax/dropout passes over the scores.
      t += flash_ ? std::max(compute, memory) : compute + memory;
      break;
    }
    default: t += bytes / bytes_per_s(kind); break;
  }
  return t;
}

}  // namespace meshwork::models
