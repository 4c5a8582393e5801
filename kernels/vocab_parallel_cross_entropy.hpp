#pragma once
// Cross-entropy over logits split by vocabulary across the tensor-parallel ranks, as
// Megatron-LM computes it (Shoeybi et al. 2019 §3; its _VocabParallelCrossEntropy): no rank
// gathers the [tokens, vocab] logits, only [tokens] vectors are all-reduced. The caller runs
// the collectives between the three steps:
//
//   max  = vocab_parallel_local_max(local);                   all-reduce(max, MAX)
//   sums = vocab_parallel_partial_sums(local, max, ...);      all-reduce(sums.*, SUM)
//   ce   = vocab_parallel_loss_and_grad(local, max, sums, ...)
//
// Every rank then holds the same mean_loss and the gradient of its own columns. A NaN logit
// on any rank makes every rank's loss NaN, even if the MAX all-reduce drops NaN (as fmax
// does): that rank's sum_exp is NaN and the SUM all-reduce carries it.

#include "kernels/cross_entropy.hpp"

namespace meshwork::kernels {

// Per row, the largest logit among this rank's columns (NaN if any is NaN, so it propagates).
template <class T>
Vec<T> vocab_parallel_local_max(const Mat<T>& local_logits);

template <class T>
struct VocabParallelPartialSums {
  Vec<T> sum_exp;                 // [tokens]: sum over local columns of exp(logit - global_max)
  Vec<T> target_logit_minus_max;  // [tokens]: logit[target] - global_max if target is local, else 0
};

// local_logits: [tokens, local_vocab], holding global vocabulary ids
// [vocab_begin, vocab_begin + local_vocab); global_max: the all-reduced (MAX) local maxima.
template <class T>
VocabParallelPartialSums<T> vocab_parallel_partial_sums(const Mat<T>& local_logits,
                                                        const Vec<T>& global_max,
                                                        std::span<const std::int64_t> targets,
                                                        std::int64_t vocab_begin);

// global_sums: the partial sums all-reduced (SUM) over the ranks. Returns the mean loss over
// all tokens and dlogits for this rank's columns only.
template <class T>
CrossEntropy<T> vocab_parallel_loss_and_grad(const Mat<T>& local_logits, const Vec<T>& global_max,
                                             const VocabParallelPartialSums<T>& global_sums,
                                             std::span<const std::int64_t> targets,
                                             std::int64_t vocab_begin);

}  // namespace meshwork::kernels
