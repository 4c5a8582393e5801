// The CUDA bias_gelu against kernels/gelu.hpp in double, for float and bf16 tensors.
#include "kernels/cuda/gelu.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <utility>

#include "kernels/gelu.hpp"
#include "tests/kernels/cuda/gpu_test_util.hpp"

namespace meshwork::kernels::cuda {
namespace {

using namespace gpu_test;

template <class T>
class BiasGelu : public ::testing::Test {};
TYPED_TEST_SUITE(BiasGelu, ElementTypes, ElementTypeNames);

TYPED_TEST(BiasGelu, MatchesTheCpuReference) {
  MESHWORK_REQUIRE_GPU();
  using T = TypeParam;
  std::mt19937_64 rng(101);
  // A single value, rows narrower than a warp, a column count that is not a multiple of 32,
  // and more rows than one row block (row_blocks_for: 32 rows at least per block).
  for (const auto& [rows, cols] : {std::pair<Index, Index>{1, 1}, {3, 31}, {37, 64}, {130, 257}}) {
    SCOPED_TRACE(shape_of(rows, cols));
    const auto n = static_cast<std::size_t>(rows * cols);
    const auto x = rounded_to<T>(random_values(n, rng, -4.0, 4.0));  // both tails of the tanh
    const auto bias = rounded_to<T>(random_values(static_cast<std::size_t>(cols), rng));
    const auto dy = rounded_to<T>(random_values(n, rng));
    DeviceBuffer<T> x_d = upload<T>(x), bias_d = upload<T>(bias), dy_d = upload<T>(dy), y_d(n), dx_d(n);
    DeviceBuffer<float> dbias_d(static_cast<std::size_t>(cols));
    cuda::bias_gelu_forward<T>(x_d.data(), bias_d.data(), y_d.data(), rows, cols, nullptr);
    cuda::bias_gelu_backward<T>(dy_d.data(), x_d.data(), bias_d.data(), dx_d.data(), dbias_d.data(), rows, cols,
                                nullptr);
    const Mat<double> x_ref = as_mat(x, rows, cols);
    const Vec<double> bias_ref = as_vec(bias);
    expect_close(download(y_d), kernels::bias_gelu_forward<double>(x_ref, bias_ref), kOutputBound<T>, "y");
    const auto grads = kernels::bias_gelu_backward<double>(as_mat(dy, rows, cols), x_ref, bias_ref);
    expect_close(download(dx_d), grads.dx, kOutputBound<T>, "dx");
    // dbias sums fp32 dx before its rounding to T, over at most 130 rows: fp32 bound for both.
    expect_close(dbias_d.download(), grads.dbias, kFloatOutputBound, "dbias");
  }
}

TYPED_TEST(BiasGelu, NullBiasMeansNoBias) {
  MESHWORK_REQUIRE_GPU();
  using T = TypeParam;
  std::mt19937_64 rng(102);
  const Index rows = 5, cols = 40;
  const auto x = rounded_to<T>(random_values(rows * cols, rng, -3.0, 3.0));
  DeviceBuffer<T> x_d = upload<T>(x), y_d(x.size());
  cuda::bias_gelu_forward<T>(x_d.data(), nullptr, y_d.data(), rows, cols, nullptr);
  expect_close(download(y_d), kernels::bias_gelu_forward<double>(as_mat(x, rows, cols), Vec<double>::Zero(cols)),
               kOutputBound<T>, "y");
}

TYPED_TEST(BiasGelu, NaNInXReachesYDxAndDbias) {
  MESHWORK_REQUIRE_GPU();
  using T = TypeParam;
  const Index rows = 4, cols = 33;
  std::vector<float> x(static_cast<std::size_t>(rows * cols), 0.5f);
  x[static_cast<std::size_t>(2 * cols + 32)] = std::nanf("");
  DeviceBuffer<T> x_d = upload<T>(x), dy_d = upload<T>(std::vector<float>(x.size(), 1.0f)), y_d(x.size()),
                  dx_d(x.size());
  DeviceBuffer<float> dbias_d(static_cast<std::size_t>(cols));
  cuda::bias_gelu_forward<T>(x_d.data(), nullptr, y_d.data(), rows, cols, nullptr);
  cuda::bias_gelu_backward<T>(dy_d.data(), x_d.data(), nullptr, dx_d.data(), dbias_d.data(), rows, cols, nullptr);
  const auto at = static_cast<std::size_t>(2 * cols + 32);
  EXPECT_TRUE(std::isnan(download(y_d)[at]));
  EXPECT_TRUE(std::isnan(download(dx_d)[at]));
  const auto dbias = dbias_d.download();
  EXPECT_TRUE(std::isnan(dbias[32]));
  EXPECT_FALSE(std::isnan(dbias[31])) << "only the NaN's column";
}

TEST(BiasGeluShapes, RejectNegativeShapesBeforeLaunching) {
  // Checked on the host, before any CUDA call: runs without a GPU.
  EXPECT_THROW(cuda::bias_gelu_forward<float>(nullptr, nullptr, nullptr, -1, 4, nullptr), std::invalid_argument);
  EXPECT_THROW(cuda::bias_gelu_backward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, 2, -3, nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace meshwork::kernels::cuda
