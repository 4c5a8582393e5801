#pragma once
// A plan's whole mesh in one process: every rank a thread with its own backend (exec/backend.hpp)
// and its groups in memory (exec/thread_group.hpp), each step checked, as `execute --verify`
// checks it, against the single-rank fp32 run of the CPU backend. How one GPU checks the CUDA
// backend on a TP2 x PP2, CP2 or EP2 mesh (every rank's CudaBackend on that GPU, the tensors
// staged through the host, since NCCL takes one rank per GPU) on a machine without MPI.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "exec/backend.hpp"
#include "exec/execute.hpp"
#include "plan/plan.hpp"

namespace meshwork::exec {

struct ThreadMeshResult {
  std::vector<StepRecord> steps;  // the verified steps (rank 0's view: loss, reference, worst error)
  std::string error;              // the first rank's failure, empty when every rank ran every step
  std::vector<std::string> rank_errors;  // every rank's error, in order: the first is the cause, the others name it
};

// `make_backend(rank)` is called on the rank's own thread (a CUDA backend selects its device
// there). A collective that waits `timeout_s` for a member fails; a rank that fails stops the
// others at once (ThreadWorld::fail), their errors naming it. With `staged`, each rank's groups carry its backend's tensors through the host
// (StagedGroup), as a device backend needs; without, the backend's memory must be the host's.
// With `hold_sends`, pipeline sends wait for the sender's next receive or flush, as NCCL's do
// (ThreadWorld).
[[nodiscard]] ThreadMeshResult run_mesh_in_threads(const plan::Plan& plan, std::int64_t steps, const std::function<std::unique_ptr<Backend>(std::int64_t rank)>& make_backend,
                                                   bool staged, double timeout_s = 120, bool hold_sends = false);

}  // namespace meshwork::exec
