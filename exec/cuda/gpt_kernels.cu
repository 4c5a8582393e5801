#include "exec/cuda/gpt_kernels.hpp"

#include <cstdint>

#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/reduce.cuh"
#include "kernels/rope_base.hpp"

namespace meshwork::exec::cuda {

namespace {

// A multiple of the warp size, within the 128-256 that the CUDA C++ Best Practices Guide
// ("Thread and Block Heuristics") suggests starting from; these kernels are memory-bound.
constexpr int kThreads = 256;

// Grid-stride loops: at most this many blocks, each thread covering several elements.
unsigned blocks_for(std::int64_t count) {
  const std::int64_t b = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

void check_launch() { MESHWORK_CUDA_CHECK(cudaGetLastError()); }

__device__ __forceinline__ std::int64_t thread_index() { return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ std::int64_t thread_stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

__global__ void convert_kernel(const float* in, bf16* out, std::int64_t n) {
  for (std::int64_t i = thread_index(); i < n; i += thread_stride()) out[i] = __float2bfloat16(in[i]);
}

__global__ void add_kernel(const bf16* a, const bf16* b, bf16* out, std::int64_t n) {
  for (std::int64_t i = thread_index(); i < n; i += thread_stride()) out[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
}

// a + b on 16-byte vectors (8 bf16), per element as add_kernel: the residual adds ran at 1.7
// TB/s two bytes per thread (first GPU check, 2026-12-04).
__global__ void add_vec_kernel(const uint4* a, const uint4* b, uint4* out, std::int64_t vectors) {
  for (std::int64_t i = thread_index(); i < vectors; i += thread_stride()) {
    const uint4 x = a[i], y = b[i];
    const auto* hx = reinterpret_cast<const __nv_bfloat162*>(&x);
    const auto* hy = reinterpret_cast<const __nv_bfloat162*>(&y);
    uint4 z;
    auto* hz = reinterpret_cast<__nv_bfloat162*>(&z);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 fx = __bfloat1622float2(hx[e]), fy = __bfloat1622float2(hy[e]);
      hz[e] = __floats2bfloat162_rn(fx.x + fy.x, fx.y + fy.y);
    }
    out[i] = z;
  }
}

__global__ void accumulate_kernel(const float* src, float* dst, std::int64_t n) {
  for (std::int64_t i = thread_index(); i < n; i += thread_stride()) dst[i] += src[i];
}

__global__ void scale_kernel(float* x, float factor, std::int64_t n) {
  for (std::int64_t i = thread_index(); i < n; i += thread_stride()) x[i] *= factor;
}

// A fixed grid, whatever the device: its partials are what make the sum's order.
constexpr unsigned kSumSquaresBlocks = 256;

__global__ void sum_squares_partials_kernel(const float* x, std::int64_t n, double* partials) {
  double v = 0;
  for (std::int64_t i = thread_index(); i < n; i += thread_stride()) v += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  v = kernels::cuda::block_reduce(v, kernels::cuda::SumOp{}, 0.0);
  if (threadIdx.x == 0) partials[blockIdx.x] = v;
}

__global__ void sum_partials_kernel(const double* partials, unsigned count, double* out) {
  double v = threadIdx.x < count ? partials[threadIdx.x] : 0.0;
  v = kernels::cuda::block_reduce(v, kernels::cuda::SumOp{}, 0.0);
  if (threadIdx.x == 0) *out = v;
}

__global__ void add_bias_kernel(bf16* x, const bf16* bias, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t i = thread_index(); i < rows * cols; i += thread_stride()) x[i] = __float2bfloat16(__bfloat162float(x[i]) + __bfloat162float(bias[i % cols]));
}

// One thread per column, rows in order: adjacent threads read adjacent columns (coalesced).
__global__ void column_sums_kernel(const bf16* d, float* sums, std::int64_t rows, std::int64_t cols) {
  const std::int64_t c = thread_index();
  if (c >= cols) return;
  float s = 0;
  for (std::int64_t r = 0; r < rows; ++r) s += __bfloat162float(d[r * cols + c]);
  sums[c] += s;
}

__global__ void embedding_forward_kernel(const std::int64_t* ids, const bf16* word, const bf16* position, bf16* x, std::int64_t tokens, std::int64_t seq,
                                         std::int64_t hidden) {
  for (std::int64_t i = thread_index(); i < tokens * hidden; i += thread_stride()) {
    const std::int64_t t = i / hidden, c = i % hidden;
    const float pos = position != nullptr ? __bfloat162float(position[(t % seq) * hidden + c]) : 0.0F;
    x[i] = __float2bfloat16(__bfloat162float(word[ids[t] * hidden + c]) + pos);
  }
}

__global__ void embedding_backward_word_kernel(const std::int64_t* ids, const bf16* dx, float* dword, std::int64_t tokens, std::int64_t hidden) {
  for (std::int64_t i = thread_index(); i < tokens * hidden; i += thread_stride()) {
    const std::int64_t t = i / hidden, c = i % hidden;
    atomicAdd(&dword[ids[t] * hidden + c], __bfloat162float(dx[i]));
  }
}

__global__ void embedding_backward_position_kernel(const bf16* dx, float* dposition, std::int64_t samples, std::int64_t seq, std::int64_t hidden) {
  for (std::int64_t i = thread_index(); i < seq * hidden; i += thread_stride()) {
    float s = 0;
    for (std::int64_t b = 0; b < samples; ++b) s += __bfloat162float(dx[b * seq * hidden + i]);
    dposition[i] += s;
  }
}

// One thread per rotated pair (row, head, i < head_dim / 2): the pair (i, i + head_dim / 2) of
// the head at row r turns by sign * (r mod seq) * base^(-2i / head_dim), as kernels/rope.cpp.
// The angle in double: at position 8K a float angle is off by ~5e-4 rad.
// The angles of kernels/rope.hpp in double, as the rotation used to compute them per element:
// table[p * half + i] = (cos, sin) of p * base^(-2i / head_dim). Once per model, so that the
// rotation itself is a table read: computing pow and sincos in double per element made RoPE
// run at a twentieth of the H200's memory bandwidth (first GPU check, 2026-12-04).
__global__ void rope_table_kernel(double2* table, std::int64_t seq, std::int64_t head_dim, double base) {
  const std::int64_t half = head_dim / 2;
  for (std::int64_t j = thread_index(); j < seq * half; j += thread_stride()) {
    const std::int64_t p = j / half, i = j % half;
    const double a = static_cast<double>(p) * pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    double sn = 0, cs = 0;
    sincos(a, &sn, &cs);
    table[j] = make_double2(cs, sn);
  }
}

// One block per row; the inverse rotation turns by the opposite angle (sin negated).
__global__ void rope_kernel(bf16* x, const double2* table, std::int32_t heads, std::int32_t half, std::int64_t seq, double sign) {
  const std::int64_t r = blockIdx.x;
  const double2* angle = table + (r % seq) * half;
  bf16* row = x + r * heads * 2 * half;
  for (std::int32_t t = static_cast<std::int32_t>(threadIdx.x); t < heads * half; t += static_cast<std::int32_t>(blockDim.x)) {
    const std::int32_t h = t / half, i = t - h * half;
    const double cs = angle[i].x, sn = sign * angle[i].y;
    bf16* lo = row + h * 2 * half + i;
    bf16* hi = lo + half;
    const double l = __bfloat162float(*lo), u = __bfloat162float(*hi);
    *lo = __float2bfloat16(static_cast<float>(l * cs - u * sn));
    *hi = __float2bfloat16(static_cast<float>(u * cs + l * sn));
  }
}

// The layout changes with head_dim a multiple of 8 and 16-byte aligned tensors: one block per
// token row, one thread per 16-byte vector of it (8 bf16), no 64-bit divisions per element.
// The element-wise kernels below them take every other shape; both give the same bits.
constexpr std::int64_t kVec = 8;

__global__ void rows_to_heads_vec_kernel(const uint4* in, uint4* out, std::int64_t seq, std::int32_t heads, std::int32_t groups,
                                         std::int32_t vecs_per_head) {
  const std::int64_t t = blockIdx.x, s = t / seq, l = t % seq;
  const std::int32_t per_group = heads / groups;
  for (std::int32_t j = static_cast<std::int32_t>(threadIdx.x); j < heads * vecs_per_head; j += static_cast<std::int32_t>(blockDim.x)) {
    const std::int32_t h = j / vecs_per_head, d = j - h * vecs_per_head, g = h / per_group;
    out[((s * heads + h) * seq + l) * vecs_per_head + d] = in[t * groups * vecs_per_head + g * vecs_per_head + d];
  }
}

__global__ void heads_to_rows_vec_kernel(const uint4* in, uint4* out, std::int64_t seq, std::int32_t heads, std::int32_t groups,
                                         std::int32_t vecs_per_head) {
  const std::int64_t t = blockIdx.x, s = t / seq, l = t % seq;
  const std::int32_t per_group = heads / groups;
  for (std::int32_t j = static_cast<std::int32_t>(threadIdx.x); j < groups * vecs_per_head; j += static_cast<std::int32_t>(blockDim.x)) {
    const std::int32_t g = j / vecs_per_head, d = j - g * vecs_per_head;
    float sum[kVec] = {};
    for (std::int32_t h = g * per_group; h < (g + 1) * per_group; ++h) {
      const uint4 raw = in[((s * heads + h) * seq + l) * vecs_per_head + d];
      const auto* v = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int e = 0; e < kVec / 2; ++e) {
        const float2 f = __bfloat1622float2(v[e]);
        sum[2 * e] += f.x;
        sum[2 * e + 1] += f.y;
      }
    }
    uint4 packed;
    auto* o = reinterpret_cast<__nv_bfloat162*>(&packed);
#pragma unroll
    for (int e = 0; e < kVec / 2; ++e) o[e] = __floats2bfloat162_rn(sum[2 * e], sum[2 * e + 1]);
    out[t * groups * vecs_per_head + g * vecs_per_head + d] = packed;
  }
}

bool vector_layout(const void* in, const void* out, std::int64_t heads, std::int64_t head_dim, std::int64_t rows) {
  return head_dim % kVec == 0 && reinterpret_cast<std::uintptr_t>(in) % 16 == 0 && reinterpret_cast<std::uintptr_t>(out) % 16 == 0 &&
         heads * (head_dim / kVec) <= 0x7fffffff && rows <= 0x7fffffff;
}

// One thread per element of the head-major tensor.
__global__ void rows_to_heads_kernel(const bf16* in, bf16* out, std::int64_t samples, std::int64_t seq, std::int64_t heads, std::int64_t groups,
                                     std::int64_t head_dim) {
  const std::int64_t n = samples * heads * seq * head_dim;
  for (std::int64_t i = thread_index(); i < n; i += thread_stride()) {
    const std::int64_t d = i % head_dim, l = (i / head_dim) % seq, sh = i / (head_dim * seq);
    const std::int64_t s = sh / heads, h = sh % heads, g = h / (heads / groups);
    out[i] = in[(s * seq + l) * groups * head_dim + g * head_dim + d];
  }
}

// One thread per element of the token-major tensor, summing its group's heads in order.
__global__ void heads_to_rows_kernel(const bf16* in, bf16* out, std::int64_t samples, std::int64_t seq, std::int64_t heads, std::int64_t groups,
                                     std::int64_t head_dim) {
  const std::int64_t n = samples * seq * groups * head_dim, per_group = heads / groups;
  for (std::int64_t i = thread_index(); i < n; i += thread_stride()) {
    const std::int64_t d = i % head_dim, g = (i / head_dim) % groups, t = i / (head_dim * groups);
    const std::int64_t s = t / seq, l = t % seq;
    float sum = 0;
    for (std::int64_t h = g * per_group; h < (g + 1) * per_group; ++h) sum += __bfloat162float(in[((s * heads + h) * seq + l) * head_dim + d]);
    out[i] = __float2bfloat16(sum);
  }
}

}  // namespace

void convert(const float* in, bf16* out, std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  convert_kernel<<<blocks_for(count), kThreads, 0, stream>>>(in, out, count);
  check_launch();
}

void add(const bf16* a, const bf16* b, bf16* out, std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  if (aligned(a) && aligned(b) && aligned(out)) {
    const std::int64_t vectors = count / 8, done = vectors * 8;
    if (vectors > 0) {
      add_vec_kernel<<<blocks_for(vectors), kThreads, 0, stream>>>(reinterpret_cast<const uint4*>(a), reinterpret_cast<const uint4*>(b),
                                                                   reinterpret_cast<uint4*>(out), vectors);
      check_launch();
    }
    if (done == count) return;
    add_kernel<<<blocks_for(count - done), kThreads, 0, stream>>>(a + done, b + done, out + done, count - done);
    check_launch();
    return;
  }
  add_kernel<<<blocks_for(count), kThreads, 0, stream>>>(a, b, out, count);
  check_launch();
}

void accumulate(const float* src, float* dst, std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  accumulate_kernel<<<blocks_for(count), kThreads, 0, stream>>>(src, dst, count);
  check_launch();
}

void scale(float* x, float factor, std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  scale_kernel<<<blocks_for(count), kThreads, 0, stream>>>(x, factor, count);
  check_launch();
}

void sum_squares(const float* x, std::int64_t count, double* out, cudaStream_t stream) {
  double* partials = nullptr;
  MESHWORK_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&partials), kSumSquaresBlocks * sizeof(double), stream));
  sum_squares_partials_kernel<<<kSumSquaresBlocks, kThreads, 0, stream>>>(x, count, partials);
  check_launch();
  static_assert(kSumSquaresBlocks % 32 == 0 && kSumSquaresBlocks <= 1024, "one block sums the partials");
  sum_partials_kernel<<<1, kSumSquaresBlocks, 0, stream>>>(partials, kSumSquaresBlocks, out);
  check_launch();
  MESHWORK_CUDA_CHECK(cudaFreeAsync(partials, stream));
}

void add_bias(bf16* x, const bf16* bias, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  if (rows * cols <= 0) return;
  add_bias_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(x, bias, rows, cols);
  check_launch();
}

void accumulate_column_sums(const bf16* d, float* sums, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  if (cols <= 0) return;
  column_sums_kernel<<<static_cast<unsigned>((cols + kThreads - 1) / kThreads), kThreads, 0, stream>>>(d, sums, rows, cols);
  check_launch();
}

void embedding_forward(const std::int64_t* ids, const bf16* word, const bf16* position, bf16* x, std::int64_t tokens, std::int64_t seq, std::int64_t hidden,
                       cudaStream_t stream) {
  if (tokens * hidden <= 0) return;
  embedding_forward_kernel<<<blocks_for(tokens * hidden), kThreads, 0, stream>>>(ids, word, position, x, tokens, seq, hidden);
  check_launch();
}

void embedding_backward_word(const std::int64_t* ids, const bf16* dx, float* dword, std::int64_t tokens, std::int64_t hidden, cudaStream_t stream) {
  if (tokens * hidden <= 0) return;
  embedding_backward_word_kernel<<<blocks_for(tokens * hidden), kThreads, 0, stream>>>(ids, dx, dword, tokens, hidden);
  check_launch();
}

void gpt_rope_table(double2* table, std::int64_t seq, std::int64_t head_dim, cudaStream_t stream) {
  if (head_dim % 2 != 0) throw std::invalid_argument("gpt_rope_table: head width " + std::to_string(head_dim) + " is odd (RoPE turns dimensions in pairs)");
  if (seq * (head_dim / 2) == 0) return;
  rope_table_kernel<<<blocks_for(seq * (head_dim / 2)), kThreads, 0, stream>>>(table, seq, head_dim, kernels::kRopeBase);
  check_launch();
}

void gpt_rope(bf16* x, const double2* table, std::int64_t rows, std::int64_t heads, std::int64_t head_dim, std::int64_t seq, bool inverse, cudaStream_t stream) {
  if (head_dim % 2 != 0) throw std::invalid_argument("gpt_rope: head width " + std::to_string(head_dim) + " is odd (RoPE turns dimensions in pairs)");
  if (rows * heads * (head_dim / 2) == 0) return;
  if (rows > 0x7fffffff || heads * head_dim > 0x7fffffff) throw std::invalid_argument("gpt_rope: " + std::to_string(rows) + " rows of " + std::to_string(heads) + " heads exceed a grid");
  rope_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, table, static_cast<std::int32_t>(heads), static_cast<std::int32_t>(head_dim / 2), seq,
                                                                  inverse ? -1.0 : 1.0);
  check_launch();
}

void embedding_backward_position(const bf16* dx, float* dposition, std::int64_t samples, std::int64_t seq, std::int64_t hidden, cudaStream_t stream) {
  if (seq * hidden <= 0) return;
  embedding_backward_position_kernel<<<blocks_for(seq * hidden), kThreads, 0, stream>>>(dx, dposition, samples, seq, hidden);
  check_launch();
}

void rows_to_heads(const bf16* in, bf16* out, std::int64_t samples, std::int64_t seq, std::int64_t heads, std::int64_t groups, std::int64_t head_dim,
                   cudaStream_t stream) {
  const std::int64_t n = samples * heads * seq * head_dim;
  if (n <= 0) return;
  if (vector_layout(in, out, heads, head_dim, samples * seq)) {
    rows_to_heads_vec_kernel<<<static_cast<unsigned>(samples * seq), kThreads, 0, stream>>>(
        reinterpret_cast<const uint4*>(in), reinterpret_cast<uint4*>(out), seq, static_cast<std::int32_t>(heads), static_cast<std::int32_t>(groups),
        static_cast<std::int32_t>(head_dim / kVec));
    check_launch();
    return;
  }
  rows_to_heads_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in, out, samples, seq, heads, groups, head_dim);
  check_launch();
}

void heads_to_rows(const bf16* in, bf16* out, std::int64_t samples, std::int64_t seq, std::int64_t heads, std::int64_t groups, std::int64_t head_dim,
                   cudaStream_t stream) {
  const std::int64_t n = samples * seq * groups * head_dim;
  if (n <= 0) return;
  if (vector_layout(in, out, heads, head_dim, samples * seq)) {
    heads_to_rows_vec_kernel<<<static_cast<unsigned>(samples * seq), kThreads, 0, stream>>>(
        reinterpret_cast<const uint4*>(in), reinterpret_cast<uint4*>(out), seq, static_cast<std::int32_t>(heads), static_cast<std::int32_t>(groups),
        static_cast<std::int32_t>(head_dim / kVec));
    check_launch();
    return;
  }
  heads_to_rows_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in, out, samples, seq, heads, groups, head_dim);
  check_launch();
}

}  // namespace meshwork::exec::cuda
