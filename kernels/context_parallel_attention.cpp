#include "kernels/context_parallel_attention.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace meshwork::kernels {
namespace {

// Shapes: every block's rows are `samples` times its positions, every column count q's; the
// head dimension divides the columns. Returns the head dimension.
template <class T>
Index check(std::string_view op, const Mat<T>& q, std::span<const Index> q_pos, std::span<const Mat<T>> k, std::span<const Mat<T>> v,
            std::span<const std::vector<Index>> k_pos, Index num_heads) {
  require(num_heads > 0 && q.cols() > 0 && q.cols() % num_heads == 0, op, "q " + shape_of(q) + " does not divide into " + std::to_string(num_heads) + " heads");
  require(!q_pos.empty() && q.rows() % static_cast<Index>(q_pos.size()) == 0, op, "q " + shape_of(q) + " is not samples x " + std::to_string(q_pos.size()) + " positions");
  require(!k.empty() && k.size() == v.size() && k.size() == k_pos.size(), op, "k, v and their positions must list the same blocks");
  const Index samples = q.rows() / static_cast<Index>(q_pos.size());
  for (std::size_t b = 0; b < k.size(); ++b) {
    const Index rows = samples * static_cast<Index>(k_pos[b].size());
    require(k[b].rows() == rows && v[b].rows() == rows && k[b].cols() == q.cols() && v[b].cols() == q.cols(), op,
            "block " + std::to_string(b) + ": k " + shape_of(k[b]) + " and v " + shape_of(v[b]) + " are not " + shape_of(rows, q.cols()));
  }
  return q.cols() / num_heads;
}

}  // namespace

std::vector<Index> context_parallel_positions(Index seq, Index cp, Index rank, bool load_balance) {
  const Index chunks = load_balance ? 2 * cp : cp;
  if (cp < 1 || rank < 0 || rank >= cp || seq % chunks != 0) {
    throw std::invalid_argument("context_parallel_positions: sequence " + std::to_string(seq) + " does not split into " + std::to_string(chunks) +
                                " chunks, or rank " + std::to_string(rank) + " is outside the group of " + std::to_string(cp));
  }
  const Index chunk = seq / chunks;
  std::vector<Index> out;
  out.reserve(static_cast<std::size_t>(seq / cp));
  std::vector<Index> mine{rank};
  if (load_balance) mine.push_back(2 * cp - 1 - rank);
  for (const Index c : mine) {
    for (Index i = 0; i < chunk; ++i) out.push_back(c * chunk + i);
  }
  return out;
}

template <class T>
MultiHeadAttentionForward<T> blockwise_causal_attention_forward(const Mat<T>& q, std::span<const Index> q_pos, std::span<const Mat<T>> k,
                                                                std::span<const Mat<T>> v, std::span<const std::vector<Index>> k_pos, Index num_heads) {
  const Index d = check<T>("blockwise_causal_attention_forward", q, q_pos, k, v, k_pos, num_heads);
  const auto lq = static_cast<Index>(q_pos.size());
  const Index samples = q.rows() / lq;
  const T scale = T(1) / std::sqrt(static_cast<T>(d));
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  MultiHeadAttentionForward<T> f;
  f.out = Mat<T>::Zero(q.rows(), q.cols());
  f.logsumexp = Mat<T>::Constant(q.rows(), num_heads, kNegInf);
  for (std::size_t b = 0; b < k.size(); ++b) {
    const auto lk = static_cast<Index>(k_pos[b].size());
    for (Index s = 0; s < samples; ++s) {
      for (Index h = 0; h < num_heads; ++h) {
        const Mat<T> scores = q.block(s * lq, h * d, lq, d) * k[b].block(s * lk, h * d, lk, d).transpose() * scale;
        for (Index i = 0; i < lq; ++i) {
          // This block's part of row i: its maximum over the visible keys (NaN if any is).
          T row_max = kNegInf;
          bool any = false;
          for (Index j = 0; j < lk; ++j) {
            if (k_pos[b][static_cast<std::size_t>(j)] > q_pos[static_cast<std::size_t>(i)]) continue;
            any = true;
            const T x = scores(i, j);
            row_max = std::isnan(x) || std::isnan(row_max) ? std::numeric_limits<T>::quiet_NaN() : std::max(row_max, x);
          }
          if (!any) continue;
          T sum = 0;
          for (Index j = 0; j < lk; ++j) {
            if (k_pos[b][static_cast<std::size_t>(j)] <= q_pos[static_cast<std::size_t>(i)]) sum += std::exp(scores(i, j) - row_max);
          }
          const T block_lse = row_max + std::log(sum);
          // The online softmax's merge: the running output is rescaled to the new total.
          T& lse = f.logsumexp(s * lq + i, h);
          const T top = std::isnan(block_lse) ? block_lse : std::max(lse, block_lse);
          const T merged = top + std::log(std::exp(lse - top) + std::exp(block_lse - top));
          auto o = f.out.block(s * lq + i, h * d, 1, d);
          o *= std::exp(lse - merged);
          for (Index j = 0; j < lk; ++j) {
            if (k_pos[b][static_cast<std::size_t>(j)] <= q_pos[static_cast<std::size_t>(i)]) o += std::exp(scores(i, j) - merged) * v[b].block(s * lk + j, h * d, 1, d);
          }
          lse = merged;
        }
      }
    }
  }
  return f;
}

template <class T>
BlockwiseAttentionGrads<T> blockwise_causal_attention_backward(const Mat<T>& dout, const Mat<T>& q, std::span<const Index> q_pos, std::span<const Mat<T>> k,
                                                               std::span<const Mat<T>> v, std::span<const std::vector<Index>> k_pos, const Mat<T>& out,
                                                               const Mat<T>& logsumexp, Index num_heads) {
  constexpr std::string_view op = "blockwise_causal_attention_backward";
  const Index d = check<T>(op, q, q_pos, k, v, k_pos, num_heads);
  require(dout.rows() == q.rows() && dout.cols() == q.cols() && out.rows() == q.rows() && out.cols() == q.cols(), op,
          "dout " + shape_of(dout) + " and out " + shape_of(out) + " must match q " + shape_of(q));
  require(logsumexp.rows() == q.rows() && logsumexp.cols() == num_heads, op, "logsumexp " + shape_of(logsumexp) + " must be " + shape_of(q.rows(), num_heads));
  const auto lq = static_cast<Index>(q_pos.size());
  const Index samples = q.rows() / lq;
  const T scale = T(1) / std::sqrt(static_cast<T>(d));
  BlockwiseAttentionGrads<T> g;
  g.dq = Mat<T>::Zero(q.rows(), q.cols());
  for (std::size_t b = 0; b < k.size(); ++b) {
    g.dk.push_back(Mat<T>::Zero(k[b].rows(), k[b].cols()));
    g.dv.push_back(Mat<T>::Zero(v[b].rows(), v[b].cols()));
  }
  for (Index s = 0; s < samples; ++s) {
    for (Index h = 0; h < num_heads; ++h) {
      const Mat<T> qs = q.block(s * lq, h * d, lq, d), dos = dout.block(s * lq, h * d, lq, d);
      // Dao et al. 2022, Appendix B.2: D_i = rowsum(dO_i * O_i), the softmax Jacobian's term.
      const Vec<T> dsum = (dos.array() * out.block(s * lq, h * d, lq, d).array()).rowwise().sum().matrix();
      for (std::size_t b = 0; b < k.size(); ++b) {
        const auto lk = static_cast<Index>(k_pos[b].size());
        const Mat<T> kb = k[b].block(s * lk, h * d, lk, d), vb = v[b].block(s * lk, h * d, lk, d);
        // P from the saved logsumexp (masked entries 0), then dS = P * (dP - D).
        Mat<T> p = Mat<T>::Zero(lq, lk);
        const Mat<T> scores = qs * kb.transpose() * scale;
        for (Index i = 0; i < lq; ++i) {
          for (Index j = 0; j < lk; ++j) {
            if (k_pos[b][static_cast<std::size_t>(j)] <= q_pos[static_cast<std::size_t>(i)]) p(i, j) = std::exp(scores(i, j) - logsumexp(s * lq + i, h));
          }
        }
        const Mat<T> dp = dos * vb.transpose();
        const Mat<T> ds = (p.array() * (dp.colwise() - dsum).array()).matrix();
        g.dq.block(s * lq, h * d, lq, d) += ds * kb * scale;
        g.dk[b].block(s * lk, h * d, lk, d) = ds.transpose() * qs * scale;
        g.dv[b].block(s * lk, h * d, lk, d) = p.transpose() * dos;
      }
    }
  }
  return g;
}

#define MESHWORK_BLOCKWISE_ATTENTION(T)                                                                                                                  \
  template MultiHeadAttentionForward<T> blockwise_causal_attention_forward(const Mat<T>&, std::span<const Index>, std::span<const Mat<T>>,              \
                                                                           std::span<const Mat<T>>, std::span<const std::vector<Index>>, Index);       \
  template BlockwiseAttentionGrads<T> blockwise_causal_attention_backward(const Mat<T>&, const Mat<T>&, std::span<const Index>, std::span<const Mat<T>>, \
                                                                          std::span<const Mat<T>>, std::span<const std::vector<Index>>, const Mat<T>&,  \
                                                                          const Mat<T>&, Index);
MESHWORK_BLOCKWISE_ATTENTION(float)
MESHWORK_BLOCKWISE_ATTENTION(double)
#undef MESHWORK_BLOCKWISE_ATTENTION

}  // namespace meshwork::kernels
