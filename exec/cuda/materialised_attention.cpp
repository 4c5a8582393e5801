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

void materialised_attention_forward(Gemm& gemm, const bf16* q, const bf16* k, const bf16* v,
                                    bf16* probs, bf16* out, I batch_heads, I seq, I head_dim,
                                    cudaStream_t stream) {
  check_shape("materialised_attention_forward", batch_heads, seq, head_dim);
  const I sd = seq * head_dim, ss = seq * seq;
  // S = Q K^T: [seq, head_dim] x [seq, head_dim]^T, into probs.
  gemm.matmul_batched(q, k, probs,
                      batched(seq, seq, head_dim, false, true, batch_heads, sd, sd, ss), 1.0F, 0.0F,
                      stream);
  // P = causal softmax(scale * S), in place (the kernel allows probs to alias scores).
  kernels::cuda::causal_softmax_forward<bf16>(probs, probs, batch_heads, seq, score_scale(head_dim),
                                              stream);
  // O = P V: [seq, seq] x [seq, head_dim].
  gemm.matmul_batched(probs, v, out,
                      batched(seq, head_dim, seq, false, false, batch_heads, ss, sd, sd), 1.0F,
                      0.0F, stream);
}

void materialised_attention_backward(Gemm& gemm, const bf16* dout, const bf16* q, const bf16* k,
                                     const bf16* v, const bf16* probs, bf16* scratch, bf16* dq,
                                     bf16* dk, bf16* dv, I batch_heads, I seq, I head_dim,
                                     cudaStream_t stream) {
  check_shape("materialised_attention_backward", batch_heads, seq, head_dim);
  const I sd = seq * head_dim, ss = seq * seq;
  // dP = dO V^T: [seq, head_dim] x [seq, head_dim]^T.
  gemm.matmul_batched(dout, v, scratch,
                      batched(seq, seq, head_dim, false, true, batch_heads, sd, sd, ss), 1.0F, 0.0F,
                      stream);
  // dV = P^T dO: P stored [seq (k), seq (m)], dO [seq (k), head_dim].
  gemm.matmul_batched(probs, dout, dv,
                      batched(seq, head_dim, seq, true, false, batch_heads, ss, sd, sd), 1.0F, 0.0F,
                      stream);
  // dS = scale * P * (dP - rowsum(P * dP)) in place of dP: the gradient of the raw Q K^T
  // (causal_softmax.hpp), so the two products below take no further scale.
  kernels::cuda::causal_softmax_backward<bf16>(scratch, probs, scratch, batch_heads, seq,
                                               score_scale(head_dim), stream);
  // dQ = dS K: [seq, seq] x [seq, head_dim].
  gemm.matmul_batched(scratch, k, dq,
                      batched(seq, head_dim, seq, false, false, batch_heads, ss, sd, sd), 1.0F,
                      0.0F, stream);
  // dK = dS^T Q: dS stored [seq (k = query i), seq (m = key j)], Q [seq (k), head_dim].
  gemm.matmul_batched(scratch, q, dk,
                      batched(seq, head_dim, seq, true, false, batch_heads, ss, sd, sd), 1.0F, 0.0F,
                      stream);
}

}  // namespace meshwork::exec::cuda
