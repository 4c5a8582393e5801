#pragma once
// Token embedding lookup and its gradient, whole-table and vocabulary-parallel (Shoeybi et al.
// 2019 §3: the input embedding is split by vocabulary across tensor-parallel ranks; each rank
// looks up the ids it holds and writes zeros for the others, and the caller's SUM all-reduce
// over the ranks assembles the full output).

#include <cstdint>
#include <span>

#include "kernels/tensor.hpp"

namespace meshwork::kernels {

// table: [vocab, hidden]; token_ids in [0, vocab). Returns [tokens, hidden], row i = table row
// token_ids[i].
template <class T>
Mat<T> embedding_forward(const Mat<T>& table, std::span<const std::int64_t> token_ids);

// dout: [tokens, hidden]. Returns the table's gradient [vocab_size, hidden]: zero, plus each
// token's dout row added at its id (repeated ids accumulate).
template <class T>
Mat<T> embedding_backward(const Mat<T>& dout, std::span<const std::int64_t> token_ids,
                          Index vocab_size);

// local_table: [local_vocab, hidden] holding global ids [vocab_begin, vocab_begin + local_vocab).
// Rows whose id another rank holds are zero. Ids must be non-negative.
template <class T>
Mat<T> vocab_parallel_embedding_forward(const Mat<T>& local_table,
                                        std::span<const std::int64_t> token_ids,
                                        std::int64_t vocab_begin);

// The gradient of local_table, [local_vocab, hidden]: only tokens whose id this rank holds
// contribute. dout is the full (all-reduced) output gradient every rank holds.
template <class T>
Mat<T> vocab_parallel_embedding_backward(const Mat<T>& dout,
                                         std::span<const std::int64_t> token_ids,
                                         std::int64_t vocab_begin, Index local_vocab);

// The same gradient added into `dtable` ([local_vocab, hidden]) in place: O(tokens x hidden)
// rather than a dense [local_vocab, hidden] temporary, as a training step accumulates it.
template <class T>
void vocab_parallel_embedding_accumulate_grad(Mat<T>& dtable, const Mat<T>& dout,
                                              std::span<const std::int64_t> token_ids,
                                              std::int64_t vocab_begin);

}  // namespace meshwork::kernels
