#pragma once
// Every CUDA runtime and cuBLAS call is checked: a failure throws CudaError naming the call,
// the file and the line, and the library's own description of the error. Library code throws;
// the CLI and the tests decide what a failure means.

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace meshwork::kernels::cuda {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "file:line: call failed: what", the message of every checked call.
[[noreturn]] inline void fail(const char* file, int line, const char* call, const std::string& what) {
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + what);
}

inline void check_cuda(cudaError_t e, const char* file, int line, const char* call) {
  if (e != cudaSuccess) fail(file, line, call, std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")");
}

}  // namespace meshwork::kernels::cuda

// MESHWORK_CUDA_CHECK(cudaMalloc(&p, n)); also after a kernel launch as
// MESHWORK_CUDA_CHECK(cudaGetLastError()).
#define MESHWORK_CUDA_CHECK(call) ::meshwork::kernels::cuda::check_cuda((call), __FILE__, __LINE__, #call)
