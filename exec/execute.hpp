#pragma once
// Runs a plan for real on this process's share of the mesh, one rank per process, with the one
// Trainer (exec/trainer.hpp) on either backend: the CPU's (kernels/ on Eigen, collectives over
// Open MPI) or, where the build has it, the CUDA one (exec/cuda: CudaChunk in bf16, NCCL or MPI
// staged through the host). MPI must be initialised; a run of one process needs no launcher.
// Reports the measured figures in the simulator's Report.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "plan/plan.hpp"
#include "report/report.hpp"

namespace meshwork::exec {

struct Injection {
  std::int64_t step = -1;  // 1-based step at which it happens
  std::int64_t rank = -1;
};

// --verify's bound for the CUDA backend: its bf16 step against the CPU's fp32 one (the bound
// tests/exec/cuda_gpt_test.cpp holds CudaGpt to). The CLI sets it for --backend cuda unless
// --tolerance is given.
inline constexpr double kBf16VerifyTolerance = 5e-2;
// --verify's bound for the CUDA backend on a plan of precision fp8 (the layers' GEMMs in e4m3,
// CudaChunk::linear). Not yet measured on a GPU: derived from e4m3's rounding. Its 3 significand
// bits round each value by up to 2^-4 of itself (about 2.5% rms; bf16: 2^-8); a product of two
// rounded operands, summed over k terms of either sign, keeps about 3.5% rms per GEMM output,
// and a gradient passes 4 to 6 such GEMMs forward and back: about 10%, growing as their square
// root. 0.25 leaves 2.5 times that, and a wrong cast (a transpose, a scale) gives errors of 1.
inline constexpr double kFp8VerifyTolerance = 0.25;
// The bound --verify uses unless one is given: 1e-5 on the CPU backend (fp32 against fp32),
// kBf16VerifyTolerance on the CUDA backend, kFp8VerifyTolerance on it for a plan of precision fp8.
[[nodiscard]] inline double default_verify_tolerance(const std::string& backend, plan::Precision precision) {
  if (backend != "cuda") return 1e-5;
  return precision == plan::Precision::fp8 ? kFp8VerifyTolerance : kBf16VerifyTolerance;
}

struct ExecuteOptions {
  // "cpu" (Eigen and Open MPI) or "cuda" (one GPU per rank, NCCL); execute() throws
  // std::invalid_argument for any other, and for "cuda" in a build without CUDA.
  std::string backend = "cpu";
  // The CUDA backend's groups: "nccl" (one GPU per rank), "mpi" (Open MPI, each tensor staged
  // through the host: ranks may share a GPU) or "auto" (NCCL unless a node runs more ranks than
  // it has GPUs).
  std::string collectives = "auto";
  std::int64_t steps = 1;
  // Compare loss and gradients, every step, with a single-rank fp32 run on the CPU backend
  // (which takes the run's parameters after each step).
  bool verify = false;
  double timeout_s = 300;     // the collectives' watchdog
  double tolerance = -1;      // ||a - b|| / ||b|| per tensor; negative: default_verify_tolerance()
  std::string checkpoint_dir;
  std::int64_t checkpoint_every = 0;  // steps; 0: none
  bool resume = false;                // from the newest complete checkpoint in checkpoint_dir
  std::int64_t keep_last = 0;         // retention: only the newest K checkpoints stay; 0: all
  std::int64_t replica_check_every = 1;  // steps between the DP replicas' checksum comparisons; 0: never
  Injection bitflip, hang, death;     // faults for tests: a flipped bit after the DP reduction, a rank that sleeps, one that is killed
  Injection save_death;               // a rank killed halfway through writing its shard (an interrupted save)
  Injection signal;                   // a rank that gets SIGTERM during that step (preemption)
  // A slow op for tests of the measured timeline: every run of instruction `slow_instr` of the
  // rank's Program (its index in the stage's list) on rank `slow.rank` takes `slow_s` longer.
  Injection slow;
  std::int32_t slow_instr = -1;
  double slow_s = 0;
  // Polled at every step boundary on every rank: true once the job should stop (a
  // preemption signal arrived). The ranks agree on it, write a checkpoint of the step just
  // finished (with checkpoint_dir) and return with `preempted`.
  std::function<bool()> stop_requested;
  bool trace = false;
  std::function<void(const std::string&)> progress;  // a line per step, on rank 0
  std::function<void(const std::string&)> warning;   // what a resume skipped and why, on any rank
  // Called by the watchdog with its message before it throws, while operations are still in
  // flight: a program prints it and ends the job there (MPI_Abort).
  std::function<void(const std::string&)> on_timeout;
};

struct StepRecord {
  std::int64_t step = 0;
  double loss = 0;
  double seconds = 0;
  double grad_norm = 0;               // the gradients' global norm before clipping (0: the plan does not clip)
  bool skipped = false;               // fp16: a non-finite gradient, the update skipped
  double reference_loss = 0;          // --verify
  double reference_grad_norm = 0;     // --verify
  double worst_relative_error = 0;    // --verify: over every tensor's gradient, the loss and the gradient norm
  std::string worst_tensor;
};

struct ExecuteResult {
  bool ok = false;
  std::string error;  // what ended the run (a hung rank named, a failed verification, bad input)
  bool job_wide_error = false;  // every rank has `error`, reached together: the job can end cleanly
  std::int64_t rank = 0, world_size = 1;
  std::int64_t first_step = 1;  // after a resume, the step after the checkpoint
  bool preempted = false;       // stopped early at a step boundary by stop_requested
  std::int64_t checkpoint_step = 0;  // the newest checkpoint this run wrote (0: none)
  std::vector<StepRecord> steps;
  bool verified = false;  // --verify and every step within tolerance
  report::Report report;  // method measured (rank 0's view)
  std::string trace_json; // Chrome trace of every rank, on rank 0 with `trace`
};

ExecuteResult execute(const plan::Plan& plan, const ExecuteOptions& options);

// Whether the CUDA backend (execute() with backend "cuda") loads: the module of this build
// (exec/backend_module.hpp), loaded here on first use; `why` says what is missing otherwise.
[[nodiscard]] bool have_cuda_backend(std::string* why = nullptr);

}  // namespace meshwork::exec
