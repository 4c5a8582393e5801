// libmeshwork_cuda.so's entry point (exec/backend_module.hpp): make_cuda_rank, stamped with the
// build it comes from.
#include "exec/backend_module.hpp"
#include "exec/cuda/execute_cuda.hpp"

extern "C" __attribute__((visibility("default"))) const meshwork::exec::CudaBackendModule* meshwork_cuda_backend_module() {
  static const meshwork::exec::CudaBackendModule module{meshwork::exec::module_abi(), &meshwork::exec::cuda::missing_device,
                                                                  &meshwork::exec::cuda::make_cuda_rank};
  return &module;
}
