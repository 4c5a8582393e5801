#include "kernels/cuda/causal_softmax.hpp"

#include <string>

#include "kernels/cuda/argument_check.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/element_convert.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/row_warps.cuh"

namespace meshwork::kernels::cuda {
namespace {

// One warp per row of the batch * seq rows; row r is query i = r % seq of its matrix.
template <class T>
__global__ void forward_kernel(const T* scores, T* probs, std::int64_t rows, std::int64_t seq, float scale) {
  const std::int64_t row = warp_row();
  if (row >= rows) return;
  const int lane = warp_lane();
  const std::int64_t visible = row % seq + 1;  // columns j <= i
  const T* s = scores + row * seq;
  T* p = probs + row * seq;
  // Subtracting the row maximum keeps exp() in range (the "safe softmax"); a NaN score makes
  // the maximum, and so the row, NaN, as in kernels/attention.cpp.
  float m = -INFINITY;
  for (std::int64_t j = lane; j < visible; j += kWarpSize) m = nan_max(m, scale * to_float(s[j]));
  m = warp_reduce(m, NanMaxOp{});
  float sum = 0.0f;
  for (std::int64_t j = lane; j < visible; j += kWarpSize) sum += expf(scale * to_float(s[j]) - m);
  sum = warp_sum(sum);
  for (std::int64_t j = lane; j < seq; j += kWarpSize)
    p[j] = from_float<T>(j < visible ? expf(scale * to_float(s[j]) - m) / sum : 0.0f);
}

// The softmax Jacobian-vector product (Dao et al. 2022, Appendix B.2): dS = P * (dP - D) with
// D_i = sum_j P_ij dP_ij, times the scale that multiplied S before the softmax.
template <class T>
__global__ void backward_kernel(const T* dprobs, const T* probs, T* dscores, std::int64_t rows, std::int64_t seq,
                                float scale) {
  const std::int64_t row = warp_row();
  if (row >= rows) return;
  const int lane = warp_lane();
  const std::int64_t visible = row % seq + 1;
  const T* dp = dprobs + row * seq;
  const T* p = probs + row * seq;
  T* ds = dscores + row * seq;
  float d = 0.0f;
  for (std::int64_t j = lane; j < visible; j += kWarpSize) d += to_float(p[j]) * to_float(dp[j]);
  d = warp_sum(d);
  for (std::int64_t j = lane; j < seq; j += kWarpSize)
    ds[j] = from_float<T>(j < visible ? scale * to_float(p[j]) * (to_float(dp[j]) - d) : 0.0f);
}

void check_shape(std::string_view op, std::int64_t batch, std::int64_t seq) {
  require(batch >= 0 && seq >= 0, op, "negative shape: batch " + std::to_string(batch) + ", seq " +
                                          std::to_string(seq));
  require_grid_fits(row_warp_blocks(batch * seq), op,
                    "batch " + std::to_string(batch) + " of " + shape_of(seq, seq));
}

}  // namespace

template <class T>
void causal_softmax_forward(const T* scores, T* probs, std::int64_t batch, std::int64_t seq, float scale,
                            cudaStream_t stream) {
  constexpr std::string_view op = "causal_softmax_forward";
  check_shape(op, batch, seq);
  const std::int64_t rows = batch * seq;
  if (rows == 0) return;
  require_pointer(scores, op, "scores");
  require_pointer(probs, op, "probs");
  forward_kernel<<<static_cast<unsigned>(row_warp_blocks(rows)), kRowWarpThreads, 0, stream>>>(scores, probs, rows,
                                                                                              seq, scale);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

template <class T>
void causal_softmax_backward(const T* dprobs, const T* probs, T* dscores, std::int64_t batch, std::int64_t seq,
                             float scale, cudaStream_t stream) {
  constexpr std::string_view op = "causal_softmax_backward";
  check_shape(op, batch, seq);
  const std::int64_t rows = batch * seq;
  if (rows == 0) return;
  require_pointer(dprobs, op, "dprobs");
  require_pointer(probs, op, "probs");
  require_pointer(dscores, op, "dscores");
  backward_kernel<<<static_cast<unsigned>(row_warp_blocks(rows)), kRowWarpThreads, 0, stream>>>(dprobs, probs,
                                                                                               dscores, rows, seq, scale);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

#define MESHWORK_INSTANTIATE(T)                                                                         \
  template void causal_softmax_forward<T>(const T*, T*, std::int64_t, std::int64_t, float, cudaStream_t); \
  template void causal_softmax_backward<T>(const T*, const T*, T*, std::int64_t, std::int64_t, float, cudaStream_t);
MESHWORK_INSTANTIATE(float)
MESHWORK_INSTANTIATE(__nv_bfloat16)
#undef MESHWORK_INSTANTIATE

}  // namespace meshwork::kernels::cuda
