#include "kernels/cuda/adamw.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

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
// One element's update, shared by the scalar and the vector kernels (same bits either way).
__device__ __forceinline__ float update_one(float p, float g, float& m_io, float& v_io, const AdamWScalars& s) {
  const float m = __fadd_rn(__fmul_rn(s.beta1, m_io), __fmul_rn(s.one_minus_beta1, g));
  const float v = __fadd_rn(__fmul_rn(s.beta2, v_io), __fmul_rn(__fmul_rn(s.one_minus_beta2, g), g));
  m_io = m;
  v_io = v;
  const float m_hat = __fdiv_rn(m, s.correction1);
  const float v_hat = __fdiv_rn(v, s.correction2);
  // Loshchilov & Hutter 2019, Algorithm 2, line 12, with eta_t = lr: the decay uses the
  // parameter before this step and never enters m or v.
  const float update = __fadd_rn(__fdiv_rn(m_hat, __fadd_rn(__fsqrt_rn(v_hat), s.eps)), __fmul_rn(s.decay, p));
  return __fsub_rn(p, __fmul_rn(s.lr, update));
}

// fp32 gradients, every pointer 16-byte aligned: four elements per thread and access (float4
// loads and stores, the bf16 copy as 8 bytes). The optimizer moves 30 bytes per parameter and
// is bound by memory bandwidth; the scalar kernel's 4-byte accesses left a quarter of the
// H200's on the table (bench/RESULTS.md, the GPU step's optimizer).
__global__ void step_kernel_vec4(float4* params, const float4* grads, float4* exp_avg, float4* exp_avg_sq,
                                 uint2* params_bf16, std::int64_t vectors, AdamWScalars s) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors; i += stride) {
    float4 p = params[i], m = exp_avg[i], v = exp_avg_sq[i];
    const float4 g = grads[i];
    p.x = update_one(p.x, g.x, m.x, v.x, s);
    p.y = update_one(p.y, g.y, m.y, v.y, s);
    p.z = update_one(p.z, g.z, m.z, v.z, s);
    p.w = update_one(p.w, g.w, m.w, v.w, s);
    params[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    if (params_bf16 != nullptr) {
      uint2 packed;
      auto* h = reinterpret_cast<__nv_bfloat162*>(&packed);
      h[0] = __floats2bfloat162_rn(p.x, p.y);
      h[1] = __floats2bfloat162_rn(p.z, p.w);
      params_bf16[i] = packed;
    }
  }
}

template <class G>
__global__ void step_kernel(float* params, const G* grads, float* exp_avg, float* exp_avg_sq,
                            __nv_bfloat16* params_bf16, std::int64_t count, AdamWScalars s) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    float m = exp_avg[i], v = exp_avg_sq[i];
    const float p_new = update_one(params[i], to_float(grads[i]), m, v, s);
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
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
  auto aligned = [](const void* ptr, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(ptr) % bytes == 0; };
  std::int64_t done = 0;
  if constexpr (std::is_same_v<G, float>) {
    if (aligned(params, 16) && aligned(grads, 16) && aligned(exp_avg, 16) && aligned(exp_avg_sq, 16) &&
        (params_bf16 == nullptr || aligned(params_bf16, 8))) {
      const std::int64_t vectors = count / 4;
      if (vectors > 0) {
        const auto blocks = static_cast<unsigned>(std::min((vectors + kThreads - 1) / kThreads, kMaxBlocks));
        step_kernel_vec4<<<blocks, kThreads, 0, stream>>>(
            reinterpret_cast<float4*>(params), reinterpret_cast<const float4*>(grads), reinterpret_cast<float4*>(exp_avg),
            reinterpret_cast<float4*>(exp_avg_sq), reinterpret_cast<uint2*>(params_bf16), vectors, s);
        MESHWORK_CUDA_CHECK(cudaGetLastError());
      }
      done = vectors * 4;
    }
  }
  if (done == count) return;
  const std::int64_t rest = count - done;
  const auto blocks = static_cast<unsigned>(std::min((rest + kThreads - 1) / kThreads, kMaxBlocks));
  step_kernel<<<blocks, kThreads, 0, stream>>>(params + done, grads + done, exp_avg + done, exp_avg_sq + done,
                                               params_bf16 == nullptr ? nullptr : params_bf16 + done, rest, s);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

template void adamw_step<float>(float*, const float*, float*, float*, __nv_bfloat16*, std::int64_t, std::int64_t,
                                const AdamWHyperparams&, cudaStream_t);
template void adamw_step<__nv_bfloat16>(float*, const __nv_bfloat16*, float*, float*, __nv_bfloat16*, std::int64_t,
                                        std::int64_t, const AdamWHyperparams&, cudaStream_t);

}  // namespace meshwork::kernels::cuda
