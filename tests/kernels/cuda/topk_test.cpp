// The CUDA top-k against kernels/topk.hpp in float: the same indices (ties to the lower index,
// NaN ranking as infinity), the same values and the same residual, exactly.
#include "kernels/cuda/topk.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "kernels/topk.hpp"
#include "tests/kernels/cuda/gpu_test_util.hpp"

namespace meshwork::kernels::cuda {
namespace {

using namespace gpu_test;

// Equal bits, or both NaN: NaN payloads may differ (GPU arithmetic returns the canonical NaN,
// x86 propagates the operand's), and the CPU reference does not pin them.
bool same_value(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

void expect_same_values(const std::vector<float>& gpu, const std::vector<float>& cpu, const char* what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  for (std::size_t i = 0; i < gpu.size(); ++i)
    ASSERT_TRUE(same_value(gpu[i], cpu[i])) << what << "[" << i << "]: GPU " << gpu[i] << ", CPU " << cpu[i];
}

// Runs `steps` compressions of fresh gradients from `make_grad` on both sides, error fed back.
template <class T, class MakeGrad>
void expect_same_selection(std::size_t count, std::size_t k, int steps, MakeGrad make_grad) {
  SCOPED_TRACE("count " + std::to_string(count) + " k " + std::to_string(k));
  DeviceBuffer<float> error_d(count), values_d(k);
  error_d.zero();
  DeviceBuffer<std::int64_t> indices_d(k);
  std::vector<float> error_ref(count, 0.0f);
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const auto grad = rounded_to<T>(make_grad(count));
    DeviceBuffer<T> grad_d = upload<T>(grad);
    cuda::topk_compress<T>(grad_d.data(), error_d.data(), indices_d.data(), values_d.data(),
                           static_cast<std::int64_t>(count), static_cast<std::int64_t>(k), nullptr);
    const auto ref = kernels::topk_compress<float>(grad, error_ref, k);
    EXPECT_EQ(indices_d.download(), ref.indices);
    expect_same_values(values_d.download(), ref.values, "values");
    expect_same_values(error_d.download(), error_ref, "error");
  }
}

template <class T>
class TopK : public ::testing::Test {};
TYPED_TEST_SUITE(TopK, ElementTypes, ElementTypeNames);

TYPED_TEST(TopK, RandomGradientsSelectWhatTheCpuSelects) {
  MESHWORK_REQUIRE_GPU();
  using T = TypeParam;
  std::mt19937_64 rng(1001);
  const auto random_grad = [&](std::size_t n) { return random_values(n, rng); };
  for (const auto& [count, k] : {std::pair<std::size_t, std::size_t>{1, 0}, {1, 1}, {100, 7}, {1000, 1000},
                                 {100003, 1000}})
    expect_same_selection<T>(count, k, 3, random_grad);
}

TYPED_TEST(TopK, TiesGoToTheLowerIndexAndNaNRanksAsInfinity) {
  MESHWORK_REQUIRE_GPU();
  using T = TypeParam;
  std::mt19937_64 rng(1002);
  // A handful of magnitudes, both signs, +-0, +-inf and NaN: almost every comparison is a tie.
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const std::vector<float> palette = {-1.0f, -0.5f, -0.0f, 0.0f, 0.5f, 1.0f, kInf, -kInf, std::nanf("")};
  std::uniform_int_distribution<std::size_t> pick(0, palette.size() - 1);
  const auto tied_grad = [&](std::size_t n) {
    std::vector<float> g(n);
    for (float& x : g) x = palette[pick(rng)];
    return g;
  };
  for (const std::size_t k : {std::size_t{1}, std::size_t{50}, std::size_t{333}, std::size_t{999}})
    expect_same_selection<T>(1000, k, 2, tied_grad);
}

TEST(TopKArguments, KBeyondCountThrows) {
  EXPECT_THROW(cuda::topk_compress<float>(nullptr, nullptr, nullptr, nullptr, 3, 4, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace meshwork::kernels::cuda
