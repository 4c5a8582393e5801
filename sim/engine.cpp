// The simulation proper: the SimGrid platform from topology/, one actor per kind of TP group
// (or rank) playing its stage's Program, the flows of alike ranks played once (symmetry.hpp).
// The class and where its parts live: engine.hpp.
#include <unistd.h>

#include "sim/engine.hpp"

namespace meshwork::sim {
namespace engine {

SimulateResult Simulation::run() {
  SimulateResult out;
  const bool debug = std::getenv("MESHWORK_SIM_DEBUG") != nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  auto lap = [&](const char* what) {
    if (debug) std::fprintf(stderr, "%8.3f s  %s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), what);
  };
  const BlockTimer blocks{p_, layout_, timer_, options_.free_communication};
  auto merge = [&](models::StageProgram& c) {
    blocks_.push_back(options_.fine ? blocks.per_instruction(c) : blocks.coarsen(c));
    c.instrs.shrink_to_fit();
  };
  if (options_.program != nullptr) {
    program_ = *options_.program;
    for (auto& c : program_.classes) merge(c);
  } else {
    auto lowered = models::lower(p_, merge);
    if (!lowered.program) {
      out.error = lowered.error;
      return out;
    }
    program_ = std::move(*lowered.program);
  }
  lap("lowered and merged");
  auto built = topology::build(p_.cluster);
  if (!built.topology) {
    out.error = "cluster.topology: " + built.error;
    return out;
  }
  topo_ = std::move(*built.topology);
  for (const auto& d : p_.failures.degraded_links) {
    if (auto err = topology::apply_fault(topo_, {topology::FaultKind::degrade, d.target, d.bandwidth_factor})) {
      out.error = "failures.degraded_links: " + *err;
      return out;
    }
  }
  world_ = layout_.world_size();
  slowdown_.assign(static_cast<std::size_t>(world_), 1.0);
  for (const auto& s : p_.failures.stragglers) {
    if (s.rank >= 0 && s.rank < world_) slowdown_[static_cast<std::size_t>(s.rank)] = s.slowdown;
  }
  if (options_.failure) {
    if (auto err = resolve_failure()) {
      out.error = "failure: " + *err;
      return out;
    }
  }
  for (const auto r : options_.trace_ranks) {
    if (r < 0 || r >= world_) {
      out.error = "--trace-ranks: rank " + std::to_string(r) + " is outside the plan's " + std::to_string(world_) + " ranks";
      return out;
    }
  }

  // SimGrid's own log is for SimGrid's developers: warnings and worse only.
  // A failure leaves ranks waiting for good: SimGrid's engine reports that as a deadlock
  // (which is the point here), so its log is silenced then.
  int argc = options_.failure ? 4 : 2;
  char name[] = "meshwork";
  char quiet[] = "--log=root.thresh:warning";
  char alone[] = "--log=ker_engine.add:0";
  char hush[] = "--log=ker_engine.app:file:/dev/null";
  char* argv[] = {name, quiet, alone, hush, nullptr};
  sg4::Engine engine(&argc, argv);
  // The network model, set explicitly: CM02 without cross-traffic or TCP windows matches
  // the exact ring formulas (docs/reference/simgrid-3.32-notes.md, "Network model"). Links carry no
  // latency in SimGrid (CM02 would share a link in inverse proportion to each flow's
  // latency, as TCP does; InfiniBand's credits share it evenly): each transfer's route
  // latency is added when its flow completes.
  engine.set_config("network/model:CM02");
  engine.set_config("network/crosstraffic:0");
  engine.set_config("network/TCP-gamma:0");
  // Lazy action updates: an event re-solves only the actions it touches, not every host's
  // and every flow's (without it each event costs O(hosts), a 1,024-rank step O(N^2)).
  engine.set_config("cpu/optim:Lazy");
  engine.set_config("network/optim:Lazy");
  // Microsecond kernels and latencies: keep event times exact well below them.
  engine.set_config("surf/precision:1e-13");
  // Actors here keep little on their stacks (KiB; SimGrid's default is 8 MiB each).
  engine.set_config("contexts/stack-size:128");
  // No guard page below each stack: SimGrid mprotects one per actor, two kernel mappings
  // each, and a ZeRO-3 plan of 640 GPUs has more actors than Linux's default
  // vm.max_map_count (65,530) allows ("Failed to protect stack"). The stacks come from
  // the heap instead (the actors keep a few KiB on theirs, above).
  engine.set_config("contexts/guard-size:0");
#if defined(__SANITIZE_ADDRESS__)
  engine.set_config("contexts/factory:thread");  // ASan-clean contexts (the notes)
#endif

  find_peers();
  find_routes();
  lap("routes");
  plan_actors();
  lap("colours");
  build_platform();
  if (std::getenv("MESHWORK_SIM_DEBUG") != nullptr) {
    for (const auto& c : program_.classes) std::fprintf(stderr, "stage %lld: %zu instructions to play\n", static_cast<long long>(c.stage), c.instrs.size());
    std::fprintf(stderr, "%zu actors play %d colours of %lld ranks (%d rounds); %d link colours, %zu flow classes\n", leads_.size(),
                 colouring_.colours, static_cast<long long>(world_), colouring_.rounds, colouring_.link_colours, flow_class_.size());
  }
  actors_.resize(leads_.size());
  if (!options_.trace_path.empty()) {
    traced_ = options_.trace_ranks;
    if (traced_.empty()) {
      for (std::int64_t s = 0; s < program_.stages; ++s) {
        plan::MeshCoord c{};
        c.pp = s;
        traced_.push_back(layout_.rank(c));
      }
    }
    for (auto r : traced_) actors_[played_actor_of(r)].traced = true;
  }
  for (std::size_t a = 0; a < leads_.size(); ++a) {
    sg4::Actor::create("rank" + std::to_string(leads_[a]), host_of_[static_cast<std::size_t>(leads_[a])], [this, a] { play(a); });
  }
  if (options_.failure) {
    // A daemon: a failure due after the step has ended does not hold the step.
    sg4::Actor::create("failure", sink_, [this] { play_failure(); })->daemonize();
  }
  engine.run();
  lap("played");
  makespan_ = sg4::Engine::get_clock();
  const bool stopped = std::any_of(actors_.begin(), actors_.end(), [](const ActorState& st) { return !st.finished; });
  if (options_.failure && options_.failure->at_s < makespan_ && (!failing_hosts_.empty() || stopped)) {
    // Who stopped with the failed host, who waits for good, and when the last one stopped.
    Interruption i;
    i.target = options_.failure->target;
    i.at_s = options_.failure->at_s;
    i.ranks = world_;
    for (std::int64_t r = 0; r < world_; ++r) {
      const ActorState& st = actors_[played_actor_of(r)];
      i.stalled_s = std::max(i.stalled_s, st.last_active_s);
      if (failing_rank_[static_cast<std::size_t>(r)]) ++i.ranks_stopped;
      else if (!st.finished) ++i.ranks_waiting;
    }
    i.partitioned = partitioned_;
    out.interruption = i;
    out.played_actors = colouring_.colours;
    return out;
  }
  for (std::size_t a = 0; a < leads_.size(); ++a) {
    if (!actors_[a].finished) {
      out.error = "rank " + std::to_string(leads_[a]) + " did not finish its Program (a deadlock in the simulation)";
      return out;
    }
  }
  out.report = make_report();
  if (colouring_.refused_colours > 0) {
    char note[512];
    std::snprintf(note, sizeof note,
                  "approximate: %d played %s for %zu (an exact play needs %d or more, past the budget of %lld%s; --max-played-actors 0 "
                  "plays exactly); actors alike but for their paths move at their class's slowest pace, so a collision that one meets and "
                  "another does not is not seen",
                  colouring_.colours, colouring_.colours == 1 ? "actor stands" : "actors stand",
                  node_of_.empty() ? std::size_t{0} : static_cast<std::size_t>(*std::max_element(node_of_.begin(), node_of_.end()) + 1),
                  colouring_.refused_colours, static_cast<long long>(options_.max_played_actors),
                  colouring_.colours > options_.max_played_actors ? ", which the plan's structure alone passes" : "");
    out.report->notes.emplace_back(note);
  }
  if (!options_.trace_path.empty()) {
    std::string error;
    if (!plan::write_file_atomically(options_.trace_path, trace_json(), error)) out.error = "trace: " + error;
  }
  for (const auto& fc : flow_class_) flows_ += fc.members * fc.played;
  out.flows = flows_;
  out.played_actors = colouring_.colours;
  link_bytes_.assign(2 * links_.size(), 0.0);
  for (const auto& fc : flow_class_) {
    for (const auto& [slot, count] : fc.on_slot) link_bytes_[slot] += fc.bytes * count;
  }
  out.hottest_links = hottest_links();
  if (!failing_links_.empty() && options_.failure->at_s < makespan_) {
    Reroute rr;
    rr.target = options_.failure->target;
    rr.at_s = options_.failure->at_s;
    rr.reroute_s = p_.cluster.topology.effective_reroute_s();
    rr.flows_moved = flows_moved_;
    out.reroute = rr;
    char note[400];
    std::snprintf(note, sizeof note,
                  "%s failed %.4g s into the step; the fabric moved its traffic to other paths %.4g s later (cluster.topology.reroute_s, %s), "
                  "%lld played flows moved: the step is slower, not stopped",
                  rr.target.c_str(), rr.at_s, rr.reroute_s,
                  p_.cluster.topology.reroute_s >= 0 ? "as set" : p_.cluster.topology.routing == plan::Routing::d_mod_k ? "d_mod_k: OpenSM's sweep" : "the routing's",
                  static_cast<long long>(rr.flows_moved));
    out.report->notes.emplace_back(note);
  }
  return out;
}

}  // namespace engine

SimulateResult simulate_here(const plan::Plan& plan, const SimulateOptions& options, int progress_fd) {
  // Progress goes to the caller as lines on `progress_fd` (simulate() reads them).
  auto progress = [progress_fd](double fraction) {
    const std::string line = "progress " + std::to_string(fraction) + "\n";
    [[maybe_unused]] const auto ignored = ::write(progress_fd, line.data(), line.size());
  };
  engine::Simulation s(plan, options, progress_fd >= 0 ? std::function<void(double)>(progress) : std::function<void(double)>());
  return s.run();
}

}  // namespace meshwork::sim
