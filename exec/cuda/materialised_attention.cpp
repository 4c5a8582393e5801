#include "exec/cuda/materialised_attention.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/causal_softmax.hpp"

namespace meshwork::exec::cuda {

namespace {

using bf16 = __nv_bfloat16;
using I = std::int64_t;

// Vaswani et al. 2017 eq. 1: scores scaled by 1/sqrt(d_k), rounded once from double, as the
// direct kernels do (kernels/cuda/attention.cu, score_scale).
float score_scale(I head_dim) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

void check_shape(const char* op, I batch_heads, I seq, I head_dim) {
  if (batch_heads <= 0 || seq <= 0 || head_dim <= 0) {
    throw std::invalid_argument(std::string(op) + ": q [" + std::to_string(batch_heads) + ", " +
                                std::to_string(seq) + ", " + std::to_string(head_dim) +
                                "] must have every dimension positive");
  }
}

// Row-major products over the batch of (sequence, head) pairs; every matrix packed, the pairs
// one after the other. See gemm.hpp for the trans flags: a transposed operand is stored the
// other way round.
BatchedGemmShape batched(I m, I n, I k, bool trans_a, bool trans_b, I batch, I stride_a, I stride_b,
                         I stride_c) {
  BatchedGemmShape s;
  s.m = m;
  s.n = n;
  s.k = k;
  s.trans_a = trans_a;
  s.trans_b = trans_b;
  s.batch = batch;
  s.stride_a = stride_a;
  s.stride_b = stride_b;
  s.stride_c = stride_c;
  return s;
}

}  // namespace

std::size_t materialised_attention_probs_bytes(I batch_heads, I seq) {
  return static_cast<std::size_t>(batch_heads) * static_cast<std::size_t>(seq) *
         static_cast<std::size_t>(seq) * sizeof(bf16);
}

I causal_row_blocks(I seq) {
  I blocks = 1;
  while (blocks < kMostCausalRowBlocks && seq % (2 * blocks) == 0 && seq / (2 * blocks) >= kLeastCausalBlockRows &&
         (seq / (2 * blocks)) % 8 == 0) {
    blocks *= 2;
  }
  return blocks;
}

namespace {

// Row block i of query rows [i t, (i + 1) t) sees keys [0, (i + 1) t); key block j is seen by
// query rows [j t, seq). The [seq, seq] matrices have row stride seq (ld), and each block's
// product starts at its offset in every (sequence, head) pair's matrix.
struct CausalBlocks {
  I blocks, t, seq;
  CausalBlocks(I row_blocks, I seq_len, const char* op) : blocks(row_blocks), t(0), seq(seq_len) {
    if (row_blocks != 1 && (row_blocks <= 0 || seq_len % row_blocks != 0 || (seq_len / row_blocks) % 8 != 0)) {
      throw std::invalid_argument(std::string(op) + ": row_blocks " + std::to_string(row_blocks) + " must divide seq " +
                                  std::to_string(seq_len) + " into blocks of a multiple of 8 rows");
    }
    t = seq_len / row_blocks;
  }
  [[nodiscard]] I seen_keys(I i) const { return (i + 1) * t; }
  [[nodiscard]] I seeing_rows(I j) const { return seq - j * t; }
};

}  // namespace

void materialised_attention_forward(Gemm& gemm, const bf16* q, const bf16* k, const bf16* v,
                                    bf16* probs, bf16* out, I batch_heads, I seq, I head_dim,
                                    cudaStream_t stream, I row_blocks) {
  check_shape("materialised_attention_forward", batch_heads, seq, head_dim);
  const CausalBlocks cb(row_blocks, seq, "materialised_attention_forward");
  const I sd = seq * head_dim, ss = seq * seq, t = cb.t;
  // S = Q K^T, row block by row block: [t, head_dim] x [seen keys, head_dim]^T into probs.
  for (I i = 0; i < cb.blocks; ++i) {
    BatchedGemmShape s = batched(t, cb.seen_keys(i), head_dim, false, true, batch_heads, sd, sd, ss);
    s.ldc = seq;
    gemm.matmul_batched(q + i * t * head_dim, k, probs + i * t * seq, s, 1.0F, 0.0F, stream);
  }
  // P = causal softmax(scale * S), in place (the kernel allows probs to alias scores); zeros
  // written to each row block's end, which is where the products below read.
  kernels::cuda::causal_softmax_forward<bf16>(probs, probs, batch_heads, seq, score_scale(head_dim),
                                              stream, cb.blocks > 1 ? t : 0);
  // O = P V: [t, seen keys] x [seen keys, head_dim] per row block.
  for (I i = 0; i < cb.blocks; ++i) {
    BatchedGemmShape s = batched(t, head_dim, cb.seen_keys(i), false, false, batch_heads, ss, sd, sd);
    s.lda = seq;
    gemm.matmul_batched(probs + i * t * seq, v, out + i * t * head_dim, s, 1.0F, 0.0F, stream);
  }
}

void materialised_attention_backward(Gemm& gemm, const bf16* dout, const bf16* q, const bf16* k,
                                     const bf16* v, const bf16* probs, bf16* scratch, bf16* dq,
                                     bf16* dk, bf16* dv, I batch_heads, I seq, I head_dim,
                                     cudaStream_t stream, I row_blocks) {
  check_shape("materialised_attention_backward", batch_heads, seq, head_dim);
  const CausalBlocks cb(row_blocks, seq, "materialised_attention_backward");
  const I sd = seq * head_dim, ss = seq * seq, t = cb.t;
  for (I i = 0; i < cb.blocks; ++i) {
    // dP = dO V^T: [t, head_dim] x [seen keys, head_dim]^T.
    BatchedGemmShape s = batched(t, cb.seen_keys(i), head_dim, false, true, batch_heads, sd, sd, ss);
    s.ldc = seq;
    gemm.matmul_batched(dout + i * t * head_dim, v, scratch + i * t * seq, s, 1.0F, 0.0F, stream);
  }
  for (I j = 0; j < cb.blocks; ++j) {
    // dV = P^T dO for key block j: P's rows [j t, seq) and columns [j t, (j + 1) t), stored
    // [seeing rows (k), t (m)] with row stride seq; dO's rows [j t, seq).
    BatchedGemmShape s = batched(t, head_dim, cb.seeing_rows(j), true, false, batch_heads, ss, sd, sd);
    s.lda = seq;
    gemm.matmul_batched(probs + j * t * seq + j * t, dout + j * t * head_dim, dv + j * t * head_dim, s, 1.0F, 0.0F,
                        stream);
  }
  // dS = scale * P * (dP - rowsum(P * dP)) in place of dP: the gradient of the raw Q K^T
  // (causal_softmax.hpp), so the two products below take no further scale.
  kernels::cuda::causal_softmax_backward<bf16>(scratch, probs, scratch, batch_heads, seq,
                                               score_scale(head_dim), stream, cb.blocks > 1 ? t : 0);
  for (I i = 0; i < cb.blocks; ++i) {
    // dQ = dS K: [t, seen keys] x [seen keys, head_dim].
    BatchedGemmShape s = batched(t, head_dim, cb.seen_keys(i), false, false, batch_heads, ss, sd, sd);
    s.lda = seq;
    gemm.matmul_batched(scratch + i * t * seq, k, dq + i * t * head_dim, s, 1.0F, 0.0F, stream);
  }
  for (I j = 0; j < cb.blocks; ++j) {
    // dK = dS^T Q for key block j: dS's rows [j t, seq), columns [j t, (j + 1) t); Q's rows
    // [j t, seq).
    BatchedGemmShape s = batched(t, head_dim, cb.seeing_rows(j), true, false, batch_heads, ss, sd, sd);
    s.lda = seq;
    gemm.matmul_batched(scratch + j * t * seq + j * t, q + j * t * head_dim, dk + j * t * head_dim, s, 1.0F, 0.0F,
                        stream);
  }
}

}  // namespace meshwork::exec::cuda
