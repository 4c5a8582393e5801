#include "exec/cuda/execute_cuda.hpp"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>
#include <string_view>
#include <thread>

#include "exec/cuda/cuda_trainer.hpp"
#include "exec/cuda/nccl_environment.hpp"
#include "exec/job.hpp"
#include "exec/measured_report.hpp"
#include "exec/reference_check.hpp"
#include "plan/validate.hpp"

namespace meshwork::exec::cuda {

namespace {

using Clock = std::chrono::steady_clock;
using Grads = std::map<std::string, std::vector<float>, std::less<>>;

// Rank 0 checks the first step's reduced gradients (the same on every rank after the
// all-reduce) against the CPU's fp32 run and tells the others: the reference loss, the worst
// error and its tensor, or what went wrong.
void verify_first_step(const plan::Plan& plan, int rank, const Grads& grads, StepRecord& rec) {
  std::array<double, 3> figures{0, 0, 0};  // ok, reference loss, worst error
  std::array<char, 512> text{};            // the worst tensor, or the error
  if (rank == 0) {
    try {
      const ReferenceCheck c = check_first_step(plan, rec.loss, [&](const std::string& name) {
        const auto it = grads.find(name);
        if (it == grads.end()) throw std::invalid_argument("--verify: the CUDA run has no parameter " + name);
        return it->second;
      });
      figures = {1, c.reference_loss, c.worst_relative_error};
      std::snprintf(text.data(), text.size(), "%s", c.worst_tensor.c_str());
    } catch (const std::exception& e) {
      std::snprintf(text.data(), text.size(), "%s", e.what());
    }
  }
  MPI_Bcast(figures.data(), static_cast<int>(figures.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Bcast(text.data(), static_cast<int>(text.size()), MPI_CHAR, 0, MPI_COMM_WORLD);
  if (figures[0] == 0) throw std::runtime_error(text.data());
  rec.reference_loss = figures[1];
  rec.worst_relative_error = figures[2];
  rec.worst_tensor = text.data();
}

report::Report cuda_report(const plan::Plan& plan, const std::vector<StepRecord>& steps, CudaTrainer& t) {
  const auto ms = t.op_ms();
  auto get_ms = [&](std::string_view name) {
    const auto it = ms.find(name);
    return it == ms.end() ? 0.0 : it->second;
  };
  MeasuredSeconds measured;
  for (std::size_t i = 0; i < kOpKinds; ++i) measured.ops.seconds[i] = get_ms(models::to_string(static_cast<models::OpKind>(i))) / 1e3;
  // The breakdown counts exposed communication: with overlap, the all-reduces' time under
  // backward is not the step's.
  measured.dp = get_ms("dp_exposed") / 1e3;
  report::Report r = measured_report(plan, steps, measured, plan::peak_tflops(plan.cluster.gpu, plan::Precision::bf16) * 1e12);
  r.notes.push_back("measured on the CUDA backend (CudaGpt: bf16 GEMMs and activations, fp32 master parameters and AdamW; NCCL), rank 0's view; MFU and HFU "
                    "against the GPU's dense bf16 peak whatever the plan's precision");
  r.notes.push_back(std::string("attention: ") + attention_path_name(t.model().attention_path()));
  const auto n = static_cast<double>(std::max<std::size_t>(steps.size(), 1));
  char line[320];
  {
    if (t.overlapped()) {
      std::snprintf(line, sizeof line, "data parallelism %lld: gradients all-reduced in %zu buckets (head, layers, embeddings) on the dp stream as the last "
                    "micro-batch's backward completes them (parallelism.overlap.grad_reduce)",
                    static_cast<long long>(t.dp_size()), t.model().grad_buckets().size());
    } else {
      std::snprintf(line, sizeof line, "data parallelism %lld: gradients all-reduced in one call after backward (parallelism.overlap.grad_reduce off)",
                    static_cast<long long>(t.dp_size()));
    }
    r.notes.emplace_back(line);
    std::snprintf(line, sizeof line, "dp: %.3f ms per step of all-reduce on the dp stream, %.3f ms of it exposed (the breakdown's dp_s)", get_ms("dp") / n,
                  get_ms("dp_exposed") / n);
    r.notes.emplace_back(line);
    if (t.dp_size() > 1) r.notes.push_back("the data-parallel replicas are not checksummed on the CUDA backend (--replica-check-every is the CPU backend's)");
  }
  const NcclEnvironment nccl = nccl_environment();
  std::string env;
  for (const auto& [name, value] : nccl.variables) env += (env.empty() ? "" : ", ") + name + "=" + value;
  r.notes.push_back("NCCL " + nccl.version + " (built against " + nccl.header_version + "); " + (env.empty() ? "no NCCL_* variables set" : env));
  return r;
}

}  // namespace

ExecuteResult execute_cuda(const plan::Plan& plan, const ExecuteOptions& options) {
  ExecuteResult out = start_job(plan);
  if (!out.error.empty()) return out;
  const int rank = static_cast<int>(out.rank);
  std::vector<std::string> missing;
  if (!options.checkpoint_dir.empty() || options.checkpoint_every > 0 || options.resume) missing.emplace_back("checkpoints (--checkpoint-dir, --checkpoint-every, --resume)");
  if (options.bitflip.step > 0) missing.emplace_back("--inject-bitflip (the replicas' checksums are the CPU backend's)");
  if (options.trace) missing.emplace_back("--trace (profile with Nsight Systems: forward, backward and grad_reduce are NVTX ranges)");
  if (!missing.empty()) {
    out.error = "the CUDA backend has no ";
    for (std::size_t i = 0; i < missing.size(); ++i) out.error += (i == 0 ? "" : "; ") + missing[i];
    return out;
  }
  try {
    CudaTrainer trainer(plan, {.timeout_s = options.timeout_s, .on_timeout = options.on_timeout});
    for (std::int64_t s = 1; s <= options.steps; ++s) {
      if (options.death.step == s && options.death.rank == rank) std::raise(SIGKILL);
      if (options.hang.step == s && options.hang.rank == rank) {
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
      }
      StepRecord rec;
      rec.step = s;
      // --verify: rank 0 keeps the first step's reduced gradients (their copy is in that
      // step's time, which the median leaves out from three steps on).
      const bool check = options.verify && s == 1;
      Grads grads;
      std::function<void(CudaGpt&)> keep;
      if (check && rank == 0) {
        keep = [&grads](CudaGpt& g) {
          for (const auto& spec : g.specs()) grads[spec.name] = g.grad(spec.name);
        };
      }
      const auto t0 = Clock::now();
      rec.loss = trainer.step(s, keep);
      double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      rec.seconds = seconds;
      if (check) verify_first_step(plan, rank, grads, rec);
      if (rank == 0 && options.progress) {
        char line[256];
        if (check) {
          std::snprintf(line, sizeof line, "step %lld  loss %.6f  reference %.6f (CPU fp32)  worst ||a-b||/||b|| %.2e (%s)  %.3f s", static_cast<long long>(s),
                        rec.loss, rec.reference_loss, rec.worst_relative_error, rec.worst_tensor.c_str(), rec.seconds);
        } else {
          std::snprintf(line, sizeof line, "step %lld  loss %.6f (%a)  %.3f s", static_cast<long long>(s), rec.loss, rec.loss, rec.seconds);
        }
        options.progress(line);
      }
      out.steps.push_back(rec);
    }
    // The first step is the one compared: later steps' parameters have taken bf16 updates the
    // CPU's fp32 run would not.
    out.verified = options.verify && !out.steps.empty() && out.steps.front().worst_relative_error <= options.tolerance;
    out.report = cuda_report(plan, out.steps, trainer);
    out.ok = !options.verify || out.verified;
    if (!out.ok && out.steps.empty()) out.error = "--verify: no step ran";
    if (!out.ok && !out.steps.empty()) {
      const StepRecord& first = out.steps.front();
      char line[320];
      std::snprintf(line, sizeof line, "verification failed: the first step's %s differs from the CPU's fp32 run by %.3e (||a-b||/||b||), more than %g",
                    first.worst_tensor.c_str(), first.worst_relative_error, options.tolerance);
      out.error = line;
    }
  } catch (const std::exception& e) {
    out.ok = false;
    out.error = e.what();
  }
  return out;
}

}  // namespace meshwork::exec::cuda
