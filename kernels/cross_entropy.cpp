#include "kernels/cross_entropy.hpp"

#include "kernels/vocab_parallel_cross_entropy.hpp"

namespace meshwork::kernels {

template <class T>
CrossEntropy<T> softmax_cross_entropy(const Mat<T>& logits, std::span<const std::int64_t> targets) {
  for (std::size_t i = 0; i < targets.size(); ++i)
    require(targets[i] >= 0 && targets[i] < logits.cols(), "softmax_cross_entropy",
            "target " + std::to_string(targets[i]) + " of token " + std::to_string(i) +
                " is outside the vocabulary [0, " + std::to_string(logits.cols()) + ")");
  // One shard holding the whole vocabulary: the all-reduces are identities.
  const Vec<T> max = vocab_parallel_local_max(logits);
  const VocabParallelPartialSums<T> sums = vocab_parallel_partial_sums(logits, max, targets, 0);
  return vocab_parallel_loss_and_grad(logits, max, sums, targets, 0);
}

template CrossEntropy<float> softmax_cross_entropy(const Mat<float>&,
                                                   std::span<const std::int64_t>);
template CrossEntropy<double> softmax_cross_entropy(const Mat<double>&,
                                                    std::span<const std::int64_t>);

}  // namespace meshwork::kernels
