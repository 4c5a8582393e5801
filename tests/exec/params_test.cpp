// Initial parameter values: one stream per parameter name and seed, whatever the number of
// threads that fill it.
#include "exec/params.hpp"

#include <gtest/gtest.h>

namespace meshwork::exec {
namespace {

// 8M elements fill on one thread (under 2 x 4M); 12M on two, split at 6M: the first 8M of the
// larger must be the smaller's, bit for bit, across the split.
TEST(InitialValue, ThreadsDrawTheSameStreamAsOne) {
  const ParamSpec small{.name = "layers.0.fc1.weight", .rows = 8'000'000, .cols = 1, .init = Init::normal, .std = 0.02};
  ParamSpec large = small;
  large.rows = 12'000'000;
  const Mat a = initial_value(small, 7);
  const Mat b = initial_value(large, 7);
  ASSERT_EQ(a.size(), 8'000'000);
  Index differ = 0;
  for (Index i = 0; i < a.size(); ++i) differ += a.data()[i] != b.data()[i] ? 1 : 0;
  EXPECT_EQ(differ, 0);
  // Another seed or name is another stream.
  EXPECT_NE(initial_value(small, 8).data()[0], a.data()[0]);
  double sum_sq = 0;
  for (Index i = 0; i < b.size(); ++i) sum_sq += double{b.data()[i]} * b.data()[i];
  EXPECT_NEAR(std::sqrt(sum_sq / static_cast<double>(b.size())), 0.02, 0.02 * 1e-3);
}

}  // namespace
}  // namespace meshwork::exec
