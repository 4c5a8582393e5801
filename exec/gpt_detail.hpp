#pragma once
// What exec/gpt.cpp (the dense layer, embeddings and head) and exec/moe.cpp (the MoE layer)
// share: small matrix helpers, the op timer, and the MoE layer's forward-to-backward cache.
// Private to exec/.

#include <chrono>
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

// Learned absolute positions (GPT-2): token i of a sequence adds position row (offset + i) mod
// seq; the gradient accumulates the other way.
inline void add_positions(Mat& x, const Mat& pos, Index offset, Index seq) {
  for (Index i = 0; i < x.rows(); ++i) x.row(i) += pos.row((offset + i) % seq);
}
inline void accumulate_position_grad(Mat& pos_grad, const Mat& dy, Index offset, Index seq) {
  for (Index i = 0; i < dy.rows(); ++i) pos_grad.row((offset + i) % seq) += dy.row(i);
}

class Scope {
 public:
  Scope(OpSeconds* t, OpClass c) : t_(t), c_(c), start_(std::chrono::steady_clock::now()) {}
  ~Scope() {
    if (t_ != nullptr) (*t_)[c_] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  OpSeconds* t_;
  OpClass c_;
  std::chrono::steady_clock::time_point start_;
};

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
  Mat probs;                         // [tokens, experts] the router's softmax
  std::vector<std::int64_t> expert;  // per pair: the chosen expert
  std::vector<float> gate;           // per pair: its probability, the output's weight
  std::vector<std::size_t> order;    // per send row: its pair
  std::vector<int> send_counts, recv_counts;  // floats per EP member
  std::vector<Index> segment;        // per (source member, local expert): first received row
  std::vector<std::int64_t> recv_rows;  // per (source member, local expert): rows received
  Mat out;                           // per pair: its expert's output
  std::vector<Mat> x, u, a;          // per local expert: input rows, pre-activation, activation
};

}  // namespace meshwork::exec
