#pragma once
// What exec/gpt.cpp (the dense layer, embeddings and head) and exec/moe.cpp (the MoE layer)
// share: small matrix helpers and the caches a micro-batch keeps from its forward to its backward.
// Private to exec/.

#include <memory>
#include <vector>

#include "exec/gpt.hpp"
#include "kernels/tensor.hpp"

namespace meshwork::exec {

namespace detail {


using Vec = kernels::Vec<float>;
// Megatron-LM's layernorm epsilon (--layernorm-epsilon, default 1e-5).
constexpr float kNormEps = 1e-5F;

inline Vec vec(const Mat& m) { return Eigen::Map<const Vec>(m.data(), m.size()); }
inline Mat column_sums(const Mat& d) { return d.colwise().sum().transpose(); }
inline void add_rows(Mat& x, const Mat& bias) { x.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(bias.data(), bias.size()); }

// Learned absolute positions (GPT-2): row i, the token at position positions[i mod n] of its
// sample (n = positions.size()), adds that row of the table; the gradient accumulates the other way.
inline void add_positions(Mat& x, const Mat& pos, const std::vector<Index>& positions) {
  const auto n = static_cast<Index>(positions.size());
  for (Index i = 0; i < x.rows(); ++i) x.row(i) += pos.row(positions[static_cast<std::size_t>(i % n)]);
}
inline void accumulate_position_grad(Mat& pos_grad, const Mat& dy, const std::vector<Index>& positions) {
  const auto n = static_cast<Index>(positions.size());
  for (Index i = 0; i < dy.rows(); ++i) pos_grad.row(positions[static_cast<std::size_t>(i % n)]) += dy.row(i);
}

struct NormOut {
  Mat y;
  Vec mean, rstd;
};
struct NormGrad {
  Mat dx, dgamma, dbeta;
};

// GQA (Ainslie et al. 2023): each K/V group serves heads/groups query heads; the attention
// kernel takes one K and V per query head, so groups are repeated, and their gradients summed.
inline Mat expand_groups(const Mat& kv, Index heads, Index groups, Index hd) {
  if (heads == groups) return kv;
  Mat out(kv.rows(), heads * hd);
  for (Index h = 0; h < heads; ++h) out.middleCols(h * hd, hd) = kv.middleCols(h / (heads / groups) * hd, hd);
  return out;
}
inline Mat collapse_groups(const Mat& d, Index heads, Index groups, Index hd) {
  if (heads == groups) return d;
  Mat out = Mat::Zero(d.rows(), groups * hd);
  for (Index h = 0; h < heads; ++h) out.middleCols(h / (heads / groups) * hd, hd) += d.middleCols(h * hd, hd);
  return out;
}


}  // namespace detail

// An MoE layer's dispatch, kept from forward to backward. Pairs are (token, choice), index
// token * topk + choice; the send buffer holds them sorted by expert (so by owning EP rank).
struct GptChunk::MoeCache {
  Mat logits;                        // [tokens, experts] the router's GEMM, until router_topk
  Mat probs;                         // [tokens, experts] the router's softmax
  std::vector<std::int64_t> expert;  // per pair: the chosen expert
  std::vector<float> gate;           // per pair: its probability, the output's weight
  std::vector<std::size_t> order;    // per send row: its pair
  std::vector<std::int64_t> rows_per_expert;  // rows this member sends to each expert
  std::vector<int> send_counts, recv_counts;  // floats per EP member
  std::vector<Index> segment;        // per (source member, local expert): first received row
  std::vector<std::int64_t> recv_rows;  // per (source member, local expert): rows received
  // Expert tensor parallelism: every TP member's received rows, gathered (each member's block
  // padded to tp_block rows), and where each (member, source, local expert) run of rows starts.
  std::vector<std::vector<std::int64_t>> tp_recv_rows;  // per TP member: its recv_rows
  std::vector<std::vector<Index>> tp_segment;           // per TP member: row of each run in `gathered`
  Index tp_block = 0;
  Mat gathered;                      // forward: every TP member's received rows; backward: their outputs' gradients
  Mat partial;                       // forward: this TP rank's slice-sums of the outputs; backward: of the inputs' gradients
  Mat send;                          // forward: the rows sent (by expert); backward: their gradients
  Mat rows;                          // forward: the rows received; backward: their gradients
  Mat results;                       // forward: the local experts' outputs; backward: their inputs' gradients
  Mat back;                          // forward: the results returned (by send row); backward: their gradients
  Mat out;                           // per pair: its expert's output
  Mat combined;                      // per token: its pairs' outputs weighted by their gates (moe_unpermute), until mlp_residual
  Mat dlogits;                       // the router's logits' gradient (its weight-gradient half reads it)
  std::vector<Mat> x, u, a;          // per local expert: input rows, pre-activation, activation
  std::vector<Mat> dout, du;         // per local expert: the gradients its weight-gradient halves read
};

struct GptChunk::LayerCache {
  Mat x, x1;      // the layer's input and the residual after attention (this rank's rows)
  detail::NormOut n1, n2;
  Mat y1, y2;     // normalised inputs of the column-parallel layers (all rows)
  Mat q, k, v;    // this rank's heads, K and V repeated per query head
  // Context parallelism: this member's K and V per group (what the ring passes), the blocks of
  // every member once exchanged (repeated per query head, in member order; dropped after use),
  // and the K and V gradients of every member's block before they travel back (per group).
  Mat kg, vg;
  std::vector<Mat> kb, vb;
  Mat dk_blocks, dv_blocks;
  Mat att, lse;
  Mat u;          // MLP pre-activation
  Mat a;          // MLP activation
  // What the weight-gradient halves read, left by the input-gradient ones: the gradients of the
  // Q, K and V projections' outputs (K and V per group), of attention_out's, fc1's and fc2's.
  Mat dq, dk, dv, dof, du, dmf;
  std::unique_ptr<MoeCache> moe;  // an MoE layer's, in place of u and a
};

struct GptChunk::Cache {
  std::vector<LayerCache> layers;
  Batch batch;
  double loss_scale = 1;
  Mat head_x, head_y, logits, dlogits;
  detail::NormOut nf;
  // The registers: the tensor flowing between ops and the residual stream (forward), their
  // gradients (backward); a recomputation has its own, as it runs inside the backward.
  Mat cur, res, rcur, rres;
};

}  // namespace meshwork::exec
