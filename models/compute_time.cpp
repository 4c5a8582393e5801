#include "models/compute_time.hpp"

#include <algorithm>

#include "plan/validate.hpp"

namespace meshwork::models {
namespace {

// FlashAttention-2 reaches ~73% of A100 peak forward and ~63% backward against ~87% for the
// best GEMM (Dao 2023, arXiv:2307.08691 §4.1): 0.8 of a GEMM of the same size.
constexpr double kFlashOverGemm = 0.8;
// Decoder attention is causal: a flash kernel computes about half of the s x s blocks.
constexpr double kCausalFlashFraction = 0.5;

}  // namespace

ComputeTimer::ComputeTimer(const plan::Plan& p)
    : hw_(hardware_profile(p.cluster.gpu)),
      peak_flops_(plan::peak_tflops(p.cluster.gpu, p.training.precision) * 1e12),
      hbm_bytes_per_s_(p.cluster.gpu.hbm_gbytes_per_s * 1e9 * hw_.memory_efficiency),
      flash_(p.training.flash_attention) {}

double ComputeTimer::operator()(OpKind kind, double flops, double bytes) const {
  double t = hw_.kernel_overhead_s;
  switch (kind) {
    case OpKind::gemm: t += flops / (peak_flops_ * gemm_efficiency(hw_, flops / 2)); break;
    case OpKind::attention: {
      // Causal flash attention skips the masked half of the score blocks (Dao 2023 §3.1); the
      // op's FLOPs stay the full matrix, as MFU counts them.
      const double executed = flash_ ? flops * kCausalFlashFraction : flops;
      const double compute = executed / (peak_flops_ * gemm_efficiency(hw_, flops / 2) * (flash_ ? kFlashOverGemm : 1));
      const double memory = bytes / hbm_bytes_per_s_;
      // Fused (flash) attention overlaps its memory traffic with its math; unfused attention
      // runs batched GEMMs and separate softmax/dropout passes over the scores.
      t += flash_ ? std::max(compute, memory) : compute + memory;
      break;
    }
    case OpKind::elementwise:
    case OpKind::norm: {
      const double e = kind == OpKind::norm ? hw_.norm_efficiency : hw_.elementwise_efficiency;
      t += e > 0 ? bytes / (hbm_bytes_per_s_ / hw_.memory_efficiency * e) : bytes / hbm_bytes_per_s_;
      break;
    }
    default: t += bytes / hbm_bytes_per_s_; break;
  }
  return t;
}

}  // namespace meshwork::models
