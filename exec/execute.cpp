#include "exec/execute.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "exec/checkpoint.hpp"
#include "exec/job.hpp"
#include "exec/measured_report.hpp"
#include "exec/mpi_group.hpp"
#include "exec/rank_groups.hpp"
#include "exec/reference_step.hpp"
#include "exec/resume.hpp"
#include "exec/trainer.hpp"
#include "models/program_trace.hpp"
#include "plan/derived.hpp"
#include "exec/backend_module.hpp"
#include "plan/backend_limits.hpp"
#include "plan/plan_io.hpp"
#include "plan/validate.hpp"
#include "report/report_io.hpp"
#include "report/trace.hpp"


namespace meshwork::exec {

namespace {

using Clock = std::chrono::steady_clock;

Groups mpi_groups(const plan::Plan& plan, std::int64_t rank, const GroupOptions& o) {
  return rank_groups(plan, rank, [&](const char* name, const std::vector<std::int64_t>& members, int colour) -> std::unique_ptr<Group> {
    return MpiGroup::split(name, members, colour, o);
  });
}

// Every rank's instruction timings to rank 0, as the one Trace of report/ (the simulator's
// shape: a process per rank, a thread per stream, blocks by pass and layers with their ops).
std::string chrome_trace(Trainer& t, std::int64_t world_size) {
  // Fixed-width records of 64-bit words: index, step, start, end.
  constexpr std::size_t kWords = 4;
  std::vector<std::uint64_t> mine;
  for (const auto& e : t.events) {
    mine.insert(mine.end(), {static_cast<std::uint64_t>(e.index), static_cast<std::uint64_t>(e.step), std::bit_cast<std::uint64_t>(e.start_us),
                             std::bit_cast<std::uint64_t>(e.end_us)});
  }
  std::vector<std::uint64_t> counts(static_cast<std::size_t>(world_size));
  const std::uint64_t n = t.events.size();
  t.groups().world->all_gather(std::span<const std::uint64_t>(&n, 1), counts);
  const std::size_t most = *std::max_element(counts.begin(), counts.end());
  mine.resize(most * kWords, 0);
  std::vector<std::uint64_t> all(mine.size() * static_cast<std::size_t>(world_size));
  t.groups().world->all_gather(mine, all);
  const models::Program& program = t.program();
  const auto layout = plan::RankLayout::from_plan(t.plan().parallelism);
  report::Trace trace;
  for (std::int64_t r = 0; r < world_size; ++r) {
    std::vector<models::InstrTiming> events;
    for (std::size_t i = 0; i < counts[static_cast<std::size_t>(r)]; ++i) {
      const std::uint64_t* w = &all[(static_cast<std::size_t>(r) * most + i) * kWords];
      events.push_back({static_cast<std::int32_t>(w[0]), static_cast<std::int32_t>(w[1]), std::bit_cast<double>(w[2]), std::bit_cast<double>(w[3])});
    }
    models::append_rank_trace(program, program.classes.at(static_cast<std::size_t>(layout.coord(r).pp)), r, events, true, trace);
  }
  return report::chrome_trace_json(trace);
}

// `collectives`: empty on the CPU backend; what carries the CUDA backend's groups.
report::Report measured(const plan::Plan& plan, const std::vector<StepRecord>& steps, const OpSeconds& ops, const Groups& g, std::size_t counted_steps,
                        const std::string& collectives) {
  const bool cuda = !collectives.empty();
  MeasuredSeconds measured;
  measured.ops = ops;
  measured.steps = counted_steps;
  measured.tp = g.tp->stats().seconds;
  measured.dp = g.dp->stats().seconds + g.expert_dp->stats().seconds;
  measured.ep = g.ep->stats().seconds;
  measured.cp = g.cp->stats().seconds;
  // Pipeline receives are mostly waits for the neighbour: the bubble (fill, drain and the
  // neighbour's slowness); sends and everything else are the transfers.
  measured.pp_waits = g.pp->stats().recv_seconds;
  measured.pp = g.pp->stats().seconds - g.pp->stats().recv_seconds;
  // The CUDA backend computes in bf16, or with the layers' GEMMs in FP8 for a plan of precision
  // fp8: its MFU is against the peak of that precision, as the estimate's (the attention and
  // the head in bf16, as the estimate prices them without fp8_attention); the CPU's, fp32
  // whatever the precision, against the plan's, so that the two tiers' figures line up.
  const bool fp8 = plan.training.precision == plan::Precision::fp8;
  const plan::Precision peak_precision = cuda && !fp8 ? plan::Precision::bf16 : plan.training.precision;
  report::Report r = measured_report(plan, steps, measured, plan::peak_tflops(plan.cluster.gpu, peak_precision) * 1e12);
  if (cuda) {
    r.notes.push_back(std::string("measured on the CUDA backend (CudaChunk: ") +
                      (fp8 ? "the layers' linear GEMMs in FP8 e4m3 with per-tensor current scaling for the forward and the input gradient, the weight "
                             "gradients, attention and head in bf16"
                           : "bf16 GEMMs") +
                      ", bf16 activations, fp32 master parameters, gradients and AdamW), rank 0's view; each instruction timed to its end on the device, "
                      "so none overlaps another; MFU against the GPU's dense " +
                      (fp8 ? "fp8" : "bf16") + " peak");
    r.notes.push_back(collectives);
  } else {
    r.notes.push_back("measured on the CPU backend (Eigen, Open MPI), rank 0's view; fp32 whatever the plan's precision");
  }
  r.notes.push_back("bubble: time in pipeline receives, waiting for the neighbour stage (its transfer included)");
  r.notes.push_back("DP: the gradients are reduced at the optimizer instruction, one call per group, not bucket by bucket as the Program lists them");
  return r;
}

}  // namespace

bool have_cuda_backend(std::string* why) {
  std::string reason;
  const bool loaded = cuda_backend(reason) != nullptr;
  if (why != nullptr) *why = reason;
  return loaded;
}

ExecuteResult execute(const plan::Plan& plan, const ExecuteOptions& options) {
  const bool cuda = options.backend == "cuda";
  const CudaBackendModule* module = nullptr;
  if (cuda) {
    std::string why;
    module = cuda_backend(why);
    if (module == nullptr) throw std::invalid_argument("backend cuda: " + why);
  } else if (options.backend != "cpu") {
    throw std::invalid_argument("backend '" + options.backend + "' is not one of cpu, cuda");
  }
  ExecuteResult out = start_job(plan);
  const int rank = static_cast<int>(out.rank), size = static_cast<int>(out.world_size);
  // The CUDA backend's device first, on every rank together: without one, that is the whole
  // answer, whatever the plan or the launch.
  if (cuda) {
    if (std::string missing = job_missing_devices(module->missing_device(), size); !missing.empty()) {
      out.error = std::move(missing);
      out.job_wide_error = true;
      return out;
    }
  }
  if (!out.error.empty()) return out;
  const auto& par = plan.parallelism;
  const GroupOptions group_options{.timeout_s = options.timeout_s, .self_check = options.verify && !cuda, .on_timeout = options.on_timeout};
  CudaRank device;
  if (cuda) {
    try {
      device = module->make_rank(plan, rank, group_options, options.collectives);
    } catch (const std::exception& e) {
      out.error = e.what();
      return out;
    }
  }
  // The backend's limits, as `validate --backend` and the GUI state them.
  if (const auto limits = plan::backend_diagnostics(plan, cuda ? plan::Backend::cuda : plan::Backend::cpu); limits.has_errors()) {
    out.error = std::string("the ") + (cuda ? "CUDA" : "CPU") + " backend cannot run this plan:";
    for (std::size_t i = 0; i < limits.items().size(); ++i) out.error += (i == 0 ? " " : "; ") + limits.items()[i].path + ": " + limits.items()[i].message;
    return out;
  }
  if (options.bitflip.step > 0 && par.zero_stage == 3 && par.data_parallel_size * par.context_parallel_size > 1) {
    out.error = "--inject-bitflip: ZeRO-3 keeps one copy of each parameter and gradient shard, so no replica can be compared (use ZeRO 0-2)";
    return out;
  }
  if (options.verify && options.resume) {
    out.error = "--verify compares from the first step; it cannot start from a checkpoint";
    return out;
  }
  OpSeconds timing;
  std::optional<Trainer> run, ref;
  try {
    if (cuda) run.emplace(plan, std::move(device.groups), rank, &timing, std::move(device.backend));
    else run.emplace(plan, mpi_groups(plan, rank, group_options), rank, &timing);
    run->tracing = options.trace;
    if (options.slow.rank == rank) {
      const auto& instrs = run->program().classes[static_cast<std::size_t>(run->stage())].instrs;
      if (options.slow_instr < 0 || static_cast<std::size_t>(options.slow_instr) >= instrs.size()) {
        throw std::invalid_argument("--inject-slowdown: rank " + std::to_string(rank) + "'s Program has instructions 0 to " + std::to_string(instrs.size() - 1) +
                                    ", not " + std::to_string(options.slow_instr));
      }
      run->delay_instr = options.slow_instr;
      run->delay_s = options.slow_s;
    }
    run->keep_reduced = options.verify;
    if (options.verify) {
      ref.emplace(single_rank(plan), local_groups(), 0, nullptr);
      ref->keep_reduced = true;  // its gradients before clipping, for compare_with_reference
    }
    const std::string plan_hash = checkpoint_plan_key(plan);
    std::int64_t first = 1;
    if (options.resume) {
      ResumePoint point = find_resume_point(*run->groups().world, options.checkpoint_dir, size, plan_hash, options.warning);
      if (point.step > 0) {
        run->restore(point.state);
        first = point.step + 1;
        if (rank == 0 && options.progress) options.progress("resuming from the checkpoint of step " + std::to_string(point.step) + " in " + options.checkpoint_dir);
      } else if (rank == 0 && options.progress) {
        options.progress("no checkpoint in " + options.checkpoint_dir + ": starting from step 1");
      }
    } else if (!options.checkpoint_dir.empty()) {
      refuse_to_overwrite(*run->groups().world, options.checkpoint_dir);
    }
    out.first_step = first;
    for (std::int64_t s = first; s < first + options.steps; ++s) {
      StepRecord rec;
      rec.step = s;
      const auto t0 = Clock::now();
      rec.loss = run->step(s, options);
      rec.grad_norm = run->grad_norm();
      rec.skipped = run->skipped();
      // The step's time and, at this boundary, whether any rank was asked to stop.
      // Host values: gathered as integers (a float span is a tensor in the backend's memory).
      const std::array<std::uint64_t, 2> mine{std::bit_cast<std::uint64_t>(std::chrono::duration<double>(Clock::now() - t0).count()),
                                              options.stop_requested && options.stop_requested() ? 1U : 0U};
      std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(size));
      run->groups().world->all_gather(mine, all);
      rec.seconds = 0;
      bool stop = false;
      for (std::size_t r = 0; r < all.size(); r += 2) {
        rec.seconds = std::max(rec.seconds, std::bit_cast<double>(all[r]));
        stop = stop || all[r + 1] != 0;
      }
      if (ref) {
        // The reference is no rank of the job: the faults injected into a rank are not its.
        ExecuteOptions reference_options = options;
        reference_options.death = reference_options.hang = reference_options.signal = Injection{};
        rec.reference_loss = ref->step(s, reference_options);
        compare_with_reference(*run, *ref, plan, rank, rec);
        sync_reference(*run, *ref, plan, rank);
      }
      if (!options.checkpoint_dir.empty() && ((options.checkpoint_every > 0 && s % options.checkpoint_every == 0) || stop)) {
        RankState st = run->state();
        st.rank = rank;
        st.world_size = size;
        st.plan_hash = plan_hash;
        if (options.save_death.step == s && options.save_death.rank == rank) {
          // An interrupted save: half the shard is on disk, under its temporary name.
          std::filesystem::create_directories(shard_path(options.checkpoint_dir, s, rank).parent_path());
          std::ofstream(shard_path(options.checkpoint_dir, s, rank).string() + ".tmp", std::ios::binary) << std::string(64, 'x') << std::flush;
          std::raise(SIGKILL);
        }
        save_checkpoint(*run->groups().world, options.checkpoint_dir, st, options.keep_last, rank == 0 ? options.progress : Warn{});
        out.checkpoint_step = s;
      }
      if (rank == 0 && options.progress) {
        // Megatron's log line names the norm that clipping used; the exact bits of the loss
        // too without --verify: a resumed run's trajectory is compared bit for bit.
        char norm[64] = "";
        if (rec.skipped) std::snprintf(norm, sizeof norm, "  skipped (a non-finite gradient)");
        else if (plan.training.clip_grad > 0) std::snprintf(norm, sizeof norm, "  grad norm %.6f", rec.grad_norm);
        char line[320];
        if (ref) {
          std::snprintf(line, sizeof line, "step %lld  loss %.6f  reference %.6f%s  worst ||a-b||/||b|| %.2e (%s)  %.3f s", static_cast<long long>(s), rec.loss,
                        rec.reference_loss, norm, rec.worst_relative_error, rec.worst_tensor.c_str(), rec.seconds);
        } else {
          std::snprintf(line, sizeof line, "step %lld  loss %.6f (%a)%s  %.3f s", static_cast<long long>(s), rec.loss, rec.loss, norm, rec.seconds);
        }
        const std::string text = line;
        options.progress(text);
      }
      out.steps.push_back(rec);
      if (stop) {
        out.preempted = true;
        if (rank == 0 && options.progress) {
          options.progress("stop requested (a preemption signal): stopped at the end of step " + std::to_string(s) +
                           (options.checkpoint_dir.empty() ? std::string(" without a checkpoint (no --checkpoint-dir)")
                                                           : "; checkpoint written to " + shard_path(options.checkpoint_dir, s, 0).parent_path().string()));
        }
        break;
      }
      // Breakdowns, like the step time (steady_step_seconds), leave out the first step when
      // there are more than two: it pays for first touches and the collectives' setup.
      if (s == first && options.steps > 2) {
        timing = OpSeconds{};
        for (Group* g : {run->groups().world.get(), run->groups().tp.get(), run->groups().dp.get(), run->groups().pp.get(), run->groups().embedding.get(),
                         run->groups().ep.get(), run->groups().expert_dp.get(), run->groups().cp.get()}) {
          if (g != nullptr) g->reset_stats();
        }
      }
    }
    out.verified = options.verify;
    const double tolerance = options.tolerance >= 0 ? options.tolerance : default_verify_tolerance(options.backend, plan.training.precision);
    for (const auto& rec : out.steps) out.verified = out.verified && rec.worst_relative_error <= tolerance;
    // The first step's figures were dropped when there are more than two (a preempted run may
    // have stopped before).
    const bool first_dropped = options.steps > 2 && out.steps.size() > 1;
    out.report = measured(plan, out.steps, timing, run->groups(), first_dropped ? out.steps.size() - 1 : out.steps.size(), cuda ? device.collectives : "");
    if (options.trace) out.trace_json = chrome_trace(*run, size);
    out.ok = !options.verify || out.verified;
    if (!out.ok) out.error = "verification failed: a gradient or the loss differs from the single-rank run by more than " + std::to_string(tolerance);
  } catch (const JobWideError& e) {
    out.ok = false;
    out.error = e.what();
    out.job_wide_error = true;
  } catch (const std::exception& e) {
    out.ok = false;
    out.error = e.what();
  }
  return out;
}

}  // namespace meshwork::exec
