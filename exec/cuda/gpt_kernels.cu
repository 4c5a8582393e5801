#include "exec/cuda/gpt_kernels.hpp"

#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.hpp"
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

__global__ void accumulate_kernel(const float* src, float* dst, std::int64_t n) {
  for (std::int64_t i = thread_index(); i < n; i += thread_stride()) dst[i] += src[i];
}

__global__ void scale_kernel(float* x, float factor, std::int64_t n) {
  for (std::int64_t i = thread_index(); i < n; i += thread_stride()) x[i] *= factor;
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
__global__ void rope_kernel(bf16* x, std::int64_t rows, std::int64_t heads, std::int64_t head_dim, std::int64_t seq, double sign, double base) {
  const std::int64_t half = head_dim / 2;
  for (std::int64_t j = thread_index(); j < rows * heads * half; j += thread_stride()) {
    const std::int64_t r = j / (heads * half), h = (j / half) % heads, i = j % half;
    const double a = sign * static_cast<double>(r % seq) * pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    double sn = 0, cs = 0;
    sincos(a, &sn, &cs);
    bf16* lo = x + r * heads * head_dim + h * head_dim + i;
    bf16* hi = lo + half;
    const double l = __bfloat162float(*lo), u = __bfloat162float(*hi);
    *lo = __float2bfloat16(static_cast<float>(l * cs - u * sn));
    *hi = __float2bfloat16(static_cast<float>(u * cs + l * sn));
  }
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

void gpt_rope(bf16* x, std::int64_t rows, std::int64_t heads, std::int64_t head_dim, std::int64_t seq, bool inverse, cudaStream_t stream) {
  if (head_dim % 2 != 0) throw std::invalid_argument("gpt_rope: head width " + std::to_string(head_dim) + " is odd (RoPE turns dimensions in pairs)");
  if (rows * heads * (head_dim / 2) == 0) return;
  rope_kernel<<<blocks_for(rows * heads * (head_dim / 2)), kThreads, 0, stream>>>(x, rows, heads, head_dim, seq, inverse ? -1.0 : 1.0, kernels::kRopeBase);
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
  rows_to_heads_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in, out, samples, seq, heads, groups, head_dim);
  check_launch();
}

void heads_to_rows(const bf16* in, bf16* out, std::int64_t samples, std::int64_t seq, std::int64_t heads, std::int64_t groups, std::int64_t head_dim,
                   cudaStream_t stream) {
  const std::int64_t n = samples * seq * groups * head_dim;
  if (n <= 0) return;
  heads_to_rows_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in, out, samples, seq, heads, groups, head_dim);
  check_launch();
}

}  // namespace meshwork::exec::cuda
