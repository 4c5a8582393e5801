#include "kernels/cuda/attention.hpp"

#include <cmath>
#include <string>
#include <utility>

#include "kernels/cuda/argument_check.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/element_convert.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/row_warps.cuh"
#include "kernels/cuda/shared_memory.hpp"
#include "kernels/cuda/stream_buffer.hpp"

namespace meshwork::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarpSize;

// Block `row` = (head, i) computes query row i of its head: the i + 1 scaled scores in shared
// memory (one warp per key, lanes across head_dim), their logsumexp, then out_i = sum_j P_ij v_j
// with one thread per output feature.
template <class T>
__global__ void forward_kernel(const T* q, const T* k, const T* v, T* out, float* logsumexp, std::int64_t seq,
                               std::int64_t dim, float scale) {
  extern __shared__ float shared[];
  float* qs = shared;       // [dim]
  float* s = shared + dim;  // [seq]: scores, then probabilities
  const std::int64_t row = blockIdx.x;
  const std::int64_t i = row % seq;
  const std::int64_t head_row0 = row - i;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarpSize, warp = tid / kWarpSize;
  for (std::int64_t d = tid; d < dim; d += kThreads) qs[d] = to_float(q[row * dim + d]);
  __syncthreads();
  for (std::int64_t j = warp; j <= i; j += kWarps) {  // warp-uniform loop
    const T* kj = k + (head_row0 + j) * dim;
    float dot = 0.0f;
    for (std::int64_t d = lane; d < dim; d += kWarpSize) dot += qs[d] * to_float(kj[d]);
    dot = warp_sum(dot);
    if (lane == 0) s[j] = dot * scale;
  }
  __syncthreads();
  // The safe softmax of kernels/attention.cpp: a NaN score makes the maximum, so the row, NaN.
  float m = -INFINITY;
  for (std::int64_t j = tid; j <= i; j += kThreads) m = nan_max(m, s[j]);
  m = block_nan_max(m);
  float sum = 0.0f;
  for (std::int64_t j = tid; j <= i; j += kThreads) sum += expf(s[j] - m);
  sum = block_sum(sum);
  const float lse = m + logf(sum);
  for (std::int64_t j = tid; j <= i; j += kThreads) s[j] = expf(s[j] - lse);
  __syncthreads();
  for (std::int64_t d = tid; d < dim; d += kThreads) {
    float o = 0.0f;
    for (std::int64_t j = 0; j <= i; ++j) o += s[j] * to_float(v[(head_row0 + j) * dim + d]);
    out[row * dim + d] = from_float<T>(o);
  }
  if (tid == 0) logsumexp[row] = lse;
}

// D_i = sum_d dout_id * out_id, one warp per row (Dao et al. 2022, Appendix B.2).
template <class T>
__global__ void delta_kernel(const T* dout, const T* out, float* delta, std::int64_t rows, std::int64_t dim) {
  const std::int64_t row = warp_row();
  if (row >= rows) return;
  float sum = 0.0f;
  for (std::int64_t d = warp_lane(); d < dim; d += kWarpSize) sum += to_float(dout[row * dim + d]) * to_float(out[row * dim + d]);
  sum = warp_sum(sum);
  if (warp_lane() == 0) delta[row] = sum;
}

// Block `row` = (head, i): dS_ij = P_ij (dP_ij - D_i) for j <= i in shared memory, then
// dq_i = scale * sum_j dS_ij k_j.
template <class T>
__global__ void dq_kernel(const T* dout, const T* q, const T* k, const T* v, const float* logsumexp,
                          const float* delta, T* dq, std::int64_t seq, std::int64_t dim, float scale) {
  extern __shared__ float shared[];
  float* qs = shared;            // [dim]
  float* dos = shared + dim;     // [dim]
  float* ds = shared + 2 * dim;  // [seq]
  const std::int64_t row = blockIdx.x;
  const std::int64_t i = row % seq;
  const std::int64_t head_row0 = row - i;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarpSize, warp = tid / kWarpSize;
  for (std::int64_t d = tid; d < dim; d += kThreads) {
    qs[d] = to_float(q[row * dim + d]);
    dos[d] = to_float(dout[row * dim + d]);
  }
  __syncthreads();
  const float lse = logsumexp[row], d_i = delta[row];
  for (std::int64_t j = warp; j <= i; j += kWarps) {
    const T* kj = k + (head_row0 + j) * dim;
    const T* vj = v + (head_row0 + j) * dim;
    float qk = 0.0f, dp = 0.0f;
    for (std::int64_t d = lane; d < dim; d += kWarpSize) {
      qk += qs[d] * to_float(kj[d]);
      dp += dos[d] * to_float(vj[d]);
    }
    qk = warp_sum(qk);
    dp = warp_sum(dp);
    if (lane == 0) ds[j] = expf(qk * scale - lse) * (dp - d_i);
  }
  __syncthreads();
  for (std::int64_t d = tid; d < dim; d += kThreads) {
    float acc = 0.0f;
    for (std::int64_t j = 0; j <= i; ++j) acc += ds[j] * to_float(k[(head_row0 + j) * dim + d]);
    dq[row * dim + d] = from_float<T>(acc * scale);
  }
}

// Block `row` = (head, j) for key j: P_ij and dS_ij for i >= j in shared memory, then
// dv_j = sum_i P_ij dout_i and dk_j = scale * sum_i dS_ij q_i.
template <class T>
__global__ void dkdv_kernel(const T* dout, const T* q, const T* k, const T* v, const float* logsumexp,
                            const float* delta, T* dk, T* dv, std::int64_t seq, std::int64_t dim, float scale) {
  extern __shared__ float shared[];
  float* ks = shared;                  // [dim]
  float* vs = shared + dim;            // [dim]
  float* p = shared + 2 * dim;         // [seq], index i - j
  float* ds = shared + 2 * dim + seq;  // [seq], index i - j
  const std::int64_t row = blockIdx.x;
  const std::int64_t j = row % seq;
  const std::int64_t head_row0 = row - j;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarpSize, warp = tid / kWarpSize;
  for (std::int64_t d = tid; d < dim; d += kThreads) {
    ks[d] = to_float(k[row * dim + d]);
    vs[d] = to_float(v[row * dim + d]);
  }
  __syncthreads();
  for (std::int64_t i = j + warp; i < seq; i += kWarps) {
    const T* qi = q + (head_row0 + i) * dim;
    const T* doi = dout + (head_row0 + i) * dim;
    float qk = 0.0f, dp = 0.0f;
    for (std::int64_t d = lane; d < dim; d += kWarpSize) {
      qk += to_float(qi[d]) * ks[d];
      dp += to_float(doi[d]) * vs[d];
    }
    qk = warp_sum(qk);
    dp = warp_sum(dp);
    if (lane == 0) {
      const float pij = expf(qk * scale - logsumexp[head_row0 + i]);
      p[i - j] = pij;
      ds[i - j] = pij * (dp - delta[head_row0 + i]);
    }
  }
  __syncthreads();
  for (std::int64_t d = tid; d < dim; d += kThreads) {
    float acc_v = 0.0f, acc_k = 0.0f;
    for (std::int64_t i = j; i < seq; ++i) {
      acc_v += p[i - j] * to_float(dout[(head_row0 + i) * dim + d]);
      acc_k += ds[i - j] * to_float(q[(head_row0 + i) * dim + d]);
    }
    dv[row * dim + d] = from_float<T>(acc_v);
    dk[row * dim + d] = from_float<T>(acc_k * scale);
  }
}

std::string shape_text(std::int64_t batch_heads, std::int64_t seq, std::int64_t head_dim) {
  return "q [" + std::to_string(batch_heads) + ", " + std::to_string(seq) + ", " + std::to_string(head_dim) + "]";
}

void check_shape(std::string_view op, std::int64_t batch_heads, std::int64_t seq, std::int64_t head_dim) {
  require(batch_heads >= 0 && seq >= 0, op, "negative shape " + shape_text(batch_heads, seq, head_dim));
  require(head_dim > 0, op, shape_text(batch_heads, seq, head_dim) + " has no head dimension");
  require_grid_fits(batch_heads * seq, op, shape_text(batch_heads, seq, head_dim));
}

// Vaswani et al. 2017 eq. 1: scores scaled by 1/sqrt(d_k), rounded once from double.
float score_scale(std::int64_t head_dim) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))); }

}  // namespace

template <class T>
void causal_attention_forward(const T* q, const T* k, const T* v, T* out, float* logsumexp, std::int64_t batch_heads,
                              std::int64_t seq, std::int64_t head_dim, cudaStream_t stream) {
  constexpr std::string_view op = "causal_attention_forward";
  check_shape(op, batch_heads, seq, head_dim);
  const std::int64_t rows = batch_heads * seq;
  if (rows == 0) return;
  for (const auto& [ptr, name] : {std::pair<const void*, const char*>{q, "q"}, {k, "k"}, {v, "v"}, {out, "out"},
                                  {logsumexp, "logsumexp"}})
    require_pointer(ptr, op, name);
  const auto bytes = static_cast<std::size_t>(head_dim + seq) * sizeof(float);
  reserve_dynamic_shared_memory(forward_kernel<T>, bytes, op, shape_text(batch_heads, seq, head_dim));
  forward_kernel<T><<<static_cast<unsigned>(rows), kThreads, bytes, stream>>>(q, k, v, out, logsumexp, seq, head_dim,
                                                                               score_scale(head_dim));
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

template <class T>
void causal_attention_backward(const T* dout, const T* q, const T* k, const T* v, const T* out,
                               const float* logsumexp, T* dq, T* dk, T* dv, std::int64_t batch_heads,
                               std::int64_t seq, std::int64_t head_dim, cudaStream_t stream) {
  constexpr std::string_view op = "causal_attention_backward";
  check_shape(op, batch_heads, seq, head_dim);
  const std::int64_t rows = batch_heads * seq;
  if (rows == 0) return;
  for (const auto& [ptr, name] :
       {std::pair<const void*, const char*>{dout, "dout"}, {q, "q"}, {k, "k"}, {v, "v"}, {out, "out"},
        {logsumexp, "logsumexp"}, {dq, "dq"}, {dk, "dk"}, {dv, "dv"}})
    require_pointer(ptr, op, name);
  const std::string shape = shape_text(batch_heads, seq, head_dim);
  const auto dq_bytes = static_cast<std::size_t>(2 * head_dim + seq) * sizeof(float);
  const auto dkdv_bytes = static_cast<std::size_t>(2 * head_dim + 2 * seq) * sizeof(float);
  reserve_dynamic_shared_memory(dq_kernel<T>, dq_bytes, op, shape);
  reserve_dynamic_shared_memory(dkdv_kernel<T>, dkdv_bytes, op, shape);
  const float scale = score_scale(head_dim);
  StreamBuffer<float> delta(static_cast<std::size_t>(rows), stream);
  delta_kernel<<<static_cast<unsigned>(row_warp_blocks(rows)), kRowWarpThreads, 0, stream>>>(dout, out, delta.data(),
                                                                                            rows, head_dim);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
  dq_kernel<T><<<static_cast<unsigned>(rows), kThreads, dq_bytes, stream>>>(dout, q, k, v, logsumexp, delta.data(), dq,
                                                                            seq, head_dim, scale);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
  dkdv_kernel<T><<<static_cast<unsigned>(rows), kThreads, dkdv_bytes, stream>>>(dout, q, k, v, logsumexp,
                                                                                delta.data(), dk, dv, seq, head_dim,
                                                                                scale);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

#define MESHWORK_INSTANTIATE(T)                                                                                 \
  template void causal_attention_forward<T>(const T*, const T*, const T*, T*, float*, std::int64_t, std::int64_t, \
                                            std::int64_t, cudaStream_t);                                       \
  template void causal_attention_backward<T>(const T*, const T*, const T*, const T*, const T*, const float*, T*, \
                                             T*, T*, std::int64_t, std::int64_t, std::int64_t, cudaStream_t);
MESHWORK_INSTANTIATE(float)
MESHWORK_INSTANTIATE(__nv_bfloat16)
#undef MESHWORK_INSTANTIATE

}  // namespace meshwork::kernels::cuda
