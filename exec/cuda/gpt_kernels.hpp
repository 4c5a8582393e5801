#pragma once
// The small kernels CudaGpt needs around the GEMMs and kernels/cuda's operators: type
// conversion, residual and bias adds, bias gradients, the embeddings and the moves between the
// token-major layout of the projections ([tokens, heads * head_dim]) and the head-major one
// of the attention kernels ([samples * heads, seq, head_dim]). Element maths in fp32, one
// rounding to bf16 on store; every sum in a fixed order except the word embedding's gradient
// (atomicAdd over tokens, as scattered rows need).

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace meshwork::exec::cuda {

using bf16 = __nv_bfloat16;

void convert(const float* in, bf16* out, std::int64_t count, cudaStream_t stream);
// out = a + b (out may alias either).
void add(const bf16* a, const bf16* b, bf16* out, std::int64_t count, cudaStream_t stream);
// dst += src.
void accumulate(const float* src, float* dst, std::int64_t count, cudaStream_t stream);
// x *= factor (the data-parallel mean after an all-reduce's sum).
void scale(float* x, float factor, std::int64_t count, cudaStream_t stream);
// *out = sum of x[i]^2 in double, in a fixed order (partials per block of a fixed grid, then
// one block over them): the same bits on every run. `out` is device memory.
void sum_squares(const float* x, std::int64_t count, double* out, cudaStream_t stream);
// x[r, c] += bias[c], x: [rows, cols].
void add_bias(bf16* x, const bf16* bias, std::int64_t rows, std::int64_t cols, cudaStream_t stream);
// sums[c] += sum over r of d[r, c], rows in order.
void accumulate_column_sums(const bf16* d, float* sums, std::int64_t rows, std::int64_t cols, cudaStream_t stream);

// x[t] = word[ids[t]] + position[t % seq]: ids [samples * seq], word [vocab, hidden],
// position [>= seq, hidden] or null (RoPE: no table), x [samples * seq, hidden]. An id
// outside [0, vocab) gives NaN (checked on the host before the upload).
void embedding_forward(const std::int64_t* ids, const bf16* word, const bf16* position, bf16* x, std::int64_t tokens, std::int64_t seq,
                       std::int64_t hidden, cudaStream_t stream);
// dword[ids[t]] += dx[t] (atomicAdd: the order of tokens hitting one id is not fixed).
void embedding_backward_word(const std::int64_t* ids, const bf16* dx, float* dword, std::int64_t tokens, std::int64_t hidden, cudaStream_t stream);
// RoPE's angles for positions [0, seq): table [seq * head_dim / 2] of (cos, sin), in double as
// kernels/rope.hpp computes them (Su et al. 2021).
void gpt_rope_table(double2* table, std::int64_t seq, std::int64_t head_dim, cudaStream_t stream);
// RoPE in place on x [rows, heads * head_dim], row r at position r mod seq, with gpt_rope_table's
// angles: kernels/rope.hpp's rotation, by the opposite angle when `inverse` (the gradient's map).
void gpt_rope(bf16* x, const double2* table, std::int64_t rows, std::int64_t heads, std::int64_t head_dim, std::int64_t seq, bool inverse,
              cudaStream_t stream);
// dposition[p] += sum over samples s of dx[s * seq + p], samples in order.
void embedding_backward_position(const bf16* dx, float* dposition, std::int64_t samples, std::int64_t seq, std::int64_t hidden, cudaStream_t stream);

// in [samples * seq, groups * head_dim] -> out [samples * heads, seq, head_dim]; with GQA
// (groups < heads) head h reads group h / (heads / groups) (Ainslie et al. 2023).
void rows_to_heads(const bf16* in, bf16* out, std::int64_t samples, std::int64_t seq, std::int64_t heads, std::int64_t groups, std::int64_t head_dim,
                   cudaStream_t stream);
// The adjoint: out [samples * seq, groups * head_dim] = for each group the sum of its heads'
// rows of in [samples * heads, seq, head_dim], heads in ascending order.
void heads_to_rows(const bf16* in, bf16* out, std::int64_t samples, std::int64_t seq, std::int64_t heads, std::int64_t groups, std::int64_t head_dim,
                   cudaStream_t stream);

}  // namespace meshwork::exec::cuda
