// Embedding lookup and scatter-add backward, whole-table and split by vocabulary.
#include "kernels/embedding.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tests/kernels/gradient_check.hpp"

namespace meshwork::kernels {
namespace {

using testing::random_mat;

const std::vector<std::int64_t> kIds = {0, 6, 3, 3, 5, 1, 3};  // 3 repeats: gradients accumulate

TEST(Embedding, ForwardCopiesRowsAndBackwardScatterAdds) {
  std::mt19937_64 rng(30);
  const Mat<float> table = random_mat<float>(7, 4, rng);
  const Mat<float> out = embedding_forward<float>(table, kIds);
  ASSERT_EQ(out.rows(), 7);
  for (std::size_t i = 0; i < kIds.size(); ++i)
    EXPECT_EQ(out.row(static_cast<Index>(i)), table.row(static_cast<Index>(kIds[i])));
  const Mat<float> dout = random_mat<float>(7, 4, rng);
  const Mat<float> dtable = embedding_backward<float>(dout, kIds, 7);
  EXPECT_EQ(Mat<float>(dtable.row(3)), Mat<float>(dout.row(2) + dout.row(3) + dout.row(6)));
  EXPECT_EQ(Mat<float>(dtable.row(2)), Mat<float>::Zero(1, 4));  // id 2 never looked up
  EXPECT_EQ(dtable.row(6), dout.row(1));
}

TEST(Embedding, BackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(31);
  Mat<double> table = random_mat(7, 3, rng);
  const Mat<double> w = random_mat(7, 3, rng);
  const auto loss = [&] {
    return testing::weighted_sum(embedding_forward<double>(table, kIds), w);
  };
  testing::expect_gradient("dtable", table, loss, embedding_backward<double>(w, kIds, 7));
}

TEST(VocabParallelEmbedding, OneTwoAndThreeShardsMatchTheWholeTable) {
  std::mt19937_64 rng(32);
  const Index vocab = 7, hidden = 4;
  const Mat<float> table = random_mat<float>(vocab, hidden, rng);
  const Mat<float> dout = random_mat<float>(static_cast<Index>(kIds.size()), hidden, rng);
  const Mat<float> whole_out = embedding_forward<float>(table, kIds);
  const Mat<float> whole_dtable = embedding_backward<float>(dout, kIds, vocab);
  for (const Index shards : {1, 2, 3}) {
    Mat<float> out_sum = Mat<float>::Zero(whole_out.rows(), hidden);  // the caller's SUM all-reduce
    Mat<float> dtable(vocab, hidden);
    for (Index s = 0; s < shards; ++s) {
      const Index begin = s * vocab / shards, local = (s + 1) * vocab / shards - begin;
      out_sum +=
          vocab_parallel_embedding_forward<float>(table.middleRows(begin, local), kIds, begin);
      dtable.middleRows(begin, local) =
          vocab_parallel_embedding_backward<float>(dout, kIds, begin, local);
    }
    // Each row comes from exactly one shard and the others add exact zeros.
    EXPECT_EQ(out_sum, whole_out) << shards << " shards";
    EXPECT_EQ(dtable, whole_dtable) << shards << " shards";
  }
}

TEST(VocabParallelEmbedding, AccumulatingAddsTheGradientToWhatIsThere) {
  // A step's micro-batches add into one gradient: the shard's scatter-add on top of what the
  // earlier ones left, the dense gradient added to it (to rounding: the order of the adds
  // differs).
  std::mt19937_64 rng(33);
  const Index hidden = 4, begin = 3, local = 3;  // ids 3, 4, 5 of 7
  const Mat<float> dout = random_mat<float>(static_cast<Index>(kIds.size()), hidden, rng);
  const Mat<float> before = Mat<float>::Constant(local, hidden, 0.25F);
  Mat<float> grad = before;
  vocab_parallel_embedding_accumulate_grad<float>(grad, dout, kIds, begin);
  const Mat<float> want = before + vocab_parallel_embedding_backward<float>(dout, kIds, begin, local);
  EXPECT_TRUE(grad.isApprox(want, 1e-6F)) << grad << "\n" << want;
  EXPECT_NE(grad, before);
  Mat<float> wrong_width = Mat<float>::Zero(local, hidden + 1);
  EXPECT_THROW(vocab_parallel_embedding_accumulate_grad<float>(wrong_width, dout, kIds, begin), std::invalid_argument);
}

TEST(Embedding, BadIdsThrowInvalidArgument) {
  const Mat<float> table = Mat<float>::Zero(7, 2);
  EXPECT_THROW(embedding_forward<float>(table, std::vector<std::int64_t>{7}),
               std::invalid_argument);
  EXPECT_THROW(embedding_forward<float>(table, std::vector<std::int64_t>{-1}),
               std::invalid_argument);
  EXPECT_THROW(embedding_backward<float>(Mat<float>::Zero(2, 2), kIds, 7),
               std::invalid_argument);  // 2 rows, 7 ids
  EXPECT_THROW(vocab_parallel_embedding_forward<float>(table, std::vector<std::int64_t>{-2}, 0),
               std::invalid_argument);
}

}  // namespace
}  // namespace meshwork::kernels
