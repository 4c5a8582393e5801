// The CUDA SwiGLU against kernels/swiglu.hpp in double, for float and bf16 tensors.
#include "kernels/cuda/swiglu.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <utility>

#include "kernels/swiglu.hpp"
#include "tests/kernels/cuda/gpu_test_util.hpp"

namespace meshwork::kernels::cuda {
namespace {

using namespace gpu_test;

template <class T>
class SwiGlu : public ::testing::Test {};
TYPED_TEST_SUITE(SwiGlu, ElementTypes, ElementTypeNames);

TYPED_TEST(SwiGlu, MatchesTheCpuReference) {
  MESHWORK_REQUIRE_GPU();
  using T = TypeParam;
  std::mt19937_64 rng(201);
  for (const auto& [rows, ffn] : {std::pair<Index, Index>{1, 1}, {2, 31}, {17, 64}, {70, 300}, {3, 2056}}) {
    SCOPED_TRACE(shape_of(rows, 2 * ffn));
    const auto gate_up = rounded_to<T>(random_values(static_cast<std::size_t>(rows * 2 * ffn), rng, -5.0, 5.0));
    const auto dy = rounded_to<T>(random_values(static_cast<std::size_t>(rows * ffn), rng));
    DeviceBuffer<T> gate_up_d = upload<T>(gate_up), dy_d = upload<T>(dy), y_d(dy.size()), dgate_up_d(gate_up.size());
    cuda::swiglu_forward<T>(gate_up_d.data(), y_d.data(), rows, ffn, nullptr);
    cuda::swiglu_backward<T>(dy_d.data(), gate_up_d.data(), dgate_up_d.data(), rows, ffn, nullptr);
    const Mat<double> gate_up_ref = as_mat(gate_up, rows, 2 * ffn);
    expect_close(download(y_d), kernels::swiglu_forward<double>(gate_up_ref), kOutputBound<T>, "y");
    expect_close(download(dgate_up_d), kernels::swiglu_backward<double>(as_mat(dy, rows, ffn), gate_up_ref),
                 kOutputBound<T>, "dgate_up");
  }
}

TYPED_TEST(SwiGlu, NaNInTheUpHalfReachesTheOutput) {
  MESHWORK_REQUIRE_GPU();
  using T = TypeParam;
  const Index rows = 3, ffn = 5;
  std::vector<float> gate_up(static_cast<std::size_t>(rows * 2 * ffn), 0.5f);
  gate_up[static_cast<std::size_t>(1 * 2 * ffn + ffn + 2)] = std::nanf("");  // row 1, up column 2
  DeviceBuffer<T> gate_up_d = upload<T>(gate_up), y_d(static_cast<std::size_t>(rows * ffn));
  cuda::swiglu_forward<T>(gate_up_d.data(), y_d.data(), rows, ffn, nullptr);
  const auto y = download(y_d);
  EXPECT_TRUE(std::isnan(y[static_cast<std::size_t>(1 * ffn + 2)]));
  EXPECT_FALSE(std::isnan(y[static_cast<std::size_t>(1 * ffn + 1)]));
}

}  // namespace
}  // namespace meshwork::kernels::cuda
