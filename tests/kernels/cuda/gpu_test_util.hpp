#pragma once
// Shared by the CUDA kernel tests: skipping without a GPU, seeded inputs rounded to what the
// element type holds, float/bf16 uploads and downloads, and the relative-error check every
// GPU result goes through (NaN or Inf anywhere fails it).

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <iostream>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda/device_buffer.hpp"
#include "kernels/tensor.hpp"

namespace meshwork::kernels::cuda::gpu_test {

// True when the CUDA runtime finds at least one device. A failed query (no driver, no
// device) is not an error here: the test is skipped, as CPU-only runs skip the `gpu` label.
inline bool gpu_available() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error so it does not surface in a later check
    return false;
  }
  return devices > 0;
}

}  // namespace meshwork::kernels::cuda::gpu_test

// First statement of every GPU test body.
#define MESHWORK_REQUIRE_GPU()                                                   \
  do {                                                                           \
    if (!::meshwork::kernels::cuda::gpu_test::gpu_available())                   \
      GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount failed or found none"; \
  } while (0)

namespace meshwork::kernels::cuda::gpu_test {

// The element types every kernel is instantiated for, named in test names.
using ElementTypes = ::testing::Types<float, __nv_bfloat16>;
struct ElementTypeNames {
  template <class T>
  static std::string GetName(int /*index*/) {
    return std::is_same_v<T, float> ? "float" : "bf16";
  }
};

inline float to_host_float(float x) { return x; }
inline float to_host_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
T from_host_float(float x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else
    return __float2bfloat16(x);  // round to nearest even, as the kernels store
}

// Values uniform in [lo, hi) from `rng`; every test seeds its own generator.
inline std::vector<float> random_values(std::size_t count, std::mt19937_64& rng, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<float> v(count);
  for (float& x : v) x = static_cast<float>(u(rng));
  return v;
}

// v rounded to what a T holds (identity for float): the exact inputs the GPU sees, so the
// double reference starts from the same numbers and only the kernel's own error is measured.
template <class T>
std::vector<float> rounded_to(std::vector<float> v) {
  for (float& x : v) x = to_host_float(from_host_float<T>(x));
  return v;
}

template <class T>
DeviceBuffer<T> upload(const std::vector<float>& host) {
  std::vector<T> converted(host.size());
  for (std::size_t i = 0; i < host.size(); ++i) converted[i] = from_host_float<T>(host[i]);
  return DeviceBuffer<T>(std::span<const T>(converted));
}

template <class T>
std::vector<float> download(const DeviceBuffer<T>& device) {
  const std::vector<T> host = device.download();
  std::vector<float> out(host.size());
  for (std::size_t i = 0; i < host.size(); ++i) out[i] = to_host_float(host[i]);
  return out;
}

// Host data as the CPU references' double matrices (row-major, as the kernels' layout).
inline Mat<double> as_mat(const std::vector<float>& v, Index rows, Index cols) {
  Mat<double> m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = v[static_cast<std::size_t>(i)];
  return m;
}
inline Vec<double> as_vec(const std::vector<float>& v) {
  Vec<double> m(static_cast<Index>(v.size()));
  for (Index i = 0; i < m.size(); ++i) m(i) = v[static_cast<std::size_t>(i)];
  return m;
}

// ||gpu - ref||_2 / ||ref||_2 in double (||gpu||_2 when ref is all zeros), or NaN when either
// side holds a NaN or an infinity: a non-finite value never compares as close.
inline double relative_l2_error(std::span<const float> gpu, std::span<const double> ref) {
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < gpu.size() && i < ref.size(); ++i) {
    if (!std::isfinite(gpu[i]) || !std::isfinite(ref[i])) return std::nan("");
    const double d = static_cast<double>(gpu[i]) - ref[i];
    diff += d * d;
    norm += ref[i] * ref[i];
  }
  return norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// Fails (non-fatally) unless the sizes match and relative_l2_error <= bound; written as
// !(err <= bound) so that a NaN error fails. Prints the error either way.
inline void expect_close(std::span<const float> gpu, std::span<const double> ref, double bound,
                         const std::string& what) {
  if (gpu.size() != ref.size()) {
    ADD_FAILURE() << what << ": GPU gave " << gpu.size() << " values, the reference " << ref.size();
    return;
  }
  const double err = relative_l2_error(gpu, ref);
  std::cout << "[ rel err  ] " << what << ": " << err << " (bound " << bound << ")\n";
  if (!(err <= bound)) ADD_FAILURE() << what << ": relative L2 error " << err << " exceeds " << bound;
}
inline void expect_close(std::span<const float> gpu, const Mat<double>& ref, double bound, const std::string& what) {
  expect_close(gpu, std::span<const double>(ref.data(), static_cast<std::size_t>(ref.size())), bound, what);
}
inline void expect_close(std::span<const float> gpu, const Vec<double>& ref, double bound, const std::string& what) {
  expect_close(gpu, std::span<const double>(ref.data(), static_cast<std::size_t>(ref.size())), bound, what);
}

// The relative L2 error allowed for an output stored in T, computed in fp32 from the same
// (already rounded) inputs as the double reference.
// float: fp32 rounding, 2^-24 ~ 6e-8 per operation, grown by reductions over at most a few
// hundred terms and by tanh/exp's couple of ulps: ~1e-6 in practice, 1e-5 leaves margin
// while any indexing or formula bug gives O(1).
// bf16: the output's one final rounding to 8 significant bits is up to 2^-8 ~ 3.9e-3 relative
// per element (~2e-3 in L2 over many elements): 1e-2.
template <class T>
constexpr double kOutputBound = std::is_same_v<T, float> ? 1e-5 : 1e-2;

// For fp32 outputs (statistics, parameter gradients), which never pass through T: as float.
constexpr double kFloatOutputBound = 1e-5;

}  // namespace meshwork::kernels::cuda::gpu_test
