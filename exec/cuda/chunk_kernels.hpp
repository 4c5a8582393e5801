#pragma once
// The kernels the CUDA backend's chunk (exec/cuda/cuda_chunk.hpp) needs beyond CudaGpt's
// (gpt_kernels.hpp): the vocabulary-parallel embedding and cross-entropy of tensor parallelism
// (Shoeybi et al. 2019 §3, as kernels/embedding.hpp and kernels/vocab_parallel_cross_entropy.hpp
// compute them on the CPU), positions given per row (a context-parallel member's share of the
// sequence), and the widening and filling the Group and the Trainer's buffers need. Element
// maths in fp32; sums over a row in a fixed order (a block's tree), so results do not depend
// on scheduling.

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace meshwork::exec::cuda {

using bf16 = __nv_bfloat16;

// out = float(in), exactly.
void widen(const bf16* in, float* out, std::int64_t count, cudaStream_t stream);
void fill(float* x, float value, std::int64_t count, cudaStream_t stream);
// out = float(in) + (accumulate ? out : 0).
void widen_into(const bf16* in, float* out, std::int64_t count, bool accumulate, cudaStream_t stream);

// x[t] = (word[ids[t] - vocab_begin] if that row is this rank's, else 0)
//        + (position ? position[positions[t % npos]] : 0).
// word: [vocab_local, hidden], position: [>= max position + 1, hidden] or null.
void vp_embedding_forward(const std::int64_t* ids, const bf16* word, std::int64_t vocab_begin, std::int64_t vocab_local, const bf16* position,
                          const std::int64_t* positions, std::int64_t npos, bf16* x, std::int64_t tokens, std::int64_t hidden, cudaStream_t stream);
// dword[ids[t] - vocab_begin] += dx[t] for this rank's rows (atomicAdd over tokens).
void vp_embedding_backward_word(const std::int64_t* ids, const bf16* dx, float* dword, std::int64_t vocab_begin, std::int64_t vocab_local, std::int64_t tokens,
                                std::int64_t hidden, cudaStream_t stream);
// dposition[positions[p]] += sum over samples s of dx[s * npos + p] (positions distinct; samples in order).
void position_backward(const bf16* dx, float* dposition, const std::int64_t* positions, std::int64_t npos, std::int64_t tokens, std::int64_t hidden,
                       cudaStream_t stream);
// RoPE in place on x [rows, heads * head_dim], row r at position positions[r % npos], with
// gpt_rope_table's angles (the table must cover every position): gpt_rope's rotation.
void rope_at(bf16* x, const double2* table, const std::int64_t* positions, std::int64_t npos, std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
             bool inverse, cudaStream_t stream);

// The three steps of the vocabulary-parallel cross-entropy (the caller all-reduces between them):
// max[r] = the largest of the row's logits (NaN if any is NaN);
void vp_local_max(const bf16* logits, float* max, std::int64_t rows, std::int64_t cols, cudaStream_t stream);
// sum_exp[r] = sum of exp(logit - max[r]); target_minus_max[r] = logit[target] - max[r] if the
// target is this rank's column, else 0;
void vp_partial_sums(const bf16* logits, const float* max, const std::int64_t* targets, std::int64_t vocab_begin, float* sum_exp, float* target_minus_max,
                     std::int64_t rows, std::int64_t cols, cudaStream_t stream);
// with the all-reduced sums: loss[r] = log(sum_exp[r]) - target_minus_max[r], and
// dlogits = scale * (exp(logit - max) / sum_exp - [column is the target]) (may alias logits).
void vp_loss_and_grad(const bf16* logits, const float* max, const float* sum_exp, const float* target_minus_max, const std::int64_t* targets,
                      std::int64_t vocab_begin, float* loss, bf16* dlogits, std::int64_t rows, std::int64_t cols, float scale, cudaStream_t stream);

// Attention by positions (context parallelism: a member's queries against every member's
// keys): scores [rows, nk], row r the query at q_positions[r % nq], column j the key at
// k_positions[j]; softmax over the keys at or before the query's position, the others 0.
// In place: the scores in, the probabilities out. Every query sees at least its own key.
void position_masked_softmax_forward(bf16* scores, const std::int64_t* q_positions, std::int64_t nq, const std::int64_t* k_positions, std::int64_t nk,
                                     std::int64_t rows, cudaStream_t stream);
// Its gradient: dscores = scale * P * (dP - sum over the row of P * dP), in place of dP.
void softmax_backward_rows(const bf16* probs, bf16* dprobs, std::int64_t nk, std::int64_t rows, float scale, cudaStream_t stream);

// MoE's row movements (exec/cuda/cuda_chunk_moe.cpp). Rows of `cols` values:
// dst[i] = scale[i] * src[index[i]] (scale null: 1), i < n;
void gather_rows_scaled(const bf16* src, const std::int64_t* index, const float* scale, bf16* dst, std::int64_t n, std::int64_t cols, cudaStream_t stream);
// dst[index[i]] = src[i], i < n (index a permutation);
void scatter_rows(const bf16* src, const std::int64_t* index, bf16* dst, std::int64_t n, std::int64_t cols, cudaStream_t stream);
// y[t] = res[t] + sum over j < k of gate[t k + j] * pairs[t k + j] (fp32 sums, in j's order);
void moe_combine(const bf16* res, const bf16* pairs, const float* gate, std::int64_t k, std::int64_t tokens, std::int64_t cols, bf16* y, cudaStream_t stream);
// dots[q] = dy[q / k] . pairs[q];
void pair_dots(const bf16* dy, const bf16* pairs, std::int64_t k, std::int64_t n_pairs, std::int64_t cols, float* dots, cudaStream_t stream);
// y[t] = sum over j < k of rows[index[t k + j]] (fp32 sums, in j's order).
void sum_pair_rows(const bf16* rows, const std::int64_t* index, std::int64_t k, std::int64_t tokens, std::int64_t cols, bf16* y, cudaStream_t stream);

}  // namespace meshwork::exec::cuda
