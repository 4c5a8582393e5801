#include "kernels/vocab_parallel_cross_entropy.hpp"

#include <cmath>

namespace meshwork::kernels {
namespace {

template <class T>
void check_rows(std::string_view op, const Mat<T>& local_logits,
                std::span<const std::int64_t> targets) {
  require(local_logits.rows() > 0, op, "no tokens: the mean loss would be 0/0");
  require(local_logits.cols() > 0, op,
          "local_logits " + shape_of(local_logits) + " hold no vocabulary");
  require(static_cast<Index>(targets.size()) == local_logits.rows(), op,
          std::to_string(targets.size()) + " targets for local_logits " + shape_of(local_logits));
  for (std::size_t i = 0; i < targets.size(); ++i)
    require(
        targets[i] >= 0, op,
        "target " + std::to_string(targets[i]) + " of token " + std::to_string(i) + " is negative");
}

template <class T>
void check_vec(std::string_view op, const char* name, const Vec<T>& v, const Mat<T>& local_logits) {
  require(v.size() == local_logits.rows(), op,
          std::string(name) + " has " + std::to_string(v.size()) + " rows for local_logits " +
              shape_of(local_logits));
}

// The target's column in this shard, or -1 when another rank holds it.
inline Index local_column(std::int64_t target, std::int64_t vocab_begin, Index local_vocab) {
  const std::int64_t c = target - vocab_begin;
  return c >= 0 && c < local_vocab ? c : -1;
}

}  // namespace

template <class T>
Vec<T> vocab_parallel_local_max(const Mat<T>& local_logits) {
  require(local_logits.cols() > 0, "vocab_parallel_local_max",
          "local_logits " + shape_of(local_logits) + " hold no vocabulary");
  Vec<T> local_max(local_logits.rows());
  for (Index i = 0; i < local_logits.rows(); ++i)
    local_max(i) = local_logits.row(i).template maxCoeff<Eigen::PropagateNaN>();
  return local_max;
}

template <class T>
VocabParallelPartialSums<T> vocab_parallel_partial_sums(const Mat<T>& local_logits,
                                                        const Vec<T>& global_max,
                                                        std::span<const std::int64_t> targets,
                                                        std::int64_t vocab_begin) {
  constexpr std::string_view op = "vocab_parallel_partial_sums";
  check_rows(op, local_logits, targets);
  check_vec(op, "global_max", global_max, local_logits);
  VocabParallelPartialSums<T> s;
  // Shifting by the global (not local) maximum makes every rank's terms share one scale, so
  // the SUM all-reduce adds like terms and exp() never overflows (the max term is exp(0)).
  s.sum_exp = (local_logits.colwise() - global_max).array().exp().rowwise().sum().matrix();
  s.target_logit_minus_max = Vec<T>::Zero(local_logits.rows());
  for (Index i = 0; i < local_logits.rows(); ++i) {
    const Index c = local_column(targets[i], vocab_begin, local_logits.cols());
    if (c >= 0) s.target_logit_minus_max(i) = local_logits(i, c) - global_max(i);
  }
  return s;
}

template <class T>
CrossEntropy<T> vocab_parallel_loss_and_grad(const Mat<T>& local_logits, const Vec<T>& global_max,
                                             const VocabParallelPartialSums<T>& global_sums,
                                             std::span<const std::int64_t> targets,
                                             std::int64_t vocab_begin) {
  constexpr std::string_view op = "vocab_parallel_loss_and_grad";
  check_rows(op, local_logits, targets);
  check_vec(op, "global_max", global_max, local_logits);
  check_vec(op, "global_sums.sum_exp", global_sums.sum_exp, local_logits);
  check_vec(op, "global_sums.target_logit_minus_max", global_sums.target_logit_minus_max,
            local_logits);
  const T tokens = static_cast<T>(local_logits.rows());
  CrossEntropy<T> ce;
  // -log softmax(z)_t = log sum_j exp(z_j - m) - (z_t - m), with m the row's global maximum.
  ce.mean_loss =
      (global_sums.sum_exp.array().log() - global_sums.target_logit_minus_max.array()).sum() /
      tokens;
  // d/dz_j of the mean loss: (softmax(z)_j - [j == t]) / tokens.
  const MatArray<T> exp_shifted = (local_logits.colwise() - global_max).array().exp();
  const MatArray<T> softmax = exp_shifted.colwise() / global_sums.sum_exp.array();
  ce.dlogits = (softmax / tokens).matrix();
  for (Index i = 0; i < local_logits.rows(); ++i) {
    const Index c = local_column(targets[i], vocab_begin, local_logits.cols());
    if (c >= 0) ce.dlogits(i, c) -= T(1) / tokens;
  }
  return ce;
}

#define MESHWORK_INSTANTIATE(T)                                                   \
  template Vec<T> vocab_parallel_local_max(const Mat<T>&);                        \
  template VocabParallelPartialSums<T> vocab_parallel_partial_sums(               \
      const Mat<T>&, const Vec<T>&, std::span<const std::int64_t>, std::int64_t); \
  template CrossEntropy<T> vocab_parallel_loss_and_grad(                          \
      const Mat<T>&, const Vec<T>&, const VocabParallelPartialSums<T>&,           \
      std::span<const std::int64_t>, std::int64_t);
MESHWORK_INSTANTIATE(float)
MESHWORK_INSTANTIATE(double)
#undef MESHWORK_INSTANTIATE

}  // namespace meshwork::kernels
