// AdamW: the first step and a constant-gradient run against their closed forms, and weight
// decay that is decoupled from the adaptive update.
#include "kernels/adamw.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace meshwork::kernels {
namespace {

const std::vector<float> kParams = {0.5f, -1.25f, 2.0f, 0.0f, -0.75f, 3.0f};
const std::vector<float> kGrads = {0.1f, -0.2f, 3.0f, -1e-3f, 1e-6f, -50.0f};

struct State {
  std::vector<float> params = kParams, m = std::vector<float>(kParams.size(), 0.0f), v = m;
  void step(const std::vector<float>& grads, std::int64_t t, const AdamWHyperparams& hp) {
    adamw_step<float>(params, grads, m, v, t, hp);
  }
};

TEST(AdamW, FirstStepIsTheClosedForm) {
  // Step 1 from m = v = 0: m_hat = g and v_hat = g^2 exactly in real arithmetic, so the update is
  // lr * (g / (|g| + eps) + wd * p0): about lr times the sign of g, whatever g's scale.
  const AdamWHyperparams hp{
      .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  State s;
  s.step(kGrads, 1, hp);
  for (std::size_t i = 0; i < kParams.size(); ++i) {
    const double g = kGrads[i], p0 = kParams[i];
    const double expected = p0 - hp.lr * (g / (std::abs(g) + hp.eps) + hp.weight_decay * p0);
    EXPECT_NEAR(s.params[i], expected, 1e-6 * std::max(1.0, std::abs(expected))) << i;
    EXPECT_FLOAT_EQ(s.m[i], static_cast<float>(0.1 * g)) << i;
    EXPECT_FLOAT_EQ(s.v[i], static_cast<float>(0.05 * g * g)) << i;
  }
  // |g| >> eps: a step of almost exactly lr against the gradient's sign (plus the decay).
  EXPECT_NEAR(s.params[5], 3.0 + 1e-2 - 1e-2 * 0.1 * 3.0, 1e-6);
  // |g| ~ 100 eps (entry 4, g = 1e-6): eps visibly damps the step, to lr / 1.01.
  EXPECT_NEAR(kParams[4] - s.params[4] - 1e-2 * 0.1 * kParams[4], 1e-2 / 1.01, 1e-7);
}

TEST(AdamW, BiasCorrectionMakesAConstantGradientTakeEqualSteps) {
  // With g constant, m_t = (1 - beta1^t) g and v_t = (1 - beta2^t) g^2, so m_hat = g and
  // v_hat = g^2 at every step: each step moves lr * g / (|g| + eps).
  const AdamWHyperparams hp{
      .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0};
  std::vector<double> p = {1.0, -2.0}, m = {0.0, 0.0}, v = {0.0, 0.0};
  const std::vector<double> g = {0.3, -4.0};
  const int steps = 50;
  for (int t = 1; t <= steps; ++t) adamw_step<double>(p, g, m, v, t, hp);
  for (std::size_t i = 0; i < p.size(); ++i)
    EXPECT_NEAR(p[i], (i == 0 ? 1.0 : -2.0) - steps * hp.lr * g[i] / (std::abs(g[i]) + hp.eps),
                1e-12)
        << i;
}

TEST(AdamW, WeightDecayIsDecoupledFromTheGradient) {
  const AdamWHyperparams with{
      .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
  AdamWHyperparams without = with;
  without.weight_decay = 0.0;
  // No gradient: the Adam update is 0 / (0 + eps) = 0 and only the decay acts.
  State idle;
  idle.step(std::vector<float>(kParams.size(), 0.0f), 1, with);
  for (std::size_t i = 0; i < kParams.size(); ++i) {
    EXPECT_FLOAT_EQ(idle.params[i], kParams[i] * (1.0f - 1e-3f)) << i;
    EXPECT_EQ(idle.m[i], 0.0f);  // decay never enters the moments
    EXPECT_EQ(idle.v[i], 0.0f);
  }
  // With a gradient of any scale the decay removes the same lr * wd * p: unlike an L2 term
  // added to g, it is not divided by sqrt(v_hat).
  for (const float grad_scale : {1.0f, 1000.0f}) {
    std::vector<float> grads = kGrads;
    for (float& g : grads) g *= grad_scale;
    State a, b;
    a.step(grads, 1, with);
    b.step(grads, 1, without);
    for (std::size_t i = 0; i < kParams.size(); ++i) {
      EXPECT_NEAR(b.params[i] - a.params[i], 1e-3 * kParams[i], 1e-6)
          << "scale " << grad_scale << " entry " << i;
      EXPECT_EQ(a.m[i], b.m[i]);
      EXPECT_EQ(a.v[i], b.v[i]);
    }
  }
}

TEST(AdamW, BadArgumentsThrowInvalidArgument) {
  State s;
  const AdamWHyperparams hp;
  EXPECT_THROW(s.step(kGrads, 0, hp), std::invalid_argument);  // steps are 1-based
  EXPECT_THROW(s.step(std::vector<float>(3, 0.0f), 1, hp), std::invalid_argument);
  AdamWHyperparams bad = hp;
  bad.beta2 = 1.0;  // 1 - beta2^t = 0: division by zero
  EXPECT_THROW(s.step(kGrads, 1, bad), std::invalid_argument);
}

}  // namespace
}  // namespace meshwork::kernels
