#include "kernels/cuda/causal_softmax.hpp"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "kernels/cuda/argument_check.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/element_convert.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/row_warps.cuh"

namespace meshwork::kernels::cuda {
namespace {

// The columns of query i's row that are written: to the end of its block of block_rows rows
// (the causal GEMMs' diagonal block, which reads the zeros), or the whole row (block_rows 0).
__host__ __device__ inline std::int64_t written_columns(std::int64_t i, std::int64_t seq, std::int64_t block_rows) {
  if (block_rows <= 0) return seq;
  const std::int64_t end = (i / block_rows + 1) * block_rows;
  return end < seq ? end : seq;
}

// One warp per row of the batch * seq rows; row r is query i = r % seq of its matrix.
template <class T>
__global__ void forward_kernel(const T* scores, T* probs, std::int64_t rows, std::int64_t seq, float scale,
                               std::int64_t block_rows) {
  const std::int64_t row = warp_row();
  if (row >= rows) return;
  const int lane = warp_lane();
  const std::int64_t visible = row % seq + 1;  // columns j <= i
  const std::int64_t written = written_columns(row % seq, seq, block_rows);
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
  for (std::int64_t j = lane; j < written; j += kWarpSize)
    p[j] = from_float<T>(j < visible ? expf(scale * to_float(s[j]) - m) / sum : 0.0f);
}

// The softmax Jacobian-vector product (Dao et al. 2022, Appendix B.2): dS = P * (dP - D) with
// D_i = sum_j P_ij dP_ij, times the scale that multiplied S before the softmax.
template <class T>
__global__ void backward_kernel(const T* dprobs, const T* probs, T* dscores, std::int64_t rows, std::int64_t seq,
                                float scale, std::int64_t block_rows) {
  const std::int64_t row = warp_row();
  if (row >= rows) return;
  const int lane = warp_lane();
  const std::int64_t visible = row % seq + 1;
  const std::int64_t written = written_columns(row % seq, seq, block_rows);
  const T* dp = dprobs + row * seq;
  const T* p = probs + row * seq;
  T* ds = dscores + row * seq;
  float d = 0.0f;
  for (std::int64_t j = lane; j < visible; j += kWarpSize) d += to_float(p[j]) * to_float(dp[j]);
  d = warp_sum(d);
  for (std::int64_t j = lane; j < written; j += kWarpSize)
    ds[j] = from_float<T>(j < visible ? scale * to_float(p[j]) * (to_float(dp[j]) - d) : 0.0f);
}

// The bf16 rows of the training shapes (seq a multiple of 8, at most kRowVectorThreads * 8 *
// 8 = 8,192): one block per row, each thread holding up to NV 16-byte vectors of the row in
// registers, so that the row is read once and written once (the warp-per-row kernels above
// read it two or three times, two bytes per lane). Only the vectors that hold visible columns
// are loaded; inside a vector the masked columns are dropped by index. Roughly halves the
// bytes moved and makes each access a full 16-byte one (measured in bench/RESULTS.md, the
// GPU step's attention).
constexpr int kRowVectorThreads = 128;
constexpr int kBf16PerVector = 8;  // 16 bytes
constexpr std::int64_t kMaxVectorRowSeq = std::int64_t{kRowVectorThreads} * kBf16PerVector * 8;

__device__ __forceinline__ void unpack(const uint4& raw, float (&out)[kBf16PerVector]) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int e = 0; e < kBf16PerVector / 2; ++e) {
    const float2 f = __bfloat1622float2(h[e]);
    out[2 * e] = f.x;
    out[2 * e + 1] = f.y;
  }
}

__device__ __forceinline__ uint4 pack(const float (&in)[kBf16PerVector]) {
  uint4 raw;
  auto* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int e = 0; e < kBf16PerVector / 2; ++e) h[e] = __floats2bfloat162_rn(in[2 * e], in[2 * e + 1]);
  return raw;
}

// Each visible score's exponential is taken once and kept in registers, scaled by one
// reciprocal of the row sum, with the fast __expf (its relative error, a few fp32 ulps for the
// arguments here, all <= 0, is far below the bf16 output's 2^-9 rounding). The first version,
// which took expf twice and divided per element, was bound by its arithmetic: 1.7 TB/s under
// Nsight Compute (first GPU check, 2026-12-04). Columns are int32 (seq <= kMaxVectorRowSeq).
template <int NV>
__global__ void __launch_bounds__(kRowVectorThreads)
    forward_rows_kernel(const __nv_bfloat16* scores, __nv_bfloat16* probs, std::int64_t seq, float scale,
                        std::int64_t block_rows) {
  const std::int64_t row = blockIdx.x;
  const int visible = static_cast<int>(row % seq) + 1;
  const int written = static_cast<int>(written_columns(row % seq, seq, block_rows));
  const int vectors = static_cast<int>(seq) / kBf16PerVector;
  const auto* s = reinterpret_cast<const uint4*>(scores + row * seq);
  auto* p = reinterpret_cast<uint4*>(probs + row * seq);
  float x[NV][kBf16PerVector];
  float m = -INFINITY;
#pragma unroll
  for (int v = 0; v < NV; ++v) {
    const int idx = v * kRowVectorThreads + static_cast<int>(threadIdx.x), col = idx * kBf16PerVector;
    if (idx < vectors && col < visible) {
      unpack(s[idx], x[v]);
#pragma unroll
      for (int e = 0; e < kBf16PerVector; ++e) {
        x[v][e] *= scale;
        if (col + e < visible) m = nan_max(m, x[v][e]);
      }
    }
  }
  m = block_nan_max(m);
  float sum = 0.0f;
#pragma unroll
  for (int v = 0; v < NV; ++v) {
    const int idx = v * kRowVectorThreads + static_cast<int>(threadIdx.x), col = idx * kBf16PerVector;
    if (idx < vectors && col < visible) {
#pragma unroll
      for (int e = 0; e < kBf16PerVector; ++e) {
        x[v][e] = col + e < visible ? __expf(x[v][e] - m) : 0.0f;
        sum += x[v][e];
      }
    }
  }
  const float inv = 1.0f / block_sum(sum);
#pragma unroll
  for (int v = 0; v < NV; ++v) {
    const int idx = v * kRowVectorThreads + static_cast<int>(threadIdx.x), col = idx * kBf16PerVector;
    if (idx >= vectors || col >= written) continue;
    float y[kBf16PerVector] = {};
    if (col < visible) {
#pragma unroll
      for (int e = 0; e < kBf16PerVector; ++e) y[e] = col + e < visible ? x[v][e] * inv : 0.0f;  // 0, not 0 * NaN
    }
    p[idx] = pack(y);
  }
}

template <int NV>
__global__ void __launch_bounds__(kRowVectorThreads)
    backward_rows_kernel(const __nv_bfloat16* dprobs, const __nv_bfloat16* probs, __nv_bfloat16* dscores,
                         std::int64_t seq, float scale, std::int64_t block_rows) {
  const std::int64_t row = blockIdx.x;
  const std::int64_t visible = row % seq + 1;
  const std::int64_t written = written_columns(row % seq, seq, block_rows);
  const std::int64_t vectors = seq / kBf16PerVector;
  const auto* dp = reinterpret_cast<const uint4*>(dprobs + row * seq);
  const auto* p = reinterpret_cast<const uint4*>(probs + row * seq);
  auto* ds = reinterpret_cast<uint4*>(dscores + row * seq);
  uint4 raw_dp[NV], raw_p[NV];
  float d = 0.0f;
#pragma unroll
  for (int v = 0; v < NV; ++v) {
    const std::int64_t idx = v * kRowVectorThreads + threadIdx.x, col = idx * kBf16PerVector;
    if (idx < vectors && col < visible) {
      raw_dp[v] = dp[idx];
      raw_p[v] = p[idx];
      float a[kBf16PerVector], b[kBf16PerVector];
      unpack(raw_p[v], a);
      unpack(raw_dp[v], b);
#pragma unroll
      for (int e = 0; e < kBf16PerVector; ++e)
        if (col + e < visible) d += a[e] * b[e];
    }
  }
  d = block_sum(d);
#pragma unroll
  for (int v = 0; v < NV; ++v) {
    const std::int64_t idx = v * kRowVectorThreads + threadIdx.x, col = idx * kBf16PerVector;
    if (idx >= vectors || col >= written) continue;
    float y[kBf16PerVector] = {};
    if (col < visible) {
      float a[kBf16PerVector], b[kBf16PerVector];
      unpack(raw_p[v], a);
      unpack(raw_dp[v], b);
#pragma unroll
      for (int e = 0; e < kBf16PerVector; ++e) y[e] = col + e < visible ? scale * a[e] * (b[e] - d) : 0.0f;
    }
    ds[idx] = pack(y);
  }
}

// The vectors per thread the row kernels need for `seq`, or 0 when they do not take it (fp32,
// seq not a multiple of 8, longer than kMaxVectorRowSeq, a row not 16-byte aligned).
template <class T>
int row_vectors(std::int64_t seq, std::initializer_list<const void*> pointers) {
  if constexpr (!std::is_same_v<T, __nv_bfloat16>) {
    return 0;
  } else {
    if (seq % kBf16PerVector != 0 || seq > kMaxVectorRowSeq) return 0;
    for (const void* ptr : pointers)
      if (reinterpret_cast<std::uintptr_t>(ptr) % sizeof(uint4) != 0) return 0;
    const std::int64_t per_thread = (seq / kBf16PerVector + kRowVectorThreads - 1) / kRowVectorThreads;
    int nv = 1;
    while (nv < per_thread) nv *= 2;
    return nv;
  }
}

template <int NV>
void launch_forward(const __nv_bfloat16* scores, __nv_bfloat16* probs, std::int64_t rows, std::int64_t seq, float scale,
                    std::int64_t block_rows, cudaStream_t stream) {
  forward_rows_kernel<NV><<<static_cast<unsigned>(rows), kRowVectorThreads, 0, stream>>>(scores, probs, seq, scale,
                                                                                       block_rows);
}

template <int NV>
void launch_backward(const __nv_bfloat16* dprobs, const __nv_bfloat16* probs, __nv_bfloat16* dscores, std::int64_t rows,
                     std::int64_t seq, float scale, std::int64_t block_rows, cudaStream_t stream) {
  backward_rows_kernel<NV><<<static_cast<unsigned>(rows), kRowVectorThreads, 0, stream>>>(dprobs, probs, dscores, seq,
                                                                                        scale, block_rows);
}

void check_shape(std::string_view op, std::int64_t batch, std::int64_t seq, std::int64_t block_rows) {
  require(batch >= 0 && seq >= 0, op, "negative shape: batch " + std::to_string(batch) + ", seq " +
                                          std::to_string(seq));
  require(block_rows >= 0 && (block_rows == 0 || seq % block_rows == 0), op,
          "block_rows " + std::to_string(block_rows) + " must be 0 or divide seq " + std::to_string(seq));
  require_grid_fits(row_warp_blocks(batch * seq), op,
                    "batch " + std::to_string(batch) + " of " + shape_of(seq, seq));
}

}  // namespace

template <class T>
void causal_softmax_forward(const T* scores, T* probs, std::int64_t batch, std::int64_t seq, float scale,
                            cudaStream_t stream, std::int64_t block_rows) {
  constexpr std::string_view op = "causal_softmax_forward";
  check_shape(op, batch, seq, block_rows);
  const std::int64_t rows = batch * seq;
  if (rows == 0) return;
  require_pointer(scores, op, "scores");
  require_pointer(probs, op, "probs");
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    // rows <= 2^31 - 1 blocks: check_shape bounds batch * seq / kRowWarps, and seq <= 8,192
    // here, so rows are within a grid's x only if this holds too.
    if (rows <= 0x7fffffff) {
      switch (row_vectors<T>(seq, {scores, probs})) {
        case 1: launch_forward<1>(scores, probs, rows, seq, scale, block_rows, stream); MESHWORK_CUDA_CHECK(cudaGetLastError()); return;
        case 2: launch_forward<2>(scores, probs, rows, seq, scale, block_rows, stream); MESHWORK_CUDA_CHECK(cudaGetLastError()); return;
        case 4: launch_forward<4>(scores, probs, rows, seq, scale, block_rows, stream); MESHWORK_CUDA_CHECK(cudaGetLastError()); return;
        case 8: launch_forward<8>(scores, probs, rows, seq, scale, block_rows, stream); MESHWORK_CUDA_CHECK(cudaGetLastError()); return;
        default: break;
      }
    }
  }
  forward_kernel<<<static_cast<unsigned>(row_warp_blocks(rows)), kRowWarpThreads, 0, stream>>>(scores, probs, rows,
                                                                                              seq, scale, block_rows);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

template <class T>
void causal_softmax_backward(const T* dprobs, const T* probs, T* dscores, std::int64_t batch, std::int64_t seq,
                             float scale, cudaStream_t stream, std::int64_t block_rows) {
  constexpr std::string_view op = "causal_softmax_backward";
  check_shape(op, batch, seq, block_rows);
  const std::int64_t rows = batch * seq;
  if (rows == 0) return;
  require_pointer(dprobs, op, "dprobs");
  require_pointer(probs, op, "probs");
  require_pointer(dscores, op, "dscores");
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if (rows <= 0x7fffffff) {
      switch (row_vectors<T>(seq, {dprobs, probs, dscores})) {
        case 1: launch_backward<1>(dprobs, probs, dscores, rows, seq, scale, block_rows, stream); MESHWORK_CUDA_CHECK(cudaGetLastError()); return;
        case 2: launch_backward<2>(dprobs, probs, dscores, rows, seq, scale, block_rows, stream); MESHWORK_CUDA_CHECK(cudaGetLastError()); return;
        case 4: launch_backward<4>(dprobs, probs, dscores, rows, seq, scale, block_rows, stream); MESHWORK_CUDA_CHECK(cudaGetLastError()); return;
        case 8: launch_backward<8>(dprobs, probs, dscores, rows, seq, scale, block_rows, stream); MESHWORK_CUDA_CHECK(cudaGetLastError()); return;
        default: break;
      }
    }
  }
  backward_kernel<<<static_cast<unsigned>(row_warp_blocks(rows)), kRowWarpThreads, 0, stream>>>(dprobs, probs,
                                                                                               dscores, rows, seq, scale,
                                                                                               block_rows);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

#define MESHWORK_INSTANTIATE(T)                                                                         \
  template void causal_softmax_forward<T>(const T*, T*, std::int64_t, std::int64_t, float, cudaStream_t, std::int64_t); \
  template void causal_softmax_backward<T>(const T*, const T*, T*, std::int64_t, std::int64_t, float, cudaStream_t, \
                                           std::int64_t);
MESHWORK_INSTANTIATE(float)
MESHWORK_INSTANTIATE(__nv_bfloat16)
#undef MESHWORK_INSTANTIATE

}  // namespace meshwork::kernels::cuda
