// meshwork simulate PLAN [--json] [--explain] [--free-communication] [--trace F [--trace-ranks R]]:
// one training step played
// out on the plan's fabric by the discrete-event simulator.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <ostream>
#include <unistd.h>

#include "cli/commands.hpp"
#include "models/estimate.hpp"
#include "plan/plan_io.hpp"
#include "plan/units.hpp"
#include "sim/reliability.hpp"
#include "report/report_io.hpp"
#ifdef MESHWORK_HAVE_SIMGRID
#include "sim/simulate.hpp"
#endif

namespace meshwork::cli {

void add_simulate_command(CLI::App& app, Io& io) {
#ifdef MESHWORK_HAVE_SIMGRID
  // The simulation for a multi-threaded caller (meshwork-gui): the plan and options as JSON on
  // stdin, progress and the result on stdout (sim::SimulateOptions::worker). Not for people:
  // hidden from the help.
  auto* worker = app.add_subcommand("__simulate-worker", "");
  worker->group("");
  worker->callback([&io] {
    std::string request((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    std::cout.flush();
    io.exit_code = sim::run_worker(request, STDOUT_FILENO);
  });
#endif
  auto* cmd = app.add_subcommand("simulate", "One training step simulated on the plan's fabric (SimGrid)");
  auto file = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto explain = std::make_shared<bool>(false);
  auto free_comm = std::make_shared<bool>(false);
  auto trace = std::make_shared<std::string>();
  auto fine = std::make_shared<bool>(false);
  auto per_message = std::make_shared<bool>(false);
  auto trace_ranks = std::make_shared<std::vector<std::int64_t>>();
  auto horizon = std::make_shared<std::string>();
  auto fail = std::make_shared<std::string>();
  auto trials = std::make_shared<std::int64_t>(0);
  cmd->add_option("PLAN", *file, "Plan file (YAML or JSON)")->required();
  cmd->add_flag("--json", *json, "Print the Report as JSON");
  cmd->add_flag("--explain", *explain, "Where the step's time went, largest first");
  auto causal = std::make_shared<bool>(false);
  cmd->add_flag("--causal-flops", *causal, "Count only the causal half of attention in MFU's model FLOPs (Megatron-LM's convention): training.attention_flops: causal");
  cmd->add_flag("--free-communication", *free_comm, "Make all communication free (compute and the schedule's bubble only)");
  cmd->add_option("--trace", *trace, "Write a Chrome/Perfetto trace (JSON) to this file");
  cmd->add_flag("--fine", *fine, "One event per instruction, every collective as flows (slower; the reference)");
  cmd->add_flag("--per-message", *per_message, "Every ring step of a collective as its own messages (slower; the reference for the per-edge flows)");
  cmd->add_option("--horizon", *horizon, "Add the reliability of a run this long (\"54d\", or \"tokens\" for the plan's token target) at the simulated step time");
  cmd->add_option("--fail", *fail, "A failure inside the step: TARGET@TIME, TARGET gpuN, nodeN, a link (leaf3-spine1) or a switch or NIC (spine2, nic5), e.g. node2@1.5s; links and switches are routed around after cluster.topology.reroute_s");
  cmd->add_option("--trials", *trials, "With --horizon: Monte Carlo trials (default: the plan's run.trials)");
  cmd->add_option("--trace-ranks", *trace_ranks, "Ranks to trace, comma-separated (default: the first rank of each stage)")->delimiter(',');
  auto ignore_memory = std::make_shared<bool>(false);
#ifdef MESHWORK_HAVE_SIMGRID
  auto max_played = std::make_shared<std::int64_t>(sim::kDefaultMaxPlayedActors);
  cmd->add_option("--max-played-actors", *max_played,
                  "Play at most this many classes of alike actors; past it, actors alike but for their paths share a class (faster, approximate; 0: exact)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
#endif
  cmd->add_flag("--ignore-memory", *ignore_memory, "Simulate a plan that does not fit in GPU memory anyway (the verdict is still printed)");
  cmd->footer("Exit status: 0 when the plan fits (a tight fit warns), 3 when it does not fit in GPU memory (it is then not simulated, unless --ignore-memory), 1 for a plan with errors or a failed simulation, 2 bad usage.");
  auto inject_death = std::make_shared<std::string>();
  // For tests: the simulation process dies at its start (abort, kill or bad_alloc). Hidden.
  cmd->add_option("--inject-child-death", *inject_death)->check(CLI::IsMember({"abort", "kill", "bad_alloc"}))->group("");
  cmd->callback([=, &io] {
    auto loaded = load_plan_for(io, *file, "simulate");
    if (!loaded) return;
    if (*causal) loaded->training.attention_flops = plan::AttentionFlops::causal;
    const plan::Plan& p = *loaded;
    // The memory verdict first: a plan that does not fit has no step to simulate.
    report::Report memory;
    models::attach_memory(p, memory);
    // Flushed now: the simulation forks, and a child must not inherit (and write) the line.
    if (!*json) io.out << memory_verdict_line(memory) << std::endl;
    if (!memory.fits && !*ignore_memory) {
      io.exit_code = kExitDoesNotFit;
      io.err << *file << ": not simulated: the plan does not fit in GPU memory (--ignore-memory simulates it anyway)\n";
      return;
    }
#ifndef MESHWORK_HAVE_SIMGRID
    io.err << "meshwork simulate: this build has no simulator (SimGrid was not found; scripts/install-deps installs it)\n";
    io.exit_code = 1;
#else
    sim::SimulateOptions options;
    options.free_communication = *free_comm;
    options.trace_path = *trace;
    options.fine = *fine;
    options.per_message = *per_message;
    options.trace_ranks = *trace_ranks;
    options.inject_death = *inject_death;
    options.max_played_actors = *max_played;
    if (!fail->empty()) {
      const auto at = fail->rfind('@');
      const auto q = at == std::string::npos ? plan::ParsedQuantity{} : plan::parse_quantity(fail->substr(at + 1), plan::Unit::seconds);
      if (at == std::string::npos || at == 0 || !q.value || *q.value < 0) {
        io.err << "meshwork simulate: --fail: expected TARGET@TIME (node2@1.5s), got \"" << *fail << "\"" << (q.error.empty() ? "" : ": " + q.error) << '\n';
        io.exit_code = 2;
        return;
      }
      options.failure = sim::SimulateOptions::Failure{fail->substr(0, at), *q.value};
    }
    const bool tty = ::isatty(STDERR_FILENO) != 0;
    if (tty) {
      options.progress = [&io](double f) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "\rsimulating: %3.0f%%", f * 100);
        io.err << buf << std::flush;
      };
    }
    const sim::SimulateResult r = sim::simulate(p, options);
    if (tty) io.err << "\r                  \r" << std::flush;
    if (r.interruption) {
      const auto& i = *r.interruption;
      char line[600];
      std::snprintf(line, sizeof line,
                    "plan %s: %s failed %.3f s into the step; the step cannot finish: %lld ranks stopped with it, %lld of the other %lld are "
                    "blocked from %.3f s until NCCL's watchdog ends the job (failures.detection_s)\n",
                    p.name.c_str(), i.target.c_str(), i.at_s, static_cast<long long>(i.ranks_stopped), static_cast<long long>(i.ranks_waiting),
                    static_cast<long long>(i.ranks - i.ranks_stopped), i.stalled_s);
      io.out << line;
      if (!i.partitioned.empty()) io.out << "  why: " << i.partitioned << " (the fabric has no other path for it)\n";
      return;
    }
    if (!r.report) {
      io.err << *file << ": error: " << r.error << '\n';
      io.exit_code = 1;
      return;
    }
    if (!r.error.empty()) {
      io.err << *file << ": error: " << r.error << '\n';
      io.exit_code = 1;
    }
    if (options.failure && options.failure->at_s >= r.report->step_time_s) {
      char line[300];
      std::snprintf(line, sizeof line, "--fail %s: the step ends at %.4g s, before the failure at %.4g s: a failure inside the step must come before its end",
                    fail->c_str(), r.report->step_time_s, options.failure->at_s);
      io.err << "meshwork simulate: " << line << '\n';
      io.exit_code = 2;
      return;
    }
    report::Report rep = *r.report;
    rep.memory = memory.memory;
    rep.fits = memory.fits;
    for (const auto& note : memory.notes) rep.notes.push_back(note);
    double daly = 0;
    if (!horizon->empty()) {
      plan::Plan run = p;
      if (*trials > 0) run.run.trials = *trials;
      if (*horizon != "tokens") {
        const auto q = plan::parse_quantity(*horizon, plan::Unit::seconds);
        if (!q.value || *q.value <= 0) {
          io.err << "meshwork simulate: --horizon: " << (q.error.empty() ? "must be a positive duration, or tokens" : q.error) << '\n';
          io.exit_code = 2;
          return;
        }
        run.run.horizon_s = *q.value;
        run.training.tokens = 0;
      } else if (run.training.tokens <= 0) {
        io.err << "meshwork simulate: --horizon tokens: the plan gives no training.tokens\n";
        io.exit_code = 2;
        return;
      }
      const reliability::Derived d = reliability::inputs_for(run, rep.step_time_s);
      if (!d.error.empty()) {
        io.err << *file << ": error: " << d.error << '\n';
        io.exit_code = 1;
        return;
      }
      const auto s = reliability::run(d.inputs, run.run.trials, static_cast<std::uint64_t>(run.run.seed));
      rep.reliability = reliability::to_report(d, s, static_cast<std::uint64_t>(run.run.seed));
      const double stall = d.inputs.async ? d.inputs.snapshot_s : d.inputs.write_s;
      daly = std::isfinite(d.mtti_s) ? reliability::daly_interval_s(stall, d.mtti_s) : 0;
    }
    if (*json) {
      nlohmann::json j = report::to_json(rep);
      nlohmann::json links = nlohmann::json::array();
      for (const auto& l : r.hottest_links) links.push_back({{"link", l.name}, {"utilisation", l.busy_fraction}, {"bytes", l.bytes}});
      j["hottest_links"] = links;
      j["flows"] = r.flows;
      j["played_actors"] = r.played_actors;
      io.out << j.dump(2) << '\n';
      return;
    }
    char buf[400];
    const auto& b = rep.breakdown;
    std::snprintf(buf, sizeof buf,
                  "plan %s: simulated on %lld GPUs\n"
                  "  elapsed time per iteration (ms): %.1f | throughput per GPU (TFLOP/s/GPU): %.1f model, %.1f hardware\n"
                  "  MFU %.1f%% (%s attention) | HFU %.1f%% | tokens/s %.4g | bubble fraction %.3f\n",
                  rep.plan_name.c_str(), static_cast<long long>(rep.num_gpus), rep.step_time_s * 1e3, rep.model_tflops_per_gpu,
                  rep.hardware_tflops_per_gpu, rep.mfu * 100, rep.mfu_attention.c_str(), rep.hfu * 100, rep.tokens_per_s, rep.bubble_fraction);
    io.out << buf << "  model: " << report::parameters_line(rep.parameters) << '\n';
    std::snprintf(buf, sizeof buf,
                  "  step breakdown (s): compute %.3f, recompute %.3f, TP %.3f, CP %.3f, EP %.3f, DP %.3f, PP %.3f, bubble %.3f, optimizer %.3f, other %.3f\n",
                  b.compute_s, b.recompute_s, b.tp_s, b.cp_s, b.ep_s, b.dp_s, b.pp_s, b.bubble_s, b.optimizer_s, b.stalls_s);
    io.out << buf << report::memory_table_text(rep);
    // What estimate prints too: memory's verdict is the first line; power at the simulated step.
    std::snprintf(buf, sizeof buf, "  power: %.0f W per GPU, %.2f kW per node, %.3f MW, %.3g J/token", rep.power.gpu_watts,
                  rep.power.node_watts / 1e3, rep.power.cluster_megawatts, rep.power.joules_per_token);
    io.out << buf;
    if (rep.time_to_train_s > 0) {
      std::snprintf(buf, sizeof buf, " | time to train %.1f days", rep.time_to_train_s / 86400);
      io.out << buf;
    }
    io.out << '\n';
    if (!r.hottest_links.empty()) {
      io.out << "  hottest links (bytes, utilisation over the step):\n";
      for (std::size_t i = 0; i < std::min<std::size_t>(5, r.hottest_links.size()); ++i) {
        const auto& l = r.hottest_links[i];
        std::snprintf(buf, sizeof buf, "    %-28s %10.3g B  %5.1f%%\n", l.name.c_str(), l.bytes, l.busy_fraction * 100);
        io.out << buf;
      }
    }
    if (rep.interval) io.out << "  " << report::interval_line(rep) << '\n';
    // The Report's notes: memory's (a tight fit), a link rerouted, an approximate play.
    for (const auto& note : rep.notes) io.out << "  note: " << note << '\n';
    if (*explain) {
      // Where the step went: each part's share of the step, largest first.
      std::vector<std::pair<double, std::string>> parts = {
          {b.compute_s, "compute"},   {b.recompute_s, "recomputation"}, {b.bubble_s, "pipeline bubble (waiting for a neighbour stage's compute)"},
          {b.pp_s, "exposed pipeline communication (transfers, and neighbours waiting for theirs)"},
          {b.tp_s, "exposed TP communication"}, {b.cp_s, "exposed CP communication"}, {b.ep_s, "exposed EP communication"},
          {b.dp_s, "exposed DP communication"}, {b.optimizer_s, "optimizer step"}, {b.stalls_s, "stragglers and other stalls"}};
      std::sort(parts.begin(), parts.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
      io.out << "  where the step went:\n";
      for (const auto& [s, what] : parts) {
        if (s <= 0) continue;
        std::snprintf(buf, sizeof buf, "    %5.1f%%  %s\n", 100 * s / rep.step_time_s, what.c_str());
        io.out << buf;
      }
    }
    if (rep.reliability) print_reliability(io.out, *rep.reliability, daly);
#endif
  });
}

}  // namespace meshwork::cli
