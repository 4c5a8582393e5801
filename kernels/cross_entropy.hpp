#pragma once
// Softmax cross-entropy of next-token logits against integer targets, averaged over tokens:
// the language-modelling loss of a GPT-style decoder, with its gradient.

#include <cstdint>
#include <span>

#include "kernels/tensor.hpp"

namespace meshwork::kernels {

template <class T>
struct CrossEntropy {
  T mean_loss = 0;  // nats per token: mean_i (logsumexp_j logits_ij - logits_i,target_i)
  Mat<T> dlogits;   // d mean_loss / d logits, same shape as the logits given
};

// logits: [tokens, vocab]; targets: one id in [0, vocab) per token. Implemented as the
// vocab-parallel pieces with a single shard, so both share one formula.
template <class T>
CrossEntropy<T> softmax_cross_entropy(const Mat<T>& logits, std::span<const std::int64_t> targets);

}  // namespace meshwork::kernels
