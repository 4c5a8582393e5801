#pragma once
// The CUDA backend module's side of execute() (exec/backend_module.hpp): this rank's GPU, its
// CudaBackend and its groups. execute() then runs the same Trainer, checks and Report as on
// the CPU backend.

#include <string>

#include "exec/backend_module.hpp"

namespace meshwork::exec::cuda {

// As CudaBackendModule::missing_device.
[[nodiscard]] std::string missing_device();

// As CudaBackendModule::make_rank.
[[nodiscard]] CudaRank make_cuda_rank(const plan::Plan& plan, std::int64_t world_rank, const GroupOptions& options, const std::string& collectives);

}  // namespace meshwork::exec::cuda
