#include "kernels/cuda/flash_attention.hpp"

#include <cmath>
#include <string>
#include <utility>

#include "kernels/cuda/argument_check.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/element_convert.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/shared_memory.hpp"

namespace meshwork::kernels::cuda {
namespace {

// Dao et al. 2022, Algorithm 1 with B_r = B_c = 32: one warp-width of keys per tile, so lane c
// owns key c of the tile. Equal, aligned query and key tiles mean the last key tile a query
// tile visits is its diagonal one, and every visited tile holds a key j <= i for every query
// row i of the block (tile kt's first key is kt * 32 <= the tile's first query): the running
// maximum is finite after the first tile and exp(m_old - m_new) never sees -inf - (-inf).
constexpr int kTileRows = 32;  // B_r: queries per block
constexpr int kTileKeys = 32;  // B_c: keys per tile, one per lane
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kRowsPerWarp = kTileRows / kWarps;                                 // 4
constexpr int kFeaturesPerLane = static_cast<int>(kFlashMaxHeadDim) / kWarpSize;  // 4
static_assert(kTileKeys == kWarpSize, "lane c owns key c of a tile");

template <class T>
__global__ void forward_kernel(const T* q, const T* k, const T* v, T* out, float* logsumexp, std::int64_t seq,
                               std::int64_t query_tiles, int dim, int k_pitch, float scale) {
  extern __shared__ float shared[];
  float* qs = shared;                        // [kTileRows][dim]
  float* ks = qs + kTileRows * dim;          // [kTileKeys][k_pitch], k_pitch odd: lanes hit distinct banks
  float* vs = ks + kTileKeys * k_pitch;      // [kTileKeys][dim]
  float* ps = vs + kTileKeys * dim;          // [kTileRows][kTileKeys]: this tile's P~ (Algorithm 1, line 10)
  const std::int64_t head = blockIdx.x / query_tiles;
  const std::int64_t q0 = (blockIdx.x % query_tiles) * kTileRows;
  const std::int64_t head_row0 = head * seq;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kWarpSize, warp = tid / kWarpSize;

  // Algorithm 1, line 8: load Q_i (rows past seq as zeros: computed on, never written).
  for (int e = tid; e < kTileRows * dim; e += kThreads) {
    const int r = e / dim, d = e % dim;
    qs[e] = q0 + r < seq ? to_float(q[(head_row0 + q0 + r) * dim + d]) : 0.0f;
  }
  // Line 2 and 4: m = -inf, l = 0, O = 0 for each of this warp's rows.
  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kFeaturesPerLane];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
#pragma unroll
    for (int t = 0; t < kFeaturesPerLane; ++t) acc[rr][t] = 0.0f;
  }
  const std::int64_t last_query = (q0 + kTileRows < seq ? q0 + kTileRows : seq) - 1;
  const std::int64_t key_tiles = last_query / kTileKeys + 1;  // causal: tiles past the diagonal are skipped
  for (std::int64_t kt = 0; kt < key_tiles; ++kt) {
    const std::int64_t k0 = kt * kTileKeys;
    __syncthreads();  // every warp is done with the previous K, V tiles (and Q is loaded)
    // Line 6: load K_j, V_j (keys past seq as zeros: always masked).
    for (int e = tid; e < kTileKeys * dim; e += kThreads) {
      const int c = e / dim, d = e % dim;
      const bool in = k0 + c < seq;
      ks[c * k_pitch + d] = in ? to_float(k[(head_row0 + k0 + c) * dim + d]) : 0.0f;
      vs[e] = in ? to_float(v[(head_row0 + k0 + c) * dim + d]) : 0.0f;
    }
    __syncthreads();
    // Register arrays stay in registers only if every index is a compile-time constant.
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp * kRowsPerWarp + rr;
      const std::int64_t query = q0 + r;
      // Line 9: S_ij = scale * q_i . k_j for the tile's key of this lane; masked keys (j > i,
      // or past seq) are -inf and are never multiplied, so a NaN there cannot leak in.
      const std::int64_t key = k0 + lane;
      float s = -INFINITY;
      if (key <= query && key < seq) {
        float dot = 0.0f;
        for (int d = 0; d < dim; ++d) dot += qs[r * dim + d] * ks[lane * k_pitch + d];
        s = dot * scale;
      }
      // Lines 10-11: the online softmax. nan_max keeps a NaN score, as the CPU reference's
      // maximum does, so the row becomes NaN.
      const float m_new = nan_max(m[rr], warp_reduce(s, NanMaxOp{}));
      const float p = expf(s - m_new);
      const float correction = expf(m[rr] - m_new);
      l[rr] = correction * l[rr] + warp_sum(p);
      ps[r * kTileKeys + lane] = p;
      __syncwarp();
      // Line 12: O = diag(correction) O + P~ V over the keys this row may see (j <= i).
      const std::int64_t visible = query - k0 + 1 < kTileKeys ? query - k0 + 1 : kTileKeys;
#pragma unroll
      for (int t = 0; t < kFeaturesPerLane; ++t) {
        const int d = lane + t * kWarpSize;
        if (d < dim) {
          float pv = 0.0f;
          for (int c = 0; c < visible; ++c) pv += ps[r * kTileKeys + c] * vs[c * dim + d];
          acc[rr][t] = correction * acc[rr][t] + pv;
        }
      }
      m[rr] = m_new;
      __syncwarp();  // this row's ps is read before a later tile rewrites it
    }
  }
  // Lines 15-16: O_i = O / l, L_i = m + log(l).
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const std::int64_t query = q0 + warp * kRowsPerWarp + rr;
    if (query >= seq) continue;  // warp-uniform
#pragma unroll
    for (int t = 0; t < kFeaturesPerLane; ++t) {
      const int d = lane + t * kWarpSize;
      if (d < dim) out[(head_row0 + query) * dim + d] = from_float<T>(acc[rr][t] / l[rr]);
    }
    if (lane == 0) logsumexp[head_row0 + query] = m[rr] + logf(l[rr]);
  }
}

std::string shape_text(std::int64_t batch_heads, std::int64_t seq, std::int64_t head_dim) {
  return "q [" + std::to_string(batch_heads) + ", " + std::to_string(seq) + ", " + std::to_string(head_dim) + "]";
}

}  // namespace

template <class T>
void flash_attention_forward(const T* q, const T* k, const T* v, T* out, float* logsumexp, std::int64_t batch_heads,
                             std::int64_t seq, std::int64_t head_dim, cudaStream_t stream) {
  constexpr std::string_view op = "flash_attention_forward";
  const std::string shape = shape_text(batch_heads, seq, head_dim);
  require(batch_heads >= 0 && seq >= 0, op, "negative shape " + shape);
  require(head_dim > 0 && head_dim <= kFlashMaxHeadDim, op,
          shape + ": head_dim must lie in [1, " + std::to_string(kFlashMaxHeadDim) + "]");
  if (batch_heads == 0 || seq == 0) return;
  for (const auto& [ptr, name] : {std::pair<const void*, const char*>{q, "q"}, {k, "k"}, {v, "v"}, {out, "out"},
                                  {logsumexp, "logsumexp"}})
    require_pointer(ptr, op, name);
  const std::int64_t query_tiles = (seq + kTileRows - 1) / kTileRows;
  require_grid_fits(batch_heads * query_tiles, op, shape);
  const int dim = static_cast<int>(head_dim);
  const int k_pitch = dim | 1;  // odd row pitch: lane c reads bank (c * pitch + d) % 32, all distinct
  const auto bytes =
      static_cast<std::size_t>(kTileRows * dim + kTileKeys * k_pitch + kTileKeys * dim + kTileRows * kTileKeys) *
      sizeof(float);
  reserve_dynamic_shared_memory(forward_kernel<T>, bytes, op, shape);
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  forward_kernel<T><<<static_cast<unsigned>(batch_heads * query_tiles), kThreads, bytes, stream>>>(
      q, k, v, out, logsumexp, seq, query_tiles, dim, k_pitch, scale);
  MESHWORK_CUDA_CHECK(cudaGetLastError());
}

template void flash_attention_forward<float>(const float*, const float*, const float*, float*, float*, std::int64_t,
                                             std::int64_t, std::int64_t, cudaStream_t);
template void flash_attention_forward<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*,
                                                     const __nv_bfloat16*, __nv_bfloat16*, float*, std::int64_t,
                                                     std::int64_t, std::int64_t, cudaStream_t);

}  // namespace meshwork::kernels::cuda
