#include "kernels/embedding.hpp"

#include <limits>

namespace meshwork::kernels {
namespace {

void check_ids(std::string_view op, std::span<const std::int64_t> token_ids,
               std::int64_t vocab_end) {
  for (std::size_t i = 0; i < token_ids.size(); ++i)
    require(token_ids[i] >= 0 && token_ids[i] < vocab_end, op,
            "token id " + std::to_string(token_ids[i]) + " at position " + std::to_string(i) +
                " is outside the vocabulary [0, " + std::to_string(vocab_end) + ")");
}

void check_nonnegative(std::string_view op, std::span<const std::int64_t> token_ids,
                       std::int64_t vocab_begin) {
  require(vocab_begin >= 0, op, "vocab_begin " + std::to_string(vocab_begin) + " is negative");
  check_ids(op, token_ids, std::numeric_limits<std::int64_t>::max());
}

// The row of `id` in a shard holding [vocab_begin, vocab_begin + local_vocab), or -1.
inline Index local_row(std::int64_t id, std::int64_t vocab_begin, Index local_vocab) {
  const std::int64_t r = id - vocab_begin;
  return r >= 0 && r < local_vocab ? r : -1;
}

}  // namespace

template <class T>
Mat<T> vocab_parallel_embedding_forward(const Mat<T>& local_table,
                                        std::span<const std::int64_t> token_ids,
                                        std::int64_t vocab_begin) {
  check_nonnegative("vocab_parallel_embedding_forward", token_ids, vocab_begin);
  Mat<T> out = Mat<T>::Zero(static_cast<Index>(token_ids.size()), local_table.cols());
  for (Index i = 0; i < out.rows(); ++i) {
    const Index r = local_row(token_ids[i], vocab_begin, local_table.rows());
    if (r >= 0) out.row(i) = local_table.row(r);
  }
  return out;
}

template <class T>
Mat<T> vocab_parallel_embedding_backward(const Mat<T>& dout,
                                         std::span<const std::int64_t> token_ids,
                                         std::int64_t vocab_begin, Index local_vocab) {
  constexpr std::string_view op = "vocab_parallel_embedding_backward";
  check_nonnegative(op, token_ids, vocab_begin);
  require(local_vocab >= 0, op, "local_vocab " + std::to_string(local_vocab) + " is negative");
  require(dout.rows() == static_cast<Index>(token_ids.size()), op,
          "dout " + shape_of(dout) + " for " + std::to_string(token_ids.size()) + " token ids");
  Mat<T> dtable = Mat<T>::Zero(local_vocab, dout.cols());
  vocab_parallel_embedding_accumulate_grad(dtable, dout, token_ids, vocab_begin);
  return dtable;
}

template <class T>
void vocab_parallel_embedding_accumulate_grad(Mat<T>& dtable, const Mat<T>& dout,
                                              std::span<const std::int64_t> token_ids,
                                              std::int64_t vocab_begin) {
  constexpr std::string_view op = "vocab_parallel_embedding_accumulate_grad";
  check_nonnegative(op, token_ids, vocab_begin);
  require(dout.rows() == static_cast<Index>(token_ids.size()), op,
          "dout " + shape_of(dout) + " for " + std::to_string(token_ids.size()) + " token ids");
  require(dtable.cols() == dout.cols(), op,
          "dtable " + shape_of(dtable) + " does not match dout " + shape_of(dout));
  // A lookup is a one-hot matrix product, out = onehot(ids) * table, so the table's gradient
  // is onehot(ids)^T * dout: a scatter-add in which repeated ids accumulate.
  for (Index i = 0; i < dout.rows(); ++i) {
    const Index r = local_row(token_ids[i], vocab_begin, dtable.rows());
    if (r >= 0) dtable.row(r) += dout.row(i);
  }
}

template <class T>
Mat<T> embedding_forward(const Mat<T>& table, std::span<const std::int64_t> token_ids) {
  check_ids("embedding_forward", token_ids, table.rows());
  return vocab_parallel_embedding_forward(table, token_ids, 0);
}

template <class T>
Mat<T> embedding_backward(const Mat<T>& dout, std::span<const std::int64_t> token_ids,
                          Index vocab_size) {
  check_ids("embedding_backward", token_ids, vocab_size);
  return vocab_parallel_embedding_backward(dout, token_ids, 0, vocab_size);
}

#define MESHWORK_INSTANTIATE(T)                                                                   \
  template Mat<T> embedding_forward(const Mat<T>&, std::span<const std::int64_t>);                \
  template Mat<T> embedding_backward(const Mat<T>&, std::span<const std::int64_t>, Index);        \
  template Mat<T> vocab_parallel_embedding_forward(const Mat<T>&, std::span<const std::int64_t>,  \
                                                   std::int64_t);                                 \
  template Mat<T> vocab_parallel_embedding_backward(const Mat<T>&, std::span<const std::int64_t>, \
                                                    std::int64_t, Index);                        \
  template void vocab_parallel_embedding_accumulate_grad(Mat<T>&, const Mat<T>&,                  \
                                                         std::span<const std::int64_t>, std::int64_t);
MESHWORK_INSTANTIATE(float)
MESHWORK_INSTANTIATE(double)
#undef MESHWORK_INSTANTIATE

}  // namespace meshwork::kernels
