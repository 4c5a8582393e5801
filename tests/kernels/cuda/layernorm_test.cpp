// The CUDA LayerNorm against kernels/layernorm.hpp in double, for float and bf16 tensors.
#include "kernels/cuda/layernorm.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <utility>

#include "kernels/layernorm.hpp"
#include "tests/kernels/cuda/gpu_test_util.hpp"

namespace meshwork::kernels::cuda {
namespace {

using namespace gpu_test;

template <class T>
class LayerNorm : public ::testing::Test {};
TYPED_TEST_SUITE(LayerNorm, ElementTypes, ElementTypeNames);

TYPED_TEST(LayerNorm, MatchesTheCpuReference) {
  MESHWORK_REQUIRE_GPU();
  using T = TypeParam;
  constexpr float kEps = 1e-5f;
  std::mt19937_64 rng(301);
  // A one-feature row (variance 0: y = beta), rows narrower than a warp, non-multiples of 32,
  // and more rows than one dgamma row block.
  for (const auto& [rows, cols] : {std::pair<Index, Index>{1, 1}, {3, 7}, {33, 100}, {130, 1000}}) {
    SCOPED_TRACE(shape_of(rows, cols));
    const auto n = static_cast<std::size_t>(rows * cols);
    // An offset mean (2) larger than the spread, where a one-pass variance would cancel.
    const auto x = rounded_to<T>(random_values(n, rng, 1.0, 3.0));
    const auto gamma = rounded_to<T>(random_values(static_cast<std::size_t>(cols), rng, 0.5, 1.5));
    const auto beta = rounded_to<T>(random_values(static_cast<std::size_t>(cols), rng));
    const auto dy = rounded_to<T>(random_values(n, rng));
    DeviceBuffer<T> x_d = upload<T>(x), gamma_d = upload<T>(gamma), beta_d = upload<T>(beta), dy_d = upload<T>(dy),
                    y_d(n), dx_d(n);
    DeviceBuffer<float> mean_d(static_cast<std::size_t>(rows)), rstd_d(static_cast<std::size_t>(rows)),
        dgamma_d(static_cast<std::size_t>(cols)), dbeta_d(static_cast<std::size_t>(cols));
    cuda::layernorm_forward<T>(x_d.data(), gamma_d.data(), beta_d.data(), y_d.data(), mean_d.data(), rstd_d.data(),
                               rows, cols, kEps, nullptr);
    cuda::layernorm_backward<T>(dy_d.data(), x_d.data(), gamma_d.data(), mean_d.data(), rstd_d.data(), dx_d.data(),
                                dgamma_d.data(), dbeta_d.data(), rows, cols, nullptr);
    const Mat<double> x_ref = as_mat(x, rows, cols);
    const Vec<double> gamma_ref = as_vec(gamma);
    const auto f = kernels::layernorm_forward<double>(x_ref, gamma_ref, as_vec(beta), kEps);
    expect_close(download(y_d), f.y, kOutputBound<T>, "y");
    expect_close(mean_d.download(), f.mean, kFloatOutputBound, "mean");
    expect_close(rstd_d.download(), f.rstd, kFloatOutputBound, "rstd");
    const auto g = kernels::layernorm_backward<double>(as_mat(dy, rows, cols), x_ref, gamma_ref, f.mean, f.rstd);
    expect_close(download(dx_d), g.dx, kOutputBound<T>, "dx");
    expect_close(dgamma_d.download(), g.dgamma, kFloatOutputBound, "dgamma");
    expect_close(dbeta_d.download(), g.dbeta, kFloatOutputBound, "dbeta");
  }
}

TYPED_TEST(LayerNorm, ParameterGradientsAreTheSameBitsOnEveryRun) {
  MESHWORK_REQUIRE_GPU();
  using T = TypeParam;
  std::mt19937_64 rng(302);
  const Index rows = 1000, cols = 96;  // 32 row blocks of partials
  const auto n = static_cast<std::size_t>(rows * cols);
  DeviceBuffer<T> x_d = upload<T>(random_values(n, rng)), dy_d = upload<T>(random_values(n, rng)),
                  gamma_d = upload<T>(random_values(static_cast<std::size_t>(cols), rng)), dx_d(n);
  DeviceBuffer<float> mean_d = upload<float>(random_values(static_cast<std::size_t>(rows), rng)),
                      rstd_d = upload<float>(random_values(static_cast<std::size_t>(rows), rng, 0.5, 2.0)),
                      dgamma_d(static_cast<std::size_t>(cols)), dbeta_d(static_cast<std::size_t>(cols));
  std::vector<float> first_dgamma, first_dbeta;
  for (int run = 0; run < 3; ++run) {
    cuda::layernorm_backward<T>(dy_d.data(), x_d.data(), gamma_d.data(), mean_d.data(), rstd_d.data(), dx_d.data(),
                                dgamma_d.data(), dbeta_d.data(), rows, cols, nullptr);
    if (run == 0) {
      first_dgamma = dgamma_d.download();
      first_dbeta = dbeta_d.download();
    } else {
      EXPECT_EQ(dgamma_d.download(), first_dgamma) << "run " << run;
      EXPECT_EQ(dbeta_d.download(), first_dbeta) << "run " << run;
    }
  }
}

TYPED_TEST(LayerNorm, NaNMakesItsRowNaNAndOnlyIt) {
  MESHWORK_REQUIRE_GPU();
  using T = TypeParam;
  const Index rows = 3, cols = 40;
  std::vector<float> x(static_cast<std::size_t>(rows * cols), 0.5f);
  for (Index c = 0; c < cols; ++c) x[static_cast<std::size_t>(c)] = static_cast<float>(c);  // row 0 not constant
  x[static_cast<std::size_t>(1 * cols + 2)] = std::nanf("");
  DeviceBuffer<T> x_d = upload<T>(x), gamma_d = upload<T>(std::vector<float>(cols, 1.0f)),
                  beta_d = upload<T>(std::vector<float>(cols, 0.0f)), y_d(x.size());
  DeviceBuffer<float> mean_d(static_cast<std::size_t>(rows)), rstd_d(static_cast<std::size_t>(rows));
  cuda::layernorm_forward<T>(x_d.data(), gamma_d.data(), beta_d.data(), y_d.data(), mean_d.data(), rstd_d.data(), rows,
                             cols, 1e-5f, nullptr);
  const auto y = download(y_d);
  for (Index c = 0; c < cols; ++c) {
    EXPECT_TRUE(std::isnan(y[static_cast<std::size_t>(1 * cols + c)])) << "column " << c;
    EXPECT_FALSE(std::isnan(y[static_cast<std::size_t>(c)])) << "column " << c;
  }
  EXPECT_TRUE(std::isnan(mean_d.download()[1]));
}

TEST(LayerNormShapes, RejectRowsWithoutFeatures) {
  EXPECT_THROW(cuda::layernorm_forward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 4, 0, 1e-5f,
                                              nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace meshwork::kernels::cuda
