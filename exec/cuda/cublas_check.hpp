#pragma once
// Every cuBLASLt call is checked: a failure throws kernels::cuda::CudaError naming the call,
// the file and the line, and cuBLAS's own name and description of the status. The strings
// come from cublasLtGetStatusName/String (cublasLt.h), the same text as cublasGetStatusString
// without linking libcublas for it.

#include <cublasLt.h>

#include <string>

#include "kernels/cuda/cuda_check.hpp"

namespace meshwork::exec::cuda {

inline void check_cublas(cublasStatus_t s, const char* file, int line, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    kernels::cuda::fail(file, line, call, std::string(cublasLtGetStatusName(s)) + " (" + cublasLtGetStatusString(s) + ")");
  }
}

}  // namespace meshwork::exec::cuda

// MESHWORK_CUBLAS_CHECK(cublasLtMatmul(...));
#define MESHWORK_CUBLAS_CHECK(call) ::meshwork::exec::cuda::check_cublas((call), __FILE__, __LINE__, #call)
