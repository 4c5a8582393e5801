#pragma once
// One AdamW step on the GPU (Loshchilov & Hutter 2019, Algorithm 2) over a flat fp32 master
// shard: the hyperparameters (kernels/adamw.hpp's AdamWHyperparams), bias correction and
// operation order of the CPU adamw_step<float>, each operation an IEEE single-precision one.

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/adamw.hpp"

namespace meshwork::kernels::cuda {

// params, exp_avg (m), exp_avg_sq (v): fp32 [count], updated in place; grads: [count] fp32 or
// bf16 (widened exactly). step is 1-based. params_bf16 (nullable): [count], receives the
// updated params rounded to nearest even, the copy a bf16 forward pass reads.
template <class G>
void adamw_step(float* params, const G* grads, float* exp_avg, float* exp_avg_sq, __nv_bfloat16* params_bf16,
                std::int64_t count, std::int64_t step, const AdamWHyperparams& hp, cudaStream_t stream);

}  // namespace meshwork::kernels::cuda
