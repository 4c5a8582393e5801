// meshwork execute PLAN [--backend cpu|cuda] [--collectives auto|nccl|mpi] [--verify] [--steps N] [--json] [--trace F]
//                  [--checkpoint-dir D [--checkpoint-every K] [--keep-last N] [--resume]] [--timeout S]
//                  [--inject-bitflip|--inject-hang|--inject-death|--inject-save-death|--inject-signal STEP:RANK]
//                  [--inject-slowdown RANK:INSTR:MS]:
// the plan run for real on the CPU backend (or the CUDA backend: the same Trainer, its chunks
// on a GPU per rank), one rank per process, launched by `mpirun -np N` (or srun, torchrun).
// Rank 0 prints; every rank reports its own errors. When a
// rank fails (a hung or dead peer named by the watchdog, corruption found, a failed check) the
// job is aborted, so that no rank is left waiting.
//
// Preemption: SIGTERM, SIGUSR1 or SIGUSR2 (Slurm sends SIGTERM before it kills a job, or the
// signal its --signal names) asks the job to stop. The ranks agree at the next step boundary,
// write a checkpoint of that step (with --checkpoint-dir) and exit with kExitPreempted.
#include <mpi.h>

#include <signal.h>

#include <array>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <iomanip>
#include <ostream>
#include <string>

#include "cli/commands.hpp"
#include "exec/execute.hpp"
#include "exec/launch.hpp"
#include "plan/plan_io.hpp"
#include "report/report_io.hpp"

namespace meshwork::cli {

namespace {

// Set by the handler, read at step boundaries by the main thread (the signal may land on an
// MPI or watchdog thread: an atomic, lock-free so that the handler may store to it).
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);
extern "C" void request_stop(int signal) { g_stop_signal.store(signal, std::memory_order_relaxed); }

// Installs request_stop for the preemption signals and puts back what was there (SIG_IGN
// under nohup, a launcher's handler) when it goes out of scope.
class StopSignals {
 public:
  StopSignals() {
    struct sigaction action{};
    action.sa_handler = request_stop;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    for (std::size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &action, &previous_[i]);
  }
  ~StopSignals() {
    for (std::size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &previous_[i], nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  static constexpr std::array<int, 3> kSignals{SIGTERM, SIGUSR1, SIGUSR2};
  std::array<struct sigaction, 3> previous_{};
};

const char* signal_name(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: return "a signal";
  }
}

// One line in one write: the ranks' stderr meet in mpirun's, and a line written piecewise
// (std::cerr is unbuffered) is cut by another rank's.
void say(std::ostream& err, const std::string& line) { err << (line + '\n') << std::flush; }

// "STEP:RANK", or an error naming the option.
bool parse_injection(const std::string& text, const char* option, exec::Injection& out, std::string& error) {
  if (text.empty()) return true;
  long long step = 0, rank = 0;
  char extra = 0;
  if (std::sscanf(text.c_str(), "%lld:%lld%c", &step, &rank, &extra) != 2 || step < 1 || rank < 0) {
    error = std::string(option) + ": expected STEP:RANK (a step from 1, a rank from 0), got \"" + text + "\"";
    return false;
  }
  out.step = step;
  out.rank = rank;
  return true;
}

}  // namespace

void add_execute_command(CLI::App& app, Io& io) {
  auto* cmd = app.add_subcommand("execute",
                                 "Run the plan for real, one rank per process (launch with mpirun -np N): on the CPU backend (Eigen and Open MPI) or the CUDA "
                                 "backend (one GPU per rank, bf16, NCCL)");
  auto file = std::make_shared<std::string>();
  auto opt = std::make_shared<exec::ExecuteOptions>();
  auto json = std::make_shared<bool>(false);
  auto trace = std::make_shared<std::string>();
  auto bitflip = std::make_shared<std::string>(), hang = std::make_shared<std::string>(), death = std::make_shared<std::string>();
  auto save_death = std::make_shared<std::string>(), signal = std::make_shared<std::string>();
  cmd->add_option("plan", *file, "Plan file (YAML or JSON)")->required();
  cmd->add_option("--backend", opt->backend,
                  "cpu: Eigen and Open MPI, fp32, every parallelism; cuda: the same Trainer with its chunks on a GPU per rank (rank on its node "
                  "modulo the node's GPUs), bf16 with fp32 master weights, every dense mesh (TP with SP, PP, DP with ZeRO 0-3; no MoE or CP yet)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--collectives", opt->collectives,
                  "cuda's groups: nccl (one GPU per rank), mpi (Open MPI, every tensor staged through the host: ranks may share a GPU, to check a "
                  "mesh on one GPU) or auto (nccl unless a node runs more ranks than it has GPUs)")
      ->check(CLI::IsMember({"auto", "nccl", "mpi"}))
      ->capture_default_str();
  cmd->add_flag("--verify", opt->verify,
                "Compare the loss and every gradient, every step, with a single-rank fp32 run of the same model and seed on the CPU; exit 1 past "
                "--tolerance");
  cmd->add_option("--steps", opt->steps, "Training steps to run")->check(CLI::Range(1, 1000000));
  cmd->add_option("--tolerance", opt->tolerance, "--verify's bound on ||a-b||/||b|| per tensor (default 1e-5 for cpu, 5e-2 for cuda in bf16, 0.25 for cuda with a plan of precision fp8)")
                        ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", *json, "Print the measured Report as JSON (rank 0)");
  cmd->add_option("--trace", *trace, "Write a Chrome/Perfetto trace of every rank to this file");
  cmd->add_option("--checkpoint-dir", opt->checkpoint_dir, "Where checkpoints are written and resumed from");
  cmd->add_option("--checkpoint-every", opt->checkpoint_every, "Write a checkpoint every K steps")->check(CLI::Range(0, 1000000));
  cmd->add_option("--keep-last", opt->keep_last, "Keep only the newest N checkpoints, deleting older ones after each save (default: keep all)")
      ->check(CLI::Range(1, 1000000));
  cmd->add_flag("--resume", opt->resume,
                "Continue from the newest checkpoint in --checkpoint-dir that every rank loads; damaged ones are renamed aside (STEP.damaged) with a "
                "warning, and the job stops if none is valid");
  cmd->add_option("--timeout", opt->timeout_s, "The collectives' watchdog, seconds")->check(CLI::PositiveNumber);
  cmd->add_option("--replica-check-every", opt->replica_check_every,
                  "Compare the DP replicas' checksums every N steps (0: never); each comparison hashes the reduced gradients or gathered parameters")
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("--inject-bitflip", *bitflip, "STEP:RANK: flip a bit in that rank's reduced gradients (or gathered parameters under ZeRO) at that step");
  cmd->add_option("--inject-hang", *hang, "STEP:RANK: that rank sleeps forever at that step (the watchdog must name it)");
  cmd->add_option("--inject-death", *death, "STEP:RANK: that rank is killed at that step");
  cmd->add_option("--inject-save-death", *save_death, "STEP:RANK: that rank is killed halfway through writing its checkpoint shard of that step");
  cmd->add_option("--inject-signal", *signal, "STEP:RANK: that rank gets SIGTERM during that step (a preemption notice)");
  auto slowdown = std::make_shared<std::string>();
  cmd->add_option("--inject-slowdown", *slowdown,
                  "RANK:INSTR:MS: every run of instruction INSTR of that rank's Program (its index in its stage's list, as `meshwork program` "
                  "numbers them) takes MS milliseconds longer");
  cmd->footer("Exit status: 0 done; 1 a failed run or bad plan; 2 bad usage; " + std::to_string(kExitPreempted) +
              " stopped by SIGTERM, SIGUSR1 or SIGUSR2 at a step boundary, with a checkpoint of that step when --checkpoint-dir is given (resume with --resume).");
  cmd->callback([&io, file, opt, json, trace, bitflip, hang, death, save_death, signal, slowdown] {
    std::string error;
    if (std::string why; opt->backend == "cuda" && !exec::have_cuda_backend(&why)) {
      io.err << "meshwork execute: --backend cuda: " << why << '\n';
      io.exit_code = 2;
      return;
    }
    if (!parse_injection(*bitflip, "--inject-bitflip", opt->bitflip, error) || !parse_injection(*hang, "--inject-hang", opt->hang, error) ||
        !parse_injection(*death, "--inject-death", opt->death, error) || !parse_injection(*save_death, "--inject-save-death", opt->save_death, error) ||
        !parse_injection(*signal, "--inject-signal", opt->signal, error)) {
      io.err << "meshwork execute: " << error << '\n';
      io.exit_code = 2;
      return;
    }
    if (!slowdown->empty()) {
      long long rank = -1, instr = -1;
      double ms = -1;
      char tail = 0;
      if (std::sscanf(slowdown->c_str(), "%lld:%lld:%lf%c", &rank, &instr, &ms, &tail) != 3 || rank < 0 || instr < 0 || instr > (1LL << 30) ||
          !(ms > 0 && ms <= 3.6e6)) {
        io.err << "meshwork execute: --inject-slowdown: '" << *slowdown << "' is not RANK:INSTR:MS (non-negative integers and milliseconds in (0, 3600000])\n";
        io.exit_code = 2;
        return;
      }
      opt->slow.rank = rank;
      opt->slow.step = 1;
      opt->slow_instr = static_cast<std::int32_t>(instr);
      opt->slow_s = ms / 1e3;
    }
    if ((opt->checkpoint_every > 0 || opt->resume || opt->keep_last > 0 || opt->save_death.step > 0) && opt->checkpoint_dir.empty()) {
      io.err << "meshwork execute: --checkpoint-every, --keep-last, --resume and --inject-save-death need --checkpoint-dir\n";
      io.exit_code = 2;
      return;
    }
    const auto launch = exec::detect_launch();
    if (!launch.launch) {
      io.err << "meshwork execute: " << launch.error << '\n';
      io.exit_code = 1;
      return;
    }
    const auto plan = load_plan_for(io, *file, "execute");
    if (!plan) return;
    exec::keep_freed_memory();
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised) MPI_Init(nullptr, nullptr);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    opt->trace = !trace->empty();
    opt->on_timeout = [&io, rank](const std::string& message) {
      say(io.err, "meshwork execute: rank " + std::to_string(rank) + ": " + message);
      MPI_Abort(MPI_COMM_WORLD, 1);
    };
    if (rank == 0 && !*json) opt->progress = [&io](const std::string& line) { io.out << line << '\n' << std::flush; };
    opt->warning = [&io](const std::string& line) { say(io.err, "meshwork execute: " + line); };
    g_stop_signal = 0;
    // Held until the end of this command, MPI_Finalize included: a second notice after the
    // checkpoint must not kill a rank that is about to exit with kExitPreempted.
    const StopSignals stop_signals;
    opt->stop_requested = [] { return g_stop_signal.load(std::memory_order_relaxed) != 0; };
    const exec::ExecuteResult r = exec::execute(*plan, *opt);
    if (!r.ok && r.job_wide_error) {
      // Every rank stopped here together: one message, and a clean end.
      if (rank == 0) say(io.err, "meshwork execute: " + r.error);
      io.exit_code = 1;
      if (!initialised) MPI_Finalize();
      return;
    }
    if (!r.ok) {
      say(io.err, "meshwork execute: rank " + std::to_string(rank) + ": " + r.error);
      // Ranks still inside a collective would wait for this one: end the job.
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 0) {
      if (!trace->empty() && !plan::write_file_atomically(*trace, r.trace_json, error)) {
        io.err << "meshwork execute: " << error << '\n';
        io.exit_code = 1;
      }
      if (*json) {
        io.out << report::to_json(r.report).dump(2) << '\n';
      } else {
        char buf[300];
        std::snprintf(buf, sizeof buf, "plan %s: %lld ranks, %lld steps from step %lld: step %.4f s, MFU %.1f%% (of %s's peak), %.0f tokens/s\n",
                      plan->name.c_str(), static_cast<long long>(r.world_size), static_cast<long long>(r.steps.size()),
                      static_cast<long long>(r.first_step), r.report.step_time_s, r.report.mfu * 100, plan->cluster.gpu.name.c_str(), r.report.tokens_per_s);
        io.out << buf;
        const auto& b = r.report.breakdown;
        std::snprintf(buf, sizeof buf, "  per step (s): compute %.4f, TP %.4f, DP %.4f, PP %.4f", b.compute_s, b.tp_s, b.dp_s, b.pp_s);
        io.out << buf;
        // EP and CP where the plan has them.
        if (plan->parallelism.expert_model_parallel_size > 1) io.out << ", EP " << std::fixed << std::setprecision(4) << b.ep_s << std::defaultfloat;
        if (plan->parallelism.context_parallel_size > 1) io.out << ", CP " << std::fixed << std::setprecision(4) << b.cp_s << std::defaultfloat;
        std::snprintf(buf, sizeof buf, ", optimizer %.4f, other %.4f\n", b.optimizer_s, b.stalls_s);
        io.out << buf;
        if (opt->verify) {
          io.out << "  verified: loss and every gradient within "
                 << (opt->tolerance >= 0 ? opt->tolerance : exec::default_verify_tolerance(opt->backend, plan->training.precision))
                 << (opt->backend == "cuda" ? " of the CPU's single-rank fp32 run\n" : " of the single-rank run\n");
        }
      }
    }
    if (r.preempted) {
      if (const int sig = g_stop_signal.load(); sig != 0) {
        say(io.err, "meshwork execute: rank " + std::to_string(rank) + ": " + signal_name(sig) + " received: stopping at the end of step " +
                        std::to_string(r.first_step + static_cast<std::int64_t>(r.steps.size()) - 1));
      }
      if (rank == 0) {
        say(io.err, "meshwork execute: preempted: " +
                        (r.checkpoint_step > 0 ? "the checkpoint of step " + std::to_string(r.checkpoint_step) + " is in " + opt->checkpoint_dir + "; continue with --resume"
                                               : std::string("no checkpoint was written (no --checkpoint-dir)")) +
                        " (exit " + std::to_string(kExitPreempted) + ")");
      }
      io.exit_code = kExitPreempted;
    }
    if (!initialised) MPI_Finalize();
  });
}

}  // namespace meshwork::cli
