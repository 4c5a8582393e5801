#include "kernels/cuda/cross_entropy.hpp"

#include <string>

#include "kernels/cuda/argument_check.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/element_convert.cuh"
#include "kernels/cuda/reduce.cuh"

namespace meshwork::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// One block per row: the row maximum (NaN-propagating, as vocab_parallel_local_max), then
// sum exp(z - max), then -log softmax(z)_t = lse - z_t.
template <class T>
__global__ void forward_kernel(const T* logits, const std::int64_t* targets, float* loss_per_row, float* logsumexp,
                               std::int64_t vocab) {
  const std::int64_t row = blockIdx.x;
  const T* z = logits + row * vocab;
  float m = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < vocab; j += kThreads) m = nan_max(m, to_float(z[j]));
  m = block_nan_max(m);
  // Shifting by the maximum keeps exp() in range: the largest term is exp(0).
  float sum = 0.0f;
  for (std::int64_t j = threadIdx.x; j < vocab; j += kThreads) sum += expf(to_float(z[j]) - m);
  sum = block_sum(sum);
  if (threadIdx.x == 0) {
    const float lse = m + logf(sum);
    const std::int64_t t = targets[row];
    logsumexp[row] = lse;
    loss_per_row[row] = (t >= 0 && t < vocab) ? lse - to_float(z[t]) : NAN;
  }
}

// d/dz_j of the loss: softmax(z)_j - [j == t], times the caller's scale.
template <class T>
__global__ void backward_kernel(const T* logits, const std::int64_t* targets, const float* logsumexp, T* dlogits,
                                std::int64_t vocab, float scale) {
  const std::int64_t row = blockIdx.x;
  const std::int64_t t = targets[row];
  const bool valid = t >= 0 && t < vocab;
  const float lse = logsumexp[row];
  for (std::int64_t j = threadIdx.x; j < vocab; j += kThreads) {
    const float p = expf(to_float(logits[row * vocab + j]) - lse);
    const float g = valid ? scale * (p - (j == t ? 1.0f : 0.0f)) : NAN;
    dlogits[row * vocab + j] = from_float<T>(g);
  }
}

void check_shape(std::string_view op, std::int64_t rows, std::int64_t vocab) {
  require(rows >= 0, op, "negative shape " + shape_of(rows, vocab));
  require(vocab > 0, op, "logits " + shape_of(rows, vocab) + " hold no vocabulary");
  require_grid_fits(rows, op, "logits " + shape_of(rows, vocab));
}

}  // namespace

template <class T>
void cross_entropy_forward(const T* logits, const std::int64_t* targets, float* loss_per_row, float* logsumexp,
                           std::int64_t rows, std::int64_t vocab, cudaStream_t stream) {
  constexpr std::string_view op = "cross_entropy_forward";
  check_shape(op, rows, vocab);
  if (rows == 0) return;
  require_pointer(logits, op, "logits");
  require_pointer(targets, op, "targets");
  require_pointer(loss_per_row, op, "loss_per_row");
  require_pointer(logsumexp, op, "logsumexp");
  forward_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, targets, loss_per_row, logsumexp,
                                                                        vocab);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

template <class T>
void cross_entropy_backward(const T* logits, const std::int64_t* targets, const float* logsumexp, T* dlogits,
                            std::int64_t rows, std::int64_t vocab, float scale, cudaStream_t stream) {
  constexpr std::string_view op = "cross_entropy_backward";
  check_shape(op, rows, vocab);
  if (rows == 0) return;
  require_pointer(logits, op, "logits");
  require_pointer(targets, op, "targets");
  require_pointer(logsumexp, op, "logsumexp");
  require_pointer(dlogits, op, "dlogits");
  backward_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, targets, logsumexp, dlogits, vocab,
                                                                         scale);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

#define MESHWORK_INSTANTIATE(T)                                                                                 \
  template void cross_entropy_forward<T>(const T*, const std::int64_t*, float*, float*, std::int64_t, std::int64_t, \
                                         cudaStream_t);                                                        \
  template void cross_entropy_backward<T>(const T*, const std::int64_t*, const float*, T*, std::int64_t,        \
                                          std::int64_t, float, cudaStream_t);
MESHWORK_INSTANTIATE(float)
MESHWORK_INSTANTIATE(__nv_bfloat16)
#undef MESHWORK_INSTANTIATE

}  // namespace meshwork::kernels::cuda
