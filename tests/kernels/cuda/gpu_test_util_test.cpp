// The checker every GPU test relies on: it must fail on NaN and Inf (a NaN error would pass a
// test written as err > bound), on a large error, and on a size mismatch. Needs no GPU.
#include "tests/kernels/cuda/gpu_test_util.hpp"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace meshwork::kernels::cuda::gpu_test {
namespace {

TEST(GpuTestUtil, RelativeErrorIsNaNForNonFiniteValues) {
  const std::vector<double> ref = {1.0, 2.0, 3.0};
  EXPECT_EQ(relative_l2_error(std::vector<float>{1.0f, 2.0f, 3.0f}, ref), 0.0);
  EXPECT_TRUE(std::isnan(relative_l2_error(std::vector<float>{1.0f, std::nanf(""), 3.0f}, ref)));
  EXPECT_TRUE(std::isnan(
      relative_l2_error(std::vector<float>{1.0f, std::numeric_limits<float>::infinity(), 3.0f}, ref)));
  EXPECT_TRUE(std::isnan(relative_l2_error(std::vector<float>{1.0f, 2.0f, 3.0f}, std::vector<double>{1.0, std::nan(""), 3.0})));
  // ||(0, 0, 0.3)|| / ||(1, 2, 3)|| = 0.3 / sqrt(14).
  EXPECT_NEAR(relative_l2_error(std::vector<float>{1.0f, 2.0f, 3.3f}, ref), 0.3 / std::sqrt(14.0), 1e-7);
}

TEST(GpuTestUtil, ExpectCloseFailsOnADeliberateNaN) {
  const std::vector<double> ref = {1.0, 2.0, 3.0};
  const std::vector<float> with_nan = {1.0f, std::nanf(""), 3.0f};
  EXPECT_NONFATAL_FAILURE(expect_close(with_nan, ref, 1e30, "deliberate NaN"), "relative L2 error nan");
  const std::vector<double> ref_with_nan = {1.0, std::nan(""), 3.0};
  EXPECT_NONFATAL_FAILURE(expect_close(std::vector<float>{1.0f, 2.0f, 3.0f}, ref_with_nan, 1e30, "NaN reference"),
                          "exceeds");
}

TEST(GpuTestUtil, ExpectCloseFailsOnLargeErrorsAndSizeMismatches) {
  const std::vector<double> ref = {1.0, 2.0, 3.0};
  EXPECT_NONFATAL_FAILURE(expect_close(std::vector<float>{1.0f, 2.0f, 4.0f}, ref, 1e-5, "off by one"), "exceeds");
  EXPECT_NONFATAL_FAILURE(expect_close(std::vector<float>{1.0f, 2.0f}, ref, 1e-5, "short"), "GPU gave 2 values");
  expect_close(std::vector<float>{1.0f, 2.0f, 3.0f}, ref, 0.0, "exact");  // passes: 0 <= 0
}

TEST(GpuTestUtil, RoundsToBf16AsTheKernelsStore) {
  // 1 + 2^-8 lies halfway between the bf16 neighbours 1 and 1 + 2^-7: ties go to even (1).
  EXPECT_EQ(rounded_to<__nv_bfloat16>({1.0f + 0x1p-8f, 1.0f + 0x1p-7f})[0], 1.0f);
  EXPECT_EQ(rounded_to<__nv_bfloat16>({1.0f + 0x1p-7f})[0], 1.0f + 0x1p-7f);
  EXPECT_EQ(rounded_to<float>({1.0f + 0x1p-20f})[0], 1.0f + 0x1p-20f);
}

}  // namespace
}  // namespace meshwork::kernels::cuda::gpu_test
