// CudaChunk with context parallelism: GptChunk's exchanges (every member's K and V gathered
// before the attention's forward, recomputation and backward; each block's K and V gradients
// reduce-scattered back to its owner after the backward) and the attention of this member's
// queries against every member's keys, masked by their global positions (a key at or before
// the query's position is seen, as kernels/context_parallel_attention computes it on the CPU).
// Materialised: S = Q K^T / sqrt(d), P = softmax(S) over the keys seen, O = P V, with P kept for
// the backward (dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(P dP)) / sqrt(d), dQ = dS K,
// dK = dS^T Q).

#include <cmath>
#include <string>

#include "exec/cuda/chunk_kernels.hpp"
#include "exec/cuda/cuda_chunk_impl.hpp"

namespace meshwork::exec::cuda::chunk_detail {

void CudaChunk::cp_collective(std::string_view what, OpPhase phase, std::int64_t layer, int mb) {
  (void)phase;  // the forward, its recomputation and the backward exchange the same blocks
  Cache& c = cache(mb);
  LayerCache& lc = layer_cache(c, layer);
  if (cp_ == nullptr) throw std::logic_error("a CP instruction on a chunk without context parallelism");
  if (what == "cp_ring_exchange") {
    lc.k_all = gather_rows(*cp_, lc.k);
    lc.v_all = gather_rows(*cp_, lc.v);
  } else if (what == "cp_grad_ring_exchange") {
    lc.dk = reduce_scatter_rows(*cp_, lc.dk_blocks);
    lc.dv = reduce_scatter_rows(*cp_, lc.dv_blocks);
    lc.dk_blocks = DMat();
    lc.dv_blocks = DMat();
  } else {
    throw std::logic_error("a CP instruction the CUDA chunk does not know: " + std::string(what));
  }
}

// member-major [cp][samples][npos] rows -> [samples][cp][npos]: for each member, `samples`
// runs of npos rows to their place (one 2-D copy per member).
DMat CudaChunk::to_sequence(const DMat& member_major, I samples, I npos) const {
  DMat out(member_major.rows(), member_major.cols(), s_);
  const std::size_t run = static_cast<std::size_t>(npos * member_major.cols()) * sizeof(bf16);
  for (int m = 0; m < cp_size_; ++m) {
    const bf16* src = member_major.data() + static_cast<I>(m) * samples * npos * member_major.cols();
    bf16* dst = out.data() + static_cast<I>(m) * npos * member_major.cols();
    MESHWORK_CUDA_CHECK(cudaMemcpy2DAsync(dst, run * static_cast<std::size_t>(cp_size_), src, run, run, static_cast<std::size_t>(samples), cudaMemcpyDeviceToDevice, s_));
  }
  return out;
}
DMat CudaChunk::to_members(const DMat& sequence, I samples, I npos) const {
  DMat out(sequence.rows(), sequence.cols(), s_);
  const std::size_t run = static_cast<std::size_t>(npos * sequence.cols()) * sizeof(bf16);
  for (int m = 0; m < cp_size_; ++m) {
    const bf16* src = sequence.data() + static_cast<I>(m) * npos * sequence.cols();
    bf16* dst = out.data() + static_cast<I>(m) * samples * npos * sequence.cols();
    MESHWORK_CUDA_CHECK(cudaMemcpy2DAsync(dst, run, src, run * static_cast<std::size_t>(cp_size_), run, static_cast<std::size_t>(samples), cudaMemcpyDeviceToDevice, s_));
  }
  return out;
}

void CudaChunk::cp_attention_forward(Cache& c, LayerCache& lc) {
  if (lc.k_all.empty()) throw std::logic_error("CP attention before its K and V exchange");
  const I rows = lc.q.rows(), nq = c.npos, samples = rows / nq, nk = nq * cp_size_, bh = samples * heads_;
  const DMat keys = to_sequence(lc.k_all, samples, nq), values = to_sequence(lc.v_all, samples, nq);
  lc.k_all = DMat();  // ring attention keeps only its own block between uses
  lc.v_all = DMat();
  lc.qh = DMat(bh * nq, hd_, s_);
  DMat kh(bh * nk, hd_, s_), vh(bh * nk, hd_, s_);
  rows_to_heads(lc.q.data(), lc.qh.data(), samples, nq, heads_, heads_, hd_, s_);
  rows_to_heads(keys.data(), kh.data(), samples, nk, heads_, groups_, hd_, s_);
  rows_to_heads(values.data(), vh.data(), samples, nk, heads_, groups_, hd_, s_);
  lc.probs = DMat(bh * nq, nk, s_);
  const float scale = 1.0F / std::sqrt(static_cast<float>(hd_));
  BatchedGemmShape scores{.m = nq, .n = nk, .k = hd_, .trans_b = true, .batch = bh, .stride_a = nq * hd_, .stride_b = nk * hd_, .stride_c = nq * nk};
  ctx_.gemm.matmul_batched(lc.qh.data(), kh.data(), lc.probs.data(), scores, scale, 0.0F, s_);
  position_masked_softmax_forward(lc.probs.data(), c.positions.data(), nq, key_positions_.data(), nk, bh * nq, s_);
  lc.atth = DMat(bh * nq, hd_, s_);
  BatchedGemmShape out{.m = nq, .n = hd_, .k = nk, .batch = bh, .stride_a = nq * nk, .stride_b = nk * hd_, .stride_c = nq * hd_};
  ctx_.gemm.matmul_batched(lc.probs.data(), vh.data(), lc.atth.data(), out, 1.0F, 0.0F, s_);
  lc.att = DMat(rows, heads_ * hd_, s_);
  heads_to_rows(lc.atth.data(), lc.att.data(), samples, nq, heads_, heads_, hd_, s_);
}

void CudaChunk::cp_attention_backward(Cache& c, LayerCache& lc, const DMat& dout) {
  if (lc.k_all.empty()) throw std::logic_error("CP attention's backward before its K and V exchange");
  const I rows = dout.rows(), nq = c.npos, samples = rows / nq, nk = nq * cp_size_, bh = samples * heads_;
  const DMat keys = to_sequence(lc.k_all, samples, nq), values = to_sequence(lc.v_all, samples, nq);
  lc.k_all = DMat();
  lc.v_all = DMat();
  DMat kh(bh * nk, hd_, s_), vh(bh * nk, hd_, s_), dh(bh * nq, hd_, s_);
  rows_to_heads(keys.data(), kh.data(), samples, nk, heads_, groups_, hd_, s_);
  rows_to_heads(values.data(), vh.data(), samples, nk, heads_, groups_, hd_, s_);
  rows_to_heads(dout.data(), dh.data(), samples, nq, heads_, heads_, hd_, s_);
  const float scale = 1.0F / std::sqrt(static_cast<float>(hd_));
  // dP = dO V^T, then dS in its place.
  DMat ds(bh * nq, nk, s_);
  ctx_.gemm.matmul_batched(dh.data(), vh.data(), ds.data(),
                           {.m = nq, .n = nk, .k = hd_, .trans_b = true, .batch = bh, .stride_a = nq * hd_, .stride_b = nk * hd_, .stride_c = nq * nk}, 1.0F, 0.0F,
                           s_);
  softmax_backward_rows(lc.probs.data(), ds.data(), nk, bh * nq, scale, s_);
  DMat dqh(bh * nq, hd_, s_), dkh(bh * nk, hd_, s_), dvh(bh * nk, hd_, s_);
  ctx_.gemm.matmul_batched(ds.data(), kh.data(), dqh.data(), {.m = nq, .n = hd_, .k = nk, .batch = bh, .stride_a = nq * nk, .stride_b = nk * hd_, .stride_c = nq * hd_},
                           1.0F, 0.0F, s_);
  ctx_.gemm.matmul_batched(ds.data(), lc.qh.data(), dkh.data(),
                           {.m = nk, .n = hd_, .k = nq, .trans_a = true, .batch = bh, .stride_a = nq * nk, .stride_b = nq * hd_, .stride_c = nk * hd_}, 1.0F, 0.0F, s_);
  ctx_.gemm.matmul_batched(lc.probs.data(), dh.data(), dvh.data(),
                           {.m = nk, .n = hd_, .k = nq, .trans_a = true, .batch = bh, .stride_a = nq * nk, .stride_b = nq * hd_, .stride_c = nk * hd_}, 1.0F, 0.0F, s_);
  lc.dq = DMat(rows, heads_ * hd_, s_);
  heads_to_rows(dqh.data(), lc.dq.data(), samples, nq, heads_, heads_, hd_, s_);
  DMat dk(samples * nk, groups_ * hd_, s_), dv(samples * nk, groups_ * hd_, s_);
  heads_to_rows(dkh.data(), dk.data(), samples, nk, heads_, groups_, hd_, s_);  // GQA: a group's heads summed
  heads_to_rows(dvh.data(), dv.data(), samples, nk, heads_, groups_, hd_, s_);
  if (rope_) {
    // Back through each key's rotation (linear, so before the owners' sum), and the queries'.
    rope_at(lc.dq.data(), rope_table_.data(), c.positions.data(), nq, rows, heads_, hd_, true, s_);
    rope_at(dk.data(), rope_table_.data(), key_positions_.data(), nk, samples * nk, groups_, hd_, true, s_);
  }
  lc.dk_blocks = to_members(dk, samples, nq);
  lc.dv_blocks = to_members(dv, samples, nq);
  for (DMat* kept : {&lc.qh, &lc.atth, &lc.probs}) *kept = DMat();
}

}  // namespace meshwork::exec::cuda::chunk_detail
