#include "kernels/cuda/adamw.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cuda/argument_check.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/element_convert.cuh"

namespace meshwork::kernels::cuda {
namespace {

// The fp32 scalars of kernels/adamw.cpp, rounded on the host exactly as it rounds them.
struct AdamWScalars {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, correction1, correction2, lr, eps, decay;
};

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 65536;  // grid-stride beyond this

// The CPU loop body with every operation an explicit round-to-nearest intrinsic: nvcc would
// otherwise contract a * b + c into an FMA (one rounding instead of two), and the result would
// drift from the CPU's by an ulp now and then.
template <class G>
__global__ void step_kernel(float* params, const G* grads, float* exp_avg, float* exp_avg_sq,
                            __nv_bfloat16* params_bf16, std::int64_t count, AdamWScalars s) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const float g = to_float(grads[i]);
    const float m = __fadd_rn(__fmul_rn(s.beta1, exp_avg[i]), __fmul_rn(s.one_minus_beta1, g));
    const float v = __fadd_rn(__fmul_rn(s.beta2, exp_avg_sq[i]), __fmul_rn(__fmul_rn(s.one_minus_beta2, g), g));
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const float m_hat = __fdiv_rn(m, s.correction1);
    const float v_hat = __fdiv_rn(v, s.correction2);
    // Loshchilov & Hutter 2019, Algorithm 2, line 12, with eta_t = lr: the decay uses the
    // parameter before this step and never enters m or v.
    const float p = params[i];
    const float update = __fadd_rn(__fdiv_rn(m_hat, __fadd_rn(__fsqrt_rn(v_hat), s.eps)), __fmul_rn(s.decay, p));
    const float p_new = __fsub_rn(p, __fmul_rn(s.lr, update));
    params[i] = p_new;
    if (params_bf16 != nullptr) params_bf16[i] = __float2bfloat16(p_new);
  }
}

}  // namespace

template <class G>
void adamw_step(float* params, const G* grads, float* exp_avg, float* exp_avg_sq, __nv_bfloat16* params_bf16,
                std::int64_t count, std::int64_t step, const AdamWHyperparams& hp, cudaStream_t stream) {
  constexpr std::string_view op = "adamw_step";
  require(count >= 0, op, "negative count " + std::to_string(count));
  require(step >= 1, op, "step is 1-based, got " + std::to_string(step));
  require(hp.beta1 >= 0 && hp.beta1 < 1 && hp.beta2 >= 0 && hp.beta2 < 1, op,
          "beta1 and beta2 must lie in [0, 1), got " + std::to_string(hp.beta1) + ", " + std::to_string(hp.beta2));
  if (count == 0) return;
  require_pointer(params, op, "params");
  require_pointer(grads, op, "grads");
  require_pointer(exp_avg, op, "exp_avg");
  require_pointer(exp_avg_sq, op, "exp_avg_sq");
  // Kingma & Ba 2015, Algorithm 1: the bias corrections 1 - beta^t, computed in double (beta2^t
  // for t ~ 1e5 steps) and rounded once, as kernels/adamw.cpp.
  const double t = static_cast<double>(step);
  AdamWScalars s{};
  s.beta1 = static_cast<float>(hp.beta1);
  s.one_minus_beta1 = 1.0f - s.beta1;
  s.beta2 = static_cast<float>(hp.beta2);
  s.one_minus_beta2 = 1.0f - s.beta2;
  s.correction1 = static_cast<float>(1.0 - std::pow(hp.beta1, t));
  s.correction2 = static_cast<float>(1.0 - std::pow(hp.beta2, t));
  s.lr = static_cast<float>(hp.lr);
  s.eps = static_cast<float>(hp.eps);
  s.decay = static_cast<float>(hp.weight_decay);
  const auto blocks = static_cast<unsigned>(std::min((count + kThreads - 1) / kThreads, kMaxBlocks));
  step_kernel<<<blocks, kThreads, 0, stream>>>(params, grads, exp_avg, exp_avg_sq, params_bf16, count, s);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

template void adamw_step<float>(float*, const float*, float*, float*, __nv_bfloat16*, std::int64_t, std::int64_t,
                                const AdamWHyperparams&, cudaStream_t);
template void adamw_step<__nv_bfloat16>(float*, const __nv_bfloat16*, float*, float*, __nv_bfloat16*, std::int64_t,
                                        std::int64_t, const AdamWHyperparams&, cudaStream_t);

}  // namespace meshwork::kernels::cuda
