// meshwork reliability PLAN [--trials N] [--seed S] [--horizon D] [--method estimated|simulated]
//                           [--sweep-interval [--csv F] [--svg F]] [--json]:
// a whole run with failures, checkpoints and restarts (sim/reliability.hpp), and the
// reliability section `meshwork simulate --horizon` adds to its Report.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <ostream>

#include "cli/commands.hpp"
#include "models/estimate.hpp"
#include "plan/plan_io.hpp"
#include "plan/units.hpp"
#include "report/report_io.hpp"
#include "sim/reliability.hpp"
#include "topology/builders.hpp"
#include "topology/faults.hpp"
#ifdef MESHWORK_HAVE_SIMGRID
#include "sim/simulate.hpp"
#endif

namespace meshwork::cli {

namespace {

std::string hours(double s) { return reliability::format_duration(s); }

// The first leaf-to-spine link's name as `failures.degraded_links` takes it, or "".
std::string a_fabric_link(const plan::Plan& p) {
  auto built = topology::build(p.cluster);
  if (!built.topology) return "";
  const auto& g = built.topology->graph;
  for (auto e : boost::make_iterator_range(boost::edges(g))) {
    if (g[e].tier != topology::LinkTier::leaf_to_spine) continue;
    auto a = boost::source(e, g), b = boost::target(e, g);
    if (g[a].kind != topology::VertexKind::leaf) std::swap(a, b);
    return topology::vertex_name(*built.topology, a) + "-" + topology::vertex_name(*built.topology, b);
  }
  return "";
}

}  // namespace

void print_reliability(std::ostream& out, const report::Reliability& r, double daly_s) {
  char buf[300];
  out << "  reliability (" << r.trials << " trials, seed " << r.seed << (r.horizon_s > 0 ? ", over " + hours(r.horizon_s) : ", to the token target") << "):\n";
  std::snprintf(buf, sizeof buf, "    goodput (ETTR) %.1f%% +- %.1f | %.1f interruptions per run | mean time to interruption %s\n", r.goodput * 100,
                r.goodput_ci95 * 100, r.interruptions, r.mtti_s > 0 ? hours(r.mtti_s).c_str() : "never");
  out << buf;
  if (r.time_to_train_s > 0) out << "    time to train " << hours(r.time_to_train_s) << " +- " << hours(r.time_to_train_ci95) << '\n';
  std::snprintf(buf, sizeof buf, "    checkpoint %.3g TB every %s (Daly's optimum %s)", r.checkpoint_bytes / 1e12, hours(r.checkpoint_interval_s).c_str(),
                daly_s > 0 ? hours(daly_s).c_str() : "none: nothing fails");
  out << buf;
  if (r.best_interval_s > 0) out << "; best in the sweep " << hours(r.best_interval_s);
  out << '\n';
  if (r.checkpoint_persist_s > 0) {
    out << "    each checkpoint: " << hours(r.checkpoint_snapshot_s) << " device-to-host, " << hours(r.checkpoint_persist_s)
        << " to persist; intervals from " << hours(r.checkpoint_min_interval_s) << " (one step, one write)\n";
  }
  out << "    interruptions by cause:";
  bool any = false;
  for (const auto& [cause, n] : r.interruptions_by_cause) {
    if (n <= 0) continue;
    std::snprintf(buf, sizeof buf, " %s %.1f", cause.c_str(), n);
    out << (any ? "," : "") << buf;
    any = true;
  }
  out << (any ? "\n" : " none\n");
  out << "    lost time by cause (per run):";
  any = false;
  for (const auto& [what, s] : r.losses_s) {
    if (s <= 0) continue;
    out << (any ? "," : "") << ' ' << what << ' ' << hours(s);
    any = true;
  }
  out << (any ? "\n" : " none\n");
}

void add_reliability_command(CLI::App& app, Io& io) {
  auto* cmd = app.add_subcommand("reliability", "A whole run with failures, checkpoints and restarts (Monte Carlo): goodput and its losses");
  auto file = std::make_shared<std::string>();
  auto trials = std::make_shared<std::int64_t>(0);
  auto seed = std::make_shared<std::int64_t>(-1);
  auto horizon = std::make_shared<std::string>();
  auto method = std::make_shared<std::string>("estimated");
  auto sweep = std::make_shared<bool>(false);
  auto csv = std::make_shared<std::string>();
  auto svg = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("PLAN", *file, "Plan file (YAML or JSON)")->required();
  cmd->add_option("--trials", *trials, "Monte Carlo trials (default: the plan's run.trials)");
  cmd->add_option("--seed", *seed, "Random seed (default: the plan's run.seed)");
  cmd->add_option("--horizon", *horizon, "Model this much wall-clock time (\"54d\") instead of running to training.tokens");
  cmd->add_option("--method", *method, "Step times: estimated (closed form) or simulated (SimGrid, per cluster state)")
      ->check(CLI::IsMember({"estimated", "simulated"}));
  cmd->add_flag("--sweep-interval", *sweep, "Goodput against the checkpoint interval (CSV and SVG)");
  cmd->add_option("--csv", *csv, "With --sweep-interval: the CSV file (default PLAN-interval.csv)");
  cmd->add_option("--svg", *svg, "With --sweep-interval: the plot (default PLAN-interval.svg)");
  cmd->add_flag("--json", *json, "Print the Report, with its reliability section, as JSON");
  auto ignore_memory = std::make_shared<bool>(false);
  cmd->add_flag("--ignore-memory", *ignore_memory, "Model a plan that does not fit in GPU memory anyway (the verdict is still printed)");
  cmd->footer("Exit status: 0 when the plan fits (a tight fit warns), 3 when it does not fit in GPU memory (no run is then modelled, unless --ignore-memory), 1 for a plan with errors, 2 bad usage.");
  cmd->callback([=, &io] {
    auto loaded = load_plan_for(io, *file, "reliability");
    if (!loaded) return;
    plan::Plan p = *loaded;
    if (*trials > 0) p.run.trials = *trials;
    if (*seed >= 0) p.run.seed = *seed;
    if (!horizon->empty()) {
      const auto q = plan::parse_quantity(*horizon, plan::Unit::seconds);
      if (!q.value || *q.value <= 0) {
        io.err << "meshwork reliability: --horizon: " << (q.error.empty() ? "must be a positive duration" : q.error) << '\n';
        io.exit_code = 2;
        return;
      }
      p.run.horizon_s = *q.value;
      p.training.tokens = 0;  // the horizon, not the target
    }
    report::Report rep = models::estimate(p);
    // The memory verdict first: a plan that does not fit has no run to model.
    if (!*json) io.out << memory_verdict_line(rep) << std::endl;  // flushed: --method simulated forks
    if (!rep.fits && !*ignore_memory) {
      io.exit_code = kExitDoesNotFit;
      io.err << *file << ": no run modelled: the plan does not fit in GPU memory (--ignore-memory models it anyway)\n";
      return;
    }
    reliability::StateStepTime step_with;
    if (*method == "simulated") {
#ifndef MESHWORK_HAVE_SIMGRID
      io.err << "meshwork reliability: --method simulated needs the simulator (SimGrid was not found)\n";
      io.exit_code = 1;
      return;
#else
      // The healthy step and each cluster state's, simulated once each.
      const sim::SimulateResult healthy = sim::simulate(p);
      if (!healthy.report) {
        io.err << *file << ": error: " << healthy.error << '\n';
        io.exit_code = 1;
        return;
      }
      const auto memory = rep.memory;
      const bool fits = rep.fits;
      rep = *healthy.report;
      rep.memory = memory;
      rep.fits = fits;
      auto cache = std::make_shared<std::map<std::pair<int, int>, double>>();
      const std::string link = a_fabric_link(p);
      step_with = [p, cache, link, base = rep.step_time_s](int stragglers, int degraded) {
        const auto key = std::pair{stragglers, degraded};
        if (auto it = cache->find(key); it != cache->end()) return it->second;
        plan::Plan state = p;
        if (stragglers > 0) state.failures.stragglers.push_back({0, p.failures.straggler_slowdown});
        if (degraded > 0 && !link.empty()) state.failures.degraded_links.push_back({link, p.failures.degraded_bandwidth_factor});
        const sim::SimulateResult r = sim::simulate(state);
        const double s = r.report ? r.report->step_time_s : base;
        (*cache)[key] = s;
        return s;
      };
#endif
    }
    const reliability::Derived d = reliability::inputs_for(p, rep.step_time_s, step_with);
    if (!d.error.empty()) {
      io.err << *file << ": error: " << d.error << '\n';
      io.exit_code = 1;
      return;
    }
    // Without failure rates nothing interrupts the run: 100% goodput by construction.
    const bool no_failure_model = !std::isfinite(d.mtti_s) || d.mtti_s <= 0;
    const std::string no_failures_note =
        "no failure rates in the plan: nothing interrupts the run, so goodput is 100% and the checkpoint interval "
        "has nothing to balance; add failures: {preset: llama3} (the Llama 3 405B fleet's rates) or failures.mtbf_hours";
    if (no_failure_model) io.err << *file << ": warning: " << no_failures_note << '\n';
    const bool tty = ::isatty(STDERR_FILENO) != 0;
    auto progress = [&io, tty](const char* what) {
      return std::function<void(double)>([&io, tty, what](double f) {
        if (!tty) return;
        char buf[80];
        std::snprintf(buf, sizeof buf, "\r%s: %3.0f%%", what, f * 100);
        io.err << buf << std::flush;
      });
    };
    const auto s = reliability::run(d.inputs, p.run.trials, static_cast<std::uint64_t>(p.run.seed), progress("trials"));
    if (tty) io.err << "\r                         \r" << std::flush;
    report::Reliability r = reliability::to_report(d, s, static_cast<std::uint64_t>(p.run.seed));
    const double stall = d.inputs.async ? d.inputs.snapshot_s : d.inputs.write_s;
    const double daly = std::isfinite(d.mtti_s) ? reliability::daly_interval_s(stall, d.mtti_s) : 0;
    if (*sweep) {
      const auto range = reliability::sweep_range(d, daly);
      const auto points = reliability::sweep_interval(d.inputs, range.lo_s, range.hi_s, 19, p.run.trials, static_cast<std::uint64_t>(p.run.seed),
                                                      progress("interval sweep"));
      if (tty) io.err << "\r                         \r" << std::flush;
      const auto best = reliability::best_interval(points);
      r.best_interval_s = points[best.index].interval_s;
      const std::string stem = std::filesystem::path(*file).stem().string();
      const std::string csv_path = csv->empty() ? stem + "-interval.csv" : *csv;
      const std::string svg_path = svg->empty() ? stem + "-interval.svg" : *svg;
      std::string error;
      if (!plan::write_file_atomically(csv_path, reliability::sweep_csv(points), error) ||
          !plan::write_file_atomically(svg_path, reliability::sweep_svg(points, p.name + ": goodput against the checkpoint interval", daly, d.inputs.interval_s), error)) {
        io.err << "meshwork reliability: " << error << '\n';
        io.exit_code = 1;
        return;
      }
      if (!*json) {
        io.out << "interval sweep: best " << hours(r.best_interval_s) << " (goodput within the best's 95% interval from " << hours(best.lo_s) << " to "
               << hours(best.hi_s) << "); wrote " << csv_path << " and " << svg_path << '\n';
      }
    }
    rep.reliability = r;
    if (no_failure_model) rep.notes.push_back(no_failures_note);
    if (*json) {
      io.out << report::to_json(rep).dump(2) << '\n';
      return;
    }
    char buf[200];
    std::snprintf(buf, sizeof buf, "plan %s: %lld GPUs, step %.2f s (%s)\n", p.name.c_str(), static_cast<long long>(p.cluster.num_gpus), rep.step_time_s,
                  rep.method == report::Method::simulated ? "simulated" : "estimated");
    io.out << buf;
    print_reliability(io.out, r, daly);
    if (no_failure_model) io.out << "  note: " << no_failures_note << '\n';
  });
}

}  // namespace meshwork::cli
