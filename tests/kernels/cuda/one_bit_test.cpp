// The CUDA 1-bit compression against kernels/one_bit.hpp in float: the same sign bits, the
// same scale (to its last bit, within the documented reduction bound), the same residual.
#include "kernels/cuda/one_bit.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "kernels/one_bit.hpp"
#include "tests/kernels/cuda/gpu_test_util.hpp"

namespace meshwork::kernels::cuda {
namespace {

using namespace gpu_test;

// The GPU sums |compensated| in double in another order than the CPU; the two sums differ by
// ~count * 2^-53 relative, so their fp32 means agree unless the exact mean lies that close to
// an fp32 rounding boundary: then they are adjacent floats. Equal or one ulp apart.
void expect_same_scale(float gpu, float cpu) {
  EXPECT_TRUE(gpu == cpu || gpu == std::nextafter(cpu, INFINITY) || gpu == std::nextafter(cpu, -INFINITY))
      << "GPU scale " << gpu << ", CPU scale " << cpu;
}

template <class T>
class OneBit : public ::testing::Test {};
TYPED_TEST_SUITE(OneBit, ElementTypes, ElementTypeNames);

TYPED_TEST(OneBit, CompressionMatchesTheCpuReferenceOverSteps) {
  MESHWORK_REQUIRE_GPU();
  using T = TypeParam;
  std::mt19937_64 rng(901);
  // Partial words, one exact word, just past it, and more values than the 1024 x 256 threads
  // of the compress grid (so threads stride).
  for (const std::size_t count : {std::size_t{1}, std::size_t{63}, std::size_t{64}, std::size_t{65},
                                  std::size_t{1000}, std::size_t{300001}}) {
    SCOPED_TRACE("count " + std::to_string(count));
    const auto n = static_cast<std::int64_t>(count);
    const auto words = static_cast<std::size_t>(one_bit_words(n));
    DeviceBuffer<float> error_d(count), scale_d(1);
    error_d.zero();
    DeviceBuffer<std::uint64_t> signs_d(words);
    DeviceBuffer<T> out_d(count);
    std::vector<float> error_ref(count, 0.0f);
    for (int step = 0; step < 3; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      auto grad = rounded_to<T>(random_values(count, rng));
      if (count > 10) grad[3] = -0.0f;  // compensated -0 + e: the sign follows IEEE addition on both sides
      DeviceBuffer<T> grad_d = upload<T>(grad);
      cuda::one_bit_compress<T>(grad_d.data(), error_d.data(), signs_d.data(), scale_d.data(), n, nullptr);
      cuda::one_bit_decompress<T>(signs_d.data(), scale_d.data(), out_d.data(), n, nullptr);
      const auto ref = kernels::one_bit_compress<float>(grad, error_ref);

      EXPECT_EQ(signs_d.download(), ref.sign_bits) << "sign bits, padding included";
      const float scale = scale_d.download()[0];
      expect_same_scale(scale, ref.scale);
      const auto error = error_d.download();
      if (scale == ref.scale) {
        EXPECT_EQ(error, error_ref) << "same scale: the residual is the same fp32 subtraction";
      } else {
        expect_close(error, std::vector<double>(error_ref.begin(), error_ref.end()), 1e-6, "residual");
        error_d.upload(error_ref);  // continue from the CPU's state so later steps compare exactly
      }
      // Decompression: +-scale by sign bit, rounded to T.
      const auto out = download(out_d);
      const auto signs = signs_d.download();
      const float scale_t = to_host_float(from_host_float<T>(scale));
      for (std::size_t i = 0; i < count; ++i) {
        const bool negative = ((signs[i / 64] >> (i % 64)) & 1U) != 0U;
        ASSERT_EQ(out[i], negative ? -scale_t : scale_t) << "index " << i;
      }
    }
  }
}

TYPED_TEST(OneBit, NaNMakesTheScaleAndEveryDecompressedValueNaN) {
  MESHWORK_REQUIRE_GPU();
  using T = TypeParam;
  DeviceBuffer<T> grad_d = upload<T>({std::nanf(""), 0.5f, -0.25f});
  DeviceBuffer<float> error_d(3), scale_d(1);
  error_d.zero();
  DeviceBuffer<std::uint64_t> signs_d(1);
  DeviceBuffer<T> out_d(3);
  cuda::one_bit_compress<T>(grad_d.data(), error_d.data(), signs_d.data(), scale_d.data(), 3, nullptr);
  cuda::one_bit_decompress<T>(signs_d.data(), scale_d.data(), out_d.data(), 3, nullptr);
  EXPECT_TRUE(std::isnan(scale_d.download()[0]));
  for (const float x : download(out_d)) EXPECT_TRUE(std::isnan(x)) << "the scale is NaN, not a sign";
  // Bits of the finite values: +0.5 positive, -0.25 negative. (A NaN's own sign bit is not
  // pinned: GPU arithmetic returns the canonical NaN, x86 the operand's.)
  EXPECT_EQ((signs_d.download()[0] >> 1) & 3U, 2U);
}

TEST(OneBitEmpty, ScaleIsZero) {
  MESHWORK_REQUIRE_GPU();
  DeviceBuffer<float> scale_d = upload<float>({7.0f});
  cuda::one_bit_compress<float>(nullptr, nullptr, nullptr, scale_d.data(), 0, nullptr);
  EXPECT_EQ(scale_d.download()[0], 0.0f);
}

}  // namespace
}  // namespace meshwork::kernels::cuda
