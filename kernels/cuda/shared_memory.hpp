#pragma once
// Dynamic shared memory beyond the default 48 KiB per block must be opted into per kernel
// (CUDA C++ Programming Guide, "Shared Memory", compute capability 7.x+). A request larger
// than the device allows is an argument error (a shape too big for the kernel), not a CUDA one.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "kernels/cuda/argument_check.hpp"
#include "kernels/cuda/cuda_check.hpp"

namespace meshwork::kernels::cuda {

// Lets `kernel` (a __global__ function) launch with `bytes` of dynamic shared memory on the
// current device, or throws std::invalid_argument naming `op` and `what` (the shape).
template <class Kernel>
void reserve_dynamic_shared_memory(Kernel* kernel, std::size_t bytes, std::string_view op, const std::string& what) {
  const auto* func = reinterpret_cast<const void*>(kernel);
  int device = 0;
  MESHWORK_CUDA_CHECK(cudaGetDevice(&device));
  int optin_bytes = 0;
  MESHWORK_CUDA_CHECK(cudaDeviceGetAttribute(&optin_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cudaFuncAttributes attributes{};
  MESHWORK_CUDA_CHECK(cudaFuncGetAttributes(&attributes, func));
  const std::size_t available = static_cast<std::size_t>(optin_bytes) - attributes.sharedSizeBytes;
  require(bytes <= available, op,
          what + " needs " + std::to_string(bytes) + " bytes of shared memory per block; the device allows " +
              std::to_string(available));
  MESHWORK_CUDA_CHECK(cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace meshwork::kernels::cuda
