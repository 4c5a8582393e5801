#include "models/compute_time.hpp"

#include <algorithm>

#include "models/gemm_fit.hpp"
#include "plan/validate.hpp"

namespace meshwork::models {
namespace {

// FlashAttention-2 reaches ~73% of A100 peak forward and ~63% backward against ~87% for the
// best GEMM (Dao 2023, arXiv:2307.08691 §4.1): 0.8 of a GEMM of the same size.
constexpr double kFlashOverGemm = 0.8;
// Decoder attention is causal: a flash kernel computes about half of the s x s blocks.
constexpr double kCausalFlashFraction = 0.5;

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
    default: break;
  }
  return e > 0 ? hbm_bytes_per_s_ / hw_.memory_efficiency * e : hbm_bytes_per_s_;
}

ComputeTimer::ComputeTimer(const plan::Plan& p)
    : hw_(hardware_profile(p.cluster.gpu)),
      peak_flops_(plan::peak_tflops(p.cluster.gpu, p.training.precision) * 1e12),
      attention_peak_flops_(plan::attention_peak_tflops(p.cluster.gpu, p.training) * 1e12),
      hbm_bytes_per_s_(p.cluster.gpu.hbm_gbytes_per_s * 1e9 * hw_.memory_efficiency),
      flash_(p.training.flash_attention) {}

double ComputeTimer::operator()(OpKind kind, double flops, double bytes, double cast_bytes, double gemm_groups) const {
  double t = hw_.kernel_overhead_s;
  switch (kind) {
    case OpKind::gemm:
      // A grouped GEMM's members each tile the GPU at their own size (wave quantisation and
      // the per-tile prologue are a member's; only the launch is shared): the size curve at
      // one member's multiply-adds. What is published agrees in direction: NVIDIA's blog
      // "Introducing Grouped GEMM APIs in cuBLAS" gives 1.2x over looping batched calls for an
      // MoE's small batches (launches saved), and TensorRT-LLM's "MoE as Dense GEMM" names
      // small per-expert shapes as what grouped GEMMs pay for. No measured grouped-GEMM table
      // is at hand: this is the curve's own assumption, said in docs/efficiency-constants.md.
      t += flops / (peak_flops_ * gemm_efficiency(hw_, flops / 2 / std::max(1.0, gemm_groups)));
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
      // op's FLOPs stay the full matrix, as MFU counts them.
      const double executed = flash_ ? flops * kCausalFlashFraction : flops;
      const double compute = executed / (attention_peak_flops_ * gemm_efficiency(hw_, flops / 2) * (flash_ ? kFlashOverGemm : 1));
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
