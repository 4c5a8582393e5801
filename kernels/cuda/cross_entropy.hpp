#pragma once
// Softmax cross-entropy of logits against integer targets on the GPU, the maths of
// kernels/cross_entropy.hpp split into a per-row forward (loss and logsumexp, fp32) and a
// backward that the caller scales (1 / tokens gives the gradient of the CPU's mean loss).

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace meshwork::kernels::cuda {

// logits: [rows, vocab]; targets: [rows] int64 ids in [0, vocab), the CPU reference's type (it
// has no ignore index, so neither has this). loss_per_row[i] = lse_i - logits[i, target_i] and
// logsumexp[i] = lse_i = log sum_j exp(logits_ij), both fp32; the mean loss is the caller's sum
// over rows / rows. Targets live on the device, so a target outside [0, vocab) cannot be
// reported here without a synchronisation: it makes that row's loss NaN instead.
template <class T>
void cross_entropy_forward(const T* logits, const std::int64_t* targets, float* loss_per_row, float* logsumexp,
                           std::int64_t rows, std::int64_t vocab, cudaStream_t stream);

// dlogits[i, j] = scale * (exp(logits_ij - lse_i) - [j == target_i]), with lse from forward;
// scale = 1 / rows gives d(mean loss)/d(logits). A target outside [0, vocab) makes the row
// NaN. dlogits may alias logits.
template <class T>
void cross_entropy_backward(const T* logits, const std::int64_t* targets, const float* logsumexp, T* dlogits,
                            std::int64_t rows, std::int64_t vocab, float scale, cudaStream_t stream);

}  // namespace meshwork::kernels::cuda
