#pragma once
// execute() for the CUDA backend (ExecuteOptions::backend "cuda"): a CudaTrainer per rank (data
// parallelism on one GPU each, exec/cuda/cuda_trainer.hpp), the steps, --verify of the first
// step against the CPU's fp32 GptChunk (exec/reference_check.hpp) and the measured Report.

#include "exec/execute.hpp"
#include "plan/plan.hpp"

namespace meshwork::exec::cuda {

// As execute(): MPI initialised, one process per rank of the plan; every failure is returned in
// ExecuteResult::error. What only the CPU backend does (checkpoints and --resume,
// --inject-bitflip and its replica checksums, --trace) is refused there too.
[[nodiscard]] ExecuteResult execute_cuda(const plan::Plan& plan, const ExecuteOptions& options);

}  // namespace meshwork::exec::cuda
