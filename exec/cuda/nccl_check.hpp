#pragma once
// Every NCCL call is checked: a failure throws kernels::cuda::CudaError naming the call, the
// file and the line, NCCL's description of the result code (ncclGetErrorString) and, given
// the communicator, NCCL's own message about what went wrong (ncclGetLastError, NCCL 2.13+).
// ncclInProgress is a failure here: calls on a non-blocking communicator go through
// NcclGroup, which waits for them under its watchdog instead (nccl_group.hpp).
// (MESHWORK_CUBLAS_CHECK is in cublas_check.hpp, so that the GEMM needs no NCCL header.)

#include <nccl.h>

#include <string>

#include "kernels/cuda/cuda_check.hpp"

namespace meshwork::exec::cuda {

// "ncclSystemError (unhandled system error ...): <NCCL's last message>"
inline std::string nccl_error_text(ncclResult_t r, ncclComm_t comm) {
  std::string text = ncclGetErrorString(r);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text += std::string(": ") + last;
#else
  (void)comm;
#endif
  return text;
}

inline void check_nccl(ncclResult_t r, ncclComm_t comm, const char* file, int line, const char* call) {
  if (r != ncclSuccess) kernels::cuda::fail(file, line, call, nccl_error_text(r, comm));
}

}  // namespace meshwork::exec::cuda

// MESHWORK_NCCL_CHECK(ncclGetUniqueId(&id)); with a communicator at hand,
// MESHWORK_NCCL_CHECK_COMM(ncclAllReduce(..., comm, stream), comm) adds NCCL's last message.
#define MESHWORK_NCCL_CHECK(call) ::meshwork::exec::cuda::check_nccl((call), nullptr, __FILE__, __LINE__, #call)
#define MESHWORK_NCCL_CHECK_COMM(call, comm) ::meshwork::exec::cuda::check_nccl((call), (comm), __FILE__, __LINE__, #call)
