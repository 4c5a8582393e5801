// The CUDA AdamW step against kernels/adamw.hpp in double, with fp32 and bf16 gradients.
#include "kernels/cuda/adamw.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "tests/kernels/cuda/gpu_test_util.hpp"

namespace meshwork::kernels::cuda {
namespace {

using namespace gpu_test;

std::vector<double> widened(const std::vector<float>& v) { return {v.begin(), v.end()}; }

template <class T>
class AdamW : public ::testing::Test {};
TYPED_TEST_SUITE(AdamW, ElementTypes, ElementTypeNames);

TYPED_TEST(AdamW, StepsMatchTheCpuReference) {
  MESHWORK_REQUIRE_GPU();
  using G = TypeParam;
  std::mt19937_64 rng(801);
  const AdamWHyperparams hp{.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  for (const std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{70001}}) {
    SCOPED_TRACE("count " + std::to_string(count));
    std::vector<float> params = random_values(count, rng);
    DeviceBuffer<float> params_d = upload<float>(params), m_d(count), v_d(count);
    DeviceBuffer<__nv_bfloat16> params_bf16_d(count);
    m_d.zero();
    v_d.zero();
    std::vector<double> params_ref = widened(params), m_ref(count, 0.0), v_ref(count, 0.0);
    // Three steps (bias corrections of t = 1, 2, 3), each with fresh gradients of mixed scale.
    for (std::int64_t step = 1; step <= 3; ++step) {
      const auto grads = rounded_to<G>(random_values(count, rng, -2.0, 2.0));
      DeviceBuffer<G> grads_d = upload<G>(grads);
      cuda::adamw_step<G>(params_d.data(), grads_d.data(), m_d.data(), v_d.data(), params_bf16_d.data(),
                          static_cast<std::int64_t>(count), step, hp, nullptr);
      kernels::adamw_step<double>(params_ref, widened(grads), m_ref, v_ref, step, hp);
    }
    // fp32 state updated by IEEE single operations (no FMA contraction) in the CPU's order:
    // each step adds a few fp32 roundings, 2^-24 ~ 6e-8 relative. The hyperparameters are
    // rounded to fp32 as the CPU's float instantiation rounds them, and 1 - 0.9f exceeds 0.1 by
    // 2.4e-7 relative (likewise 1 - 0.95f), which moves m and v by that much against double;
    // the update m_hat / sqrt(v_hat) moves by half of it. 1e-6 covers both after three steps.
    constexpr double kStateBound = 1e-6;
    const auto params_gpu = params_d.download();
    expect_close(params_gpu, params_ref, kStateBound, "params");
    expect_close(m_d.download(), m_ref, kStateBound, "exp_avg");
    expect_close(v_d.download(), v_ref, kStateBound, "exp_avg_sq");
    // The bf16 copy is the fp32 result rounded to nearest even: exactly.
    const auto copy = params_bf16_d.download();
    for (std::size_t i = 0; i < count; ++i) {
      const __nv_bfloat16 expected = __float2bfloat16(params_gpu[i]);
      ASSERT_EQ(std::memcmp(&copy[i], &expected, sizeof(expected)), 0) << "index " << i;
    }
  }
}

TYPED_TEST(AdamW, NaNGradientReachesItsParameterOnly) {
  MESHWORK_REQUIRE_GPU();
  using G = TypeParam;
  DeviceBuffer<float> params_d = upload<float>({1.0f, 2.0f}), m_d(2), v_d(2);
  m_d.zero();
  v_d.zero();
  DeviceBuffer<G> grads_d = upload<G>({std::nanf(""), 0.5f});
  cuda::adamw_step<G>(params_d.data(), grads_d.data(), m_d.data(), v_d.data(), nullptr, 2, 1, AdamWHyperparams{},
                      nullptr);
  const auto params = params_d.download();
  EXPECT_TRUE(std::isnan(params[0]));
  EXPECT_FALSE(std::isnan(params[1]));
}

TEST(AdamWArguments, RejectStepZero) {
  EXPECT_THROW(cuda::adamw_step<float>(nullptr, nullptr, nullptr, nullptr, nullptr, 4, 0, AdamWHyperparams{}, nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace meshwork::kernels::cuda
