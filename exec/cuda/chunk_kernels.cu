#include "exec/cuda/chunk_kernels.hpp"

#include <cmath>

#include "kernels/cuda/cuda_check.hpp"

namespace meshwork::exec::cuda {

namespace {

constexpr int kThreads = 256;  // as gpt_kernels.cu

unsigned blocks_for(std::int64_t count) {
  const std::int64_t b = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}
void check_launch() { MESHWORK_CUDA_CHECK(cudaGetLastError()); }
__device__ __forceinline__ std::int64_t thread_index() { return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ std::int64_t thread_stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

__global__ void widen_kernel(const bf16* in, float* out, std::int64_t n) {
  for (std::int64_t i = thread_index(); i < n; i += thread_stride()) out[i] = __bfloat162float(in[i]);
}
__global__ void widen_into_kernel(const bf16* in, float* out, std::int64_t n, bool accumulate) {
  for (std::int64_t i = thread_index(); i < n; i += thread_stride()) out[i] = __bfloat162float(in[i]) + (accumulate ? out[i] : 0.0F);
}
__global__ void fill_kernel(float* x, float v, std::int64_t n) {
  for (std::int64_t i = thread_index(); i < n; i += thread_stride()) x[i] = v;
}

__global__ void vp_embedding_forward_kernel(const std::int64_t* ids, const bf16* word, std::int64_t begin, std::int64_t local, const bf16* position,
                                            const std::int64_t* positions, std::int64_t npos, bf16* x, std::int64_t tokens, std::int64_t hidden) {
  for (std::int64_t i = thread_index(); i < tokens * hidden; i += thread_stride()) {
    const std::int64_t t = i / hidden, c = i % hidden, row = ids[t] - begin;
    float v = row >= 0 && row < local ? __bfloat162float(word[row * hidden + c]) : 0.0F;
    if (position != nullptr) v += __bfloat162float(position[positions[t % npos] * hidden + c]);
    x[i] = __float2bfloat16(v);
  }
}
__global__ void vp_embedding_backward_word_kernel(const std::int64_t* ids, const bf16* dx, float* dword, std::int64_t begin, std::int64_t local,
                                                  std::int64_t tokens, std::int64_t hidden) {
  for (std::int64_t i = thread_index(); i < tokens * hidden; i += thread_stride()) {
    const std::int64_t t = i / hidden, row = ids[t] - begin;
    if (row >= 0 && row < local) atomicAdd(dword + row * hidden + i % hidden, __bfloat162float(dx[i]));
  }
}
__global__ void position_backward_kernel(const bf16* dx, float* dpos, const std::int64_t* positions, std::int64_t npos, std::int64_t samples,
                                         std::int64_t hidden) {
  for (std::int64_t i = thread_index(); i < npos * hidden; i += thread_stride()) {
    const std::int64_t p = i / hidden, c = i % hidden;
    float s = 0;
    for (std::int64_t b = 0; b < samples; ++b) s += __bfloat162float(dx[(b * npos + p) * hidden + c]);
    dpos[positions[p] * hidden + c] += s;
  }
}
// gpt_kernels.cu's rope_kernel with the row's position read from `positions`.
__global__ void rope_at_kernel(bf16* x, const double2* table, const std::int64_t* positions, std::int64_t npos, std::int32_t heads, std::int32_t half,
                               double sign) {
  const std::int64_t r = blockIdx.x;
  const double2* angle = table + positions[r % npos] * half;
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

// A block's reduction in a fixed tree order; every thread gets the result.
template <class Op>
__device__ float block_reduce(float v, Op op, float* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] = op(shared[threadIdx.x], shared[threadIdx.x + s]);
    __syncthreads();
  }
  const float r = shared[0];
  __syncthreads();
  return r;
}

// One block per row.
__global__ void vp_local_max_kernel(const bf16* logits, float* max, std::int64_t cols) {
  __shared__ float shared[kThreads];
  const bf16* row = logits + static_cast<std::int64_t>(blockIdx.x) * cols;
  float m = -INFINITY;
  bool nan = false;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = __bfloat162float(row[c]);
    nan = nan || isnan(v);
    m = fmaxf(m, v);
  }
  const float any_nan = block_reduce(nan ? 1.0F : 0.0F, [](float a, float b) { return fmaxf(a, b); }, shared);
  const float r = block_reduce(m, [](float a, float b) { return fmaxf(a, b); }, shared);
  if (threadIdx.x == 0) max[blockIdx.x] = any_nan > 0 ? NAN : r;
}
__global__ void vp_partial_sums_kernel(const bf16* logits, const float* max, const std::int64_t* targets, std::int64_t begin, float* sum_exp,
                                       float* target_minus_max, std::int64_t cols) {
  __shared__ float shared[kThreads];
  const std::int64_t r = blockIdx.x;
  const bf16* row = logits + r * cols;
  const float m = max[r];
  float s = 0;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += expf(__bfloat162float(row[c]) - m);
  const float total = block_reduce(s, [](float a, float b) { return a + b; }, shared);
  if (threadIdx.x == 0) {
    sum_exp[r] = total;
    const std::int64_t c = targets[r] - begin;
    target_minus_max[r] = c >= 0 && c < cols ? __bfloat162float(row[c]) - m : 0.0F;
  }
}
__global__ void vp_loss_and_grad_kernel(const bf16* logits, const float* max, const float* sum_exp, const float* target_minus_max, const std::int64_t* targets,
                                        std::int64_t begin, float* loss, bf16* dlogits, std::int64_t cols, float scale) {
  const std::int64_t r = blockIdx.x;
  const float m = max[r], z = sum_exp[r];
  const std::int64_t target = targets[r] - begin;
  if (threadIdx.x == 0) loss[r] = logf(z) - target_minus_max[r];
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float p = expf(__bfloat162float(logits[r * cols + c]) - m) / z;
    dlogits[r * cols + c] = __float2bfloat16(scale * (p - (c == target ? 1.0F : 0.0F)));
  }
}

// One block per row.
__global__ void position_masked_softmax_kernel(bf16* scores, const std::int64_t* qpos, std::int64_t nq, const std::int64_t* kpos, std::int64_t nk) {
  __shared__ float shared[kThreads];
  const std::int64_t r = blockIdx.x;
  bf16* row = scores + r * nk;
  const std::int64_t q = qpos[r % nq];
  float m = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < nk; j += blockDim.x) {
    if (kpos[j] <= q) m = fmaxf(m, __bfloat162float(row[j]));
  }
  m = block_reduce(m, [](float a, float b) { return fmaxf(a, b); }, shared);
  float sum = 0;
  for (std::int64_t j = threadIdx.x; j < nk; j += blockDim.x) {
    if (kpos[j] <= q) sum += expf(__bfloat162float(row[j]) - m);
  }
  sum = block_reduce(sum, [](float a, float b) { return a + b; }, shared);
  for (std::int64_t j = threadIdx.x; j < nk; j += blockDim.x) {
    row[j] = __float2bfloat16(kpos[j] <= q ? expf(__bfloat162float(row[j]) - m) / sum : 0.0F);
  }
}
__global__ void softmax_backward_rows_kernel(const bf16* probs, bf16* d, std::int64_t nk, float scale) {
  __shared__ float shared[kThreads];
  const std::int64_t r = blockIdx.x;
  const bf16* p = probs + r * nk;
  bf16* row = d + r * nk;
  float dot = 0;
  for (std::int64_t j = threadIdx.x; j < nk; j += blockDim.x) dot += __bfloat162float(p[j]) * __bfloat162float(row[j]);
  dot = block_reduce(dot, [](float a, float b) { return a + b; }, shared);
  for (std::int64_t j = threadIdx.x; j < nk; j += blockDim.x) {
    const float pj = __bfloat162float(p[j]);
    row[j] = __float2bfloat16(scale * pj * (__bfloat162float(row[j]) - dot));
  }
}

__global__ void gather_rows_scaled_kernel(const bf16* src, const std::int64_t* index, const float* scale, bf16* dst, std::int64_t n, std::int64_t cols) {
  for (std::int64_t i = thread_index(); i < n * cols; i += thread_stride()) {
    const std::int64_t r = i / cols;
    const float v = __bfloat162float(src[index[r] * cols + i % cols]);
    dst[i] = __float2bfloat16(scale == nullptr ? v : scale[r] * v);
  }
}
__global__ void scatter_rows_kernel(const bf16* src, const std::int64_t* index, bf16* dst, std::int64_t n, std::int64_t cols) {
  for (std::int64_t i = thread_index(); i < n * cols; i += thread_stride()) dst[index[i / cols] * cols + i % cols] = src[i];
}
__global__ void moe_combine_kernel(const bf16* res, const bf16* pairs, const float* gate, std::int64_t k, std::int64_t tokens, std::int64_t cols, bf16* y) {
  for (std::int64_t i = thread_index(); i < tokens * cols; i += thread_stride()) {
    const std::int64_t t = i / cols, c = i % cols;
    float s = 0;
    for (std::int64_t j = 0; j < k; ++j) s += gate[t * k + j] * __bfloat162float(pairs[(t * k + j) * cols + c]);
    y[i] = __float2bfloat16(__bfloat162float(res[i]) + s);
  }
}
// One block per pair.
__global__ void pair_dots_kernel(const bf16* dy, const bf16* pairs, std::int64_t k, std::int64_t cols, float* dots) {
  __shared__ float shared[kThreads];
  const std::int64_t q = blockIdx.x;
  float s = 0;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += __bfloat162float(dy[(q / k) * cols + c]) * __bfloat162float(pairs[q * cols + c]);
  s = block_reduce(s, [](float a, float b) { return a + b; }, shared);
  if (threadIdx.x == 0) dots[q] = s;
}
__global__ void sum_pair_rows_kernel(const bf16* rows, const std::int64_t* index, std::int64_t k, std::int64_t tokens, std::int64_t cols, bf16* y) {
  for (std::int64_t i = thread_index(); i < tokens * cols; i += thread_stride()) {
    const std::int64_t t = i / cols, c = i % cols;
    float s = 0;
    for (std::int64_t j = 0; j < k; ++j) s += __bfloat162float(rows[index[t * k + j] * cols + c]);
    y[i] = __float2bfloat16(s);
  }
}

}  // namespace

void gather_rows_scaled(const bf16* src, const std::int64_t* index, const float* scale, bf16* dst, std::int64_t n, std::int64_t cols, cudaStream_t stream) {
  if (n * cols <= 0) return;
  gather_rows_scaled_kernel<<<blocks_for(n * cols), kThreads, 0, stream>>>(src, index, scale, dst, n, cols);
  check_launch();
}
void scatter_rows(const bf16* src, const std::int64_t* index, bf16* dst, std::int64_t n, std::int64_t cols, cudaStream_t stream) {
  if (n * cols <= 0) return;
  scatter_rows_kernel<<<blocks_for(n * cols), kThreads, 0, stream>>>(src, index, dst, n, cols);
  check_launch();
}
void moe_combine(const bf16* res, const bf16* pairs, const float* gate, std::int64_t k, std::int64_t tokens, std::int64_t cols, bf16* y, cudaStream_t stream) {
  if (tokens * cols <= 0) return;
  moe_combine_kernel<<<blocks_for(tokens * cols), kThreads, 0, stream>>>(res, pairs, gate, k, tokens, cols, y);
  check_launch();
}
void pair_dots(const bf16* dy, const bf16* pairs, std::int64_t k, std::int64_t n_pairs, std::int64_t cols, float* dots, cudaStream_t stream) {
  if (n_pairs <= 0) return;
  pair_dots_kernel<<<static_cast<unsigned>(n_pairs), kThreads, 0, stream>>>(dy, pairs, k, cols, dots);
  check_launch();
}
void sum_pair_rows(const bf16* rows, const std::int64_t* index, std::int64_t k, std::int64_t tokens, std::int64_t cols, bf16* y, cudaStream_t stream) {
  if (tokens * cols <= 0) return;
  sum_pair_rows_kernel<<<blocks_for(tokens * cols), kThreads, 0, stream>>>(rows, index, k, tokens, cols, y);
  check_launch();
}

void position_masked_softmax_forward(bf16* scores, const std::int64_t* q_positions, std::int64_t nq, const std::int64_t* k_positions, std::int64_t nk,
                                     std::int64_t rows, cudaStream_t stream) {
  if (rows <= 0 || nk <= 0) return;
  position_masked_softmax_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(scores, q_positions, nq, k_positions, nk);
  check_launch();
}
void softmax_backward_rows(const bf16* probs, bf16* dprobs, std::int64_t nk, std::int64_t rows, float scale, cudaStream_t stream) {
  if (rows <= 0 || nk <= 0) return;
  softmax_backward_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(probs, dprobs, nk, scale);
  check_launch();
}

void widen(const bf16* in, float* out, std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  widen_kernel<<<blocks_for(count), kThreads, 0, stream>>>(in, out, count);
  check_launch();
}
void widen_into(const bf16* in, float* out, std::int64_t count, bool accumulate, cudaStream_t stream) {
  if (count == 0) return;
  widen_into_kernel<<<blocks_for(count), kThreads, 0, stream>>>(in, out, count, accumulate);
  check_launch();
}
void fill(float* x, float value, std::int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  fill_kernel<<<blocks_for(count), kThreads, 0, stream>>>(x, value, count);
  check_launch();
}
void vp_embedding_forward(const std::int64_t* ids, const bf16* word, std::int64_t vocab_begin, std::int64_t vocab_local, const bf16* position,
                          const std::int64_t* positions, std::int64_t npos, bf16* x, std::int64_t tokens, std::int64_t hidden, cudaStream_t stream) {
  if (tokens * hidden <= 0) return;
  vp_embedding_forward_kernel<<<blocks_for(tokens * hidden), kThreads, 0, stream>>>(ids, word, vocab_begin, vocab_local, position, positions, npos, x, tokens,
                                                                                    hidden);
  check_launch();
}
void vp_embedding_backward_word(const std::int64_t* ids, const bf16* dx, float* dword, std::int64_t vocab_begin, std::int64_t vocab_local, std::int64_t tokens,
                                std::int64_t hidden, cudaStream_t stream) {
  if (tokens * hidden <= 0) return;
  vp_embedding_backward_word_kernel<<<blocks_for(tokens * hidden), kThreads, 0, stream>>>(ids, dx, dword, vocab_begin, vocab_local, tokens, hidden);
  check_launch();
}
void position_backward(const bf16* dx, float* dposition, const std::int64_t* positions, std::int64_t npos, std::int64_t tokens, std::int64_t hidden,
                       cudaStream_t stream) {
  if (npos * hidden <= 0) return;
  position_backward_kernel<<<blocks_for(npos * hidden), kThreads, 0, stream>>>(dx, dposition, positions, npos, tokens / npos, hidden);
  check_launch();
}
void rope_at(bf16* x, const double2* table, const std::int64_t* positions, std::int64_t npos, std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
             bool inverse, cudaStream_t stream) {
  if (rows <= 0 || heads * head_dim <= 0) return;
  rope_at_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, table, positions, npos, static_cast<std::int32_t>(heads),
                                                                       static_cast<std::int32_t>(head_dim / 2), inverse ? -1.0 : 1.0);
  check_launch();
}
void vp_local_max(const bf16* logits, float* max, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  if (rows <= 0) return;
  vp_local_max_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, max, cols);
  check_launch();
}
void vp_partial_sums(const bf16* logits, const float* max, const std::int64_t* targets, std::int64_t vocab_begin, float* sum_exp, float* target_minus_max,
                     std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  if (rows <= 0) return;
  vp_partial_sums_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, max, targets, vocab_begin, sum_exp, target_minus_max, cols);
  check_launch();
}
void vp_loss_and_grad(const bf16* logits, const float* max, const float* sum_exp, const float* target_minus_max, const std::int64_t* targets,
                      std::int64_t vocab_begin, float* loss, bf16* dlogits, std::int64_t rows, std::int64_t cols, float scale, cudaStream_t stream) {
  if (rows <= 0) return;
  vp_loss_and_grad_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, max, sum_exp, target_minus_max, targets, vocab_begin, loss, dlogits,
                                                                                cols, scale);
  check_launch();
}

}  // namespace meshwork::exec::cuda
