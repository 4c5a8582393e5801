#pragma once
// The CUDA backend as a module (libmeshwork_cuda.so, built beside the programs in lib/) that
// execute() loads the first time a run asks for it (exec/backend_loader.cpp): every other
// command starts without the CUDA runtime, cuBLASLt and NCCL, which linked into the programs
// cost 243 MB and 0.13 s at each start of `meshwork validate`. The module and the program share
// C++ types (plan::Plan, ExecuteOptions, ExecuteResult), so both must come from one build: the
// module states the build it comes from (module_abi) and the loader refuses another.
#include <cstdint>
#include <string_view>

#include "exec/backend.hpp"
#include "exec/execute.hpp"
#include "exec/group.hpp"
#include "exec/mpi_group.hpp"
#include "meshwork/version.hpp"
#include "plan/plan.hpp"

namespace meshwork::exec {

// One rank's CUDA backend and its groups, for execute()'s one Trainer (exec/trainer.hpp).
struct CudaRank {
  std::unique_ptr<Backend> backend;
  Groups groups;
  std::string collectives;  // what carries the groups and why, for the Report
};

struct CudaBackendModule {
  std::uint64_t abi = 0;
  // Why this process sees no CUDA device ("" when it sees one): no driver, or none present.
  // Local, no MPI: execute() gathers every rank's answer before anything else, so that a job
  // on machines without GPUs ends with that one message, whatever its mesh or launch.
  std::string (*missing_device)() = nullptr;
  // Collective over MPI_COMM_WORLD (MPI initialised, one process per rank): selects this rank's
  // GPU and makes its groups, over NCCL or over MPI staged through the host (`collectives`:
  // "auto", "nccl" or "mpi"; auto takes MPI where ranks share a GPU, which NCCL refuses).
  // Throws std::runtime_error when the rank has no CUDA device (first, whatever the plan),
  // std::invalid_argument for a choice the node cannot take.
  CudaRank (*make_rank)(const plan::Plan& plan, std::int64_t world_rank, const GroupOptions& options, const std::string& collectives) = nullptr;
};

// The exported entry point: `extern "C" const CudaBackendModule* meshwork_cuda_backend_module()`.
inline constexpr const char* kCudaModuleEntry = "meshwork_cuda_backend_module";
inline constexpr const char* kCudaModuleFile = "libmeshwork_cuda.so";

// This build's fingerprint: FNV-1a over the version, the commit (both as CMake last configured)
// and the sizes of the types the two sides pass and of those they hold. A field added to one of
// them changes a size; a field reordered without changing one is not seen, nor a rebuild of one
// side alone between two configures: build the programs and the module together.
constexpr std::uint64_t module_abi() {
  std::uint64_t h = 14695981039346656037ULL;
  auto mix = [&h](std::string_view s) {
    for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    h = (h ^ 0xffU) * 1099511628211ULL;
  };
  mix(kVersion);
  mix(kGitCommit);
  for (const std::uint64_t size : {sizeof(plan::Plan), sizeof(plan::ModelConfig), sizeof(plan::ParallelismConfig), sizeof(ExecuteOptions),
                                   sizeof(ExecuteResult), sizeof(StepRecord), sizeof(report::Report), sizeof(GroupOptions), sizeof(Groups), sizeof(CudaRank),
                                   sizeof(CudaBackendModule)}) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((size >> (8 * i)) & 0xffU)) * 1099511628211ULL;
  }
  return h;
}

// The CUDA backend, loaded on the first call; nullptr with `why` (the module is not in this
// build, cannot load, or comes from another build). MESHWORK_CUDA_BACKEND, when set, names the
// module's file; otherwise it is lib/libmeshwork_cuda.so beside the program's folder.
const CudaBackendModule* cuda_backend(std::string& why);

}  // namespace meshwork::exec
