// The simulation proper: the SimGrid platform from topology/, one actor per kind of TP group
// (or rank) playing its stage's Program, the flows of alike ranks played once (symmetry.hpp).
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <simgrid/kernel/routing/NetPoint.hpp>
#include <simgrid/kernel/routing/NetZoneImpl.hpp>
#include <simgrid/Exception.hpp>
#include <simgrid/s4u.hpp>
#include <unordered_map>

#include "models/comm.hpp"
#include "models/compute_time.hpp"
#include "models/estimate.hpp"
#include "models/flops.hpp"
#include "models/headline.hpp"
#include "models/program.hpp"
#include "models/program_trace.hpp"
#include "plan/plan_io.hpp"
#include "plan/rank_layout.hpp"
#include "plan/validate.hpp"
#include "report/trace.hpp"
#include "sim/blocks.hpp"
#include "sim/failure_target.hpp"
#include "sim/flow_routes.hpp"
#include "sim/simulate.hpp"
#include "sim/symmetry.hpp"
#include "topology/builders.hpp"
#include "topology/faults.hpp"
#include "topology/router.hpp"

namespace meshwork::sim {
namespace {

namespace sg4 = simgrid::s4u;
using models::Instr;
using models::InstrKind;

// Hosts' speed: nothing executes on them (compute is a sleep of the actor playing it).
constexpr double kSpeed = 1e12;
// A failed link until the fabric reroutes: packets go nowhere. A trickle rather than 0 keeps
// SimGrid's sharing finite; a flow on it moves 1 byte in a thousand seconds.
constexpr double kStalledBytesPerS = 1e-3;

// What the compute stream waited for before an instruction: the kind of its `after`.
enum class Wait { none, pipeline, tp, cp, ep, dp };

Wait wait_of(const Instr& in) {
  if (in.kind == InstrKind::recv) return Wait::pipeline;
  switch (in.stream) {
    case models::Stream::tp: return Wait::tp;
    case models::Stream::cp: return Wait::cp;
    case models::Stream::ep: return Wait::ep;
    case models::Stream::dp: return Wait::dp;
    default: return Wait::none;
  }
}

// A class of flows: the flows of one type of every rank of one colour, played as the flow of
// its representative.
struct FlowClass {
  std::int64_t from = -1;     // the representative rank
  std::int64_t members = 0;   // flows it stands for
  double latency_s = 0;
  double bytes = 0;           // played so far (per member)
  std::int64_t played = 0;    // flows played
  std::vector<std::pair<std::size_t, std::int32_t>> on_slot;  // (link slot, members crossing it)
};

// The platform's one zone: a route per source host (a flow class's, to the common sink),
// links repeated as given. SimGrid's own zones either keep a table of every pair (full) or
// drop a link that a route repeats (star), and the repetitions are the class's weights.
class ClassZone : public simgrid::kernel::routing::NetZoneImpl {
 public:
  explicit ClassZone(const std::string& name) : NetZoneImpl(name) {}
  void set_route(const sg4::Host* from, const std::vector<sg4::Link*>& links) {
    const auto id = from->get_netpoint()->id();
    if (id >= routes_.size()) routes_.resize(id + 1);
    for (const auto* l : links) routes_[id].push_back(l->get_impl());
  }
  void get_local_route(const simgrid::kernel::routing::NetPoint* src, const simgrid::kernel::routing::NetPoint* /*dst*/,
                       simgrid::kernel::routing::Route* into, double* /*latency*/) override {
    if (src->id() < routes_.size()) into->link_list_.insert(into->link_list_.end(), routes_[src->id()].begin(), routes_[src->id()].end());
  }

 private:
  std::vector<std::vector<simgrid::kernel::resource::StandardLinkImpl*>> routes_;  // by source netpoint id
};

class Simulation {
 public:
  Simulation(const plan::Plan& p, const SimulateOptions& options, int progress_fd)
      : p_(p), options_(options), progress_fd_(progress_fd), layout_(plan::RankLayout::from_plan(p.parallelism)), timer_(p) {}

  SimulateResult run() {
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
                    "approximate: %d played %s for %zu (an exact play needs %d or more, past the budget of %lld; --max-played-actors 0 plays "
                    "exactly); actors alike but for their paths move at their class's slowest pace, so a collision that one meets and "
                    "another does not is not seen",
                    colouring_.colours, colouring_.colours == 1 ? "actor stands" : "actors stand",
                    node_of_.empty() ? std::size_t{0} : static_cast<std::size_t>(*std::max_element(node_of_.begin(), node_of_.end()) + 1),
                    colouring_.refused_colours, static_cast<long long>(options_.max_played_actors));
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

 private:
  const models::StageProgram& stage_of(std::int64_t rank) const {
    return program_.classes[static_cast<std::size_t>(layout_.coord(rank).pp)];
  }

  // The failure's target (sim/failure_target.hpp): the ranks that stop, or the links that go down.
  std::optional<std::string> resolve_failure() {
    FailureTarget t = resolve_failure_target(options_.failure->target, topo_, world_, p_.cluster.gpus_per_node);
    if (!t.error.empty()) return t.error;
    failing_rank_ = std::move(t.rank);
    failing_link_ids_ = std::move(t.links);
    after_ = std::move(t.after);
    return std::nullopt;
  }

  // Who each rank sends to: its ring successor in every group a collective uses (type k of
  // `kinds_`), and its pipeline neighbours (types K and K+1).
  void find_peers() {
    for (const auto& sp : program_.classes) {
      for (const auto& in : sp.instrs) {
        if (in.kind == InstrKind::collective && layout_.group_size(in.group) > 1 && std::find(kinds_.begin(), kinds_.end(), in.group) == kinds_.end()) {
          kinds_.push_back(in.group);
        }
      }
    }
    const std::size_t types = kinds_.size() + 2;
    peer_.assign(types, std::vector<std::int64_t>(static_cast<std::size_t>(world_), -1));
    group_.assign(types, {});
    for (std::size_t t = 0; t < kinds_.size(); ++t) group_[t].assign(static_cast<std::size_t>(world_), -1);
    nets_.clear();
    for (const auto g : kinds_) nets_.push_back(models::group_network(p_, timer_.hardware(), g));
    for (std::int64_t r = 0; r < world_; ++r) {
      const auto i = static_cast<std::size_t>(r);
      for (std::size_t t = 0; t < kinds_.size(); ++t) {
        peer_[t][i] = ring_successor(t, r);
        group_[t][i] = layout_.group_index(kinds_[t], r);
      }
      if (program_.stages > 1) {
        const auto v = models::for_rank(program_, layout_, r);
        peer_[kinds_.size()][i] = v.next_rank;
        peer_[kinds_.size() + 1][i] = v.prev_rank;
      }
    }
  }
  // A rank's neighbour in its group's ring (plan::ring_successor: on the next node, the member
  // at the same position, which models/comm's rates assume).
  std::int64_t ring_successor(std::size_t t, std::int64_t r) const {
    const auto members = layout_.group_members(kinds_[t], r);
    const auto pos = static_cast<std::size_t>(layout_.rank_in_group(kinds_[t], r));
    return plan::ring_successor(members, pos, nets_[t].crosses_nodes ? nets_[t].per_node : 1, p_.cluster.gpus_per_node);
  }
  std::size_t kind_type(plan::GroupKind g) const {
    return static_cast<std::size_t>(std::find(kinds_.begin(), kinds_.end(), g) - kinds_.begin());
  }

  // Our own routes (topology::Router; no N x N table): one per rank and flow type.
  void find_routes() {
    const auto& hw = timer_.hardware();
    links_.resize(boost::num_edges(topo_.graph));
    for (auto e : boost::make_iterator_range(boost::edges(topo_.graph))) {
      const auto& l = topo_.graph[e];
      // What a collective achieves of a link's line rate (the hardware profile's NVLink and
      // NIC efficiencies, the same the estimate uses). A link that is down keeps a trickle;
      // routes avoid it.
      const double efficiency = l.tier == topology::LinkTier::nvlink ? hw.nvlink_efficiency : hw.nic_efficiency;
      links_[static_cast<std::size_t>(l.id)] = {std::max(l.bandwidth_gbytes_per_s, 1e-9) * 1e9 * efficiency, l.latency_us * 1e-6,
                                                boost::source(e, topo_.graph), boost::target(e, topo_.graph)};
    }
    if (options_.free_communication) {
      route_.assign(peer_.size(), std::vector<Route>(static_cast<std::size_t>(world_)));
      flows_per_edge_.assign(peer_.size(), 1);
      return;
    }
    std::vector<double> latency_s(links_.size());
    for (std::size_t i = 0; i < links_.size(); ++i) latency_s[i] = links_[i].latency_s;
    FlowRoutes routes = route_flows(topo_, p_.cluster.topology, peer_, latency_s);
    for (std::size_t t = 0; t < peer_.size(); ++t) {
      for (std::int64_t a = 0; a < world_; ++a) {
        if (routes.route[t][static_cast<std::size_t>(a)].unreachable) {
          throw std::runtime_error("no route from rank " + std::to_string(a) + " to " + std::to_string(peer_[t][static_cast<std::size_t>(a)]));
        }
      }
    }
    route_ = std::move(routes.route);
    flows_per_edge_ = std::move(routes.flows_per_edge);
    base_types_ = peer_.size();
    if (!after_) return;
    // A link or switch that fails: every flow type again, on the fabric without it (types
    // base_types_ and up), played once the fabric has rerouted. A pair the fault leaves without
    // a path keeps its old route, which crosses the dead link: its flows fail there.
    FlowRoutes rerouted = route_flows(*after_, p_.cluster.topology, peer_, latency_s);
    for (std::size_t t = 0; t < base_types_; ++t) {
      for (std::size_t a = 0; a < static_cast<std::size_t>(world_); ++a) {
        Route& r = rerouted.route[t][a];
        if (!r.unreachable) continue;
        r = route_[t][a];
        if (partitioned_.empty()) {
          const std::string what = t < kinds_.size() ? std::string(plan::to_string(kinds_[t])) + " ring edge" : "pipeline transfer";
          partitioned_ = "the " + what + " from rank " + std::to_string(a) + " to rank " + std::to_string(peer_[t][a]) + " has no path without " +
                         options_.failure->target;
        }
      }
      peer_.push_back(peer_[t]);
      group_.push_back(group_[t]);
      route_.push_back(std::move(rerouted.route[t]));
      flows_per_edge_.push_back(rerouted.flows_per_edge[t]);
    }
  }
  bool has_flow(std::size_t t, std::int64_t r) const {
    const std::int64_t to = peer_[t][static_cast<std::size_t>(r)];
    return to >= 0 && to != r;
  }

  // Who is played. By default (merged blocks, a TP group inside one NVLink domain) an actor
  // is a TP group: its members meet in a TP collective inside every block, so they compute in
  // lockstep at the pace of the slowest (a straggler holds its whole group), and its lanes
  // (one rank per TP coordinate) move their pipeline and DP/CP/EP bytes side by side: one
  // flow per transfer whose route crosses each link once per lane on it, finishing when the
  // slowest lane would (lanes on one bottleneck share it as separate flows would; a faster
  // lane does not free its links early). `--fine` plays every rank as its own actor with its
  // own flows, the reference. Actors are then coloured (symmetry.hpp) and one of each colour
  // is played.
  void plan_actors() {
    const std::int64_t tp = layout_.group_size(plan::GroupKind::tp);
    const bool grouped = !options_.fine && tp > 1 && layout_.group_span(plan::GroupKind::tp) < p_.cluster.gpus_per_node;
    node_of_.resize(static_cast<std::size_t>(world_));
    std::vector<std::vector<std::int64_t>> lanes;  // per node, ascending (the first leads)
    for (std::int64_t r = 0; r < world_; ++r) {
      const std::int64_t v = grouped ? layout_.group_index(plan::GroupKind::tp, r) : r;
      node_of_[static_cast<std::size_t>(r)] = v;
      if (static_cast<std::size_t>(v) >= lanes.size()) lanes.resize(static_cast<std::size_t>(v) + 1);
      lanes[static_cast<std::size_t>(v)].push_back(r);
    }
    const std::size_t nodes = lanes.size(), types = peer_.size();
    FlowSystem fs;
    fs.ranks = static_cast<std::int64_t>(nodes);
    fs.actor.resize(nodes);
    fs.initial.resize(nodes);
    pace_.assign(nodes, 1.0);
    std::map<std::pair<std::int64_t, double>, std::int64_t> start;
    for (std::size_t v = 0; v < nodes; ++v) {
      fs.actor[v] = static_cast<std::int64_t>(v);
      for (auto r : lanes[v]) pace_[v] = std::max(pace_[v], slowdown_[static_cast<std::size_t>(r)]);
      // A node that will fail is unlike any other.
      bool doomed = false;
      for (auto r : lanes[v]) doomed = doomed || (!failing_rank_.empty() && failing_rank_[static_cast<std::size_t>(r)]);
      fs.initial[v] = start.emplace(std::pair{layout_.coord(lanes[v].front()).pp * 2 + (doomed ? 1 : 0), pace_[v]}, static_cast<std::int64_t>(start.size())).first->second;
    }
    fs.peer.assign(types, std::vector<std::int64_t>(nodes, -1));
    fs.group.assign(types, {});
    fs.route.assign(types, std::vector<const std::vector<topology::Hop>*>(nodes, nullptr));
    fs.latency_s.assign(types, std::vector<double>(nodes, 0.0));
    bundle_.assign(types, std::vector<Route>(nodes));
    lane_flows_.assign(types, std::vector<std::int32_t>(nodes, 0));
    for (std::size_t t = 0; t < types; ++t) {
      if (!group_[t].empty()) fs.group[t].assign(nodes, -1);
      for (std::size_t v = 0; v < nodes; ++v) {
        const std::int64_t lead = lanes[v].front();
        const std::int64_t to = peer_[t][static_cast<std::size_t>(lead)];
        fs.peer[t][v] = to < 0 ? -1 : node_of_[static_cast<std::size_t>(to)];
        if (!group_[t].empty()) fs.group[t][v] = group_[t][static_cast<std::size_t>(lead)];
        if (!has_flow(t, lead)) continue;
        Route& b = bundle_[t][v];
        for (auto r : lanes[v]) {
          const Route& mine = route_[t][static_cast<std::size_t>(r)];
          b.hops.insert(b.hops.end(), mine.hops.begin(), mine.hops.end());
          b.latency_s = std::max(b.latency_s, mine.latency_s);
          ++lane_flows_[t][v];
        }
        fs.route[t][v] = &b.hops;
        fs.latency_s[t][v] = b.latency_s;
      }
    }
    fs.capacity.resize(2 * links_.size());
    for (std::size_t i = 0; i < links_.size(); ++i) fs.capacity[2 * i] = fs.capacity[2 * i + 1] = links_[i].bytes_per_s;
    if (!failing_link_ids_.empty()) {
      fs.mark.assign(fs.capacity.size(), 0);
      for (const auto id : failing_link_ids_) fs.mark[static_cast<std::size_t>(2 * id)] = fs.mark[static_cast<std::size_t>(2 * id + 1)] = 1;
    }
    colouring_ = colour_ranks(fs, options_.mirror_alike, static_cast<std::int32_t>(std::clamp<std::int64_t>(options_.max_played_actors, 0, INT32_MAX)));

    // One played actor per colour, led by its first rank.
    const auto colours = static_cast<std::size_t>(colouring_.colours);
    rep_.assign(colours, -1);
    played_actor_.assign(colours, 0);
    for (std::size_t v = 0; v < nodes; ++v) {
      const auto c = static_cast<std::size_t>(colouring_.colour[v]);
      if (rep_[c] >= 0) continue;
      rep_[c] = lanes[v].front();
      played_actor_[c] = leads_.size();
      leads_.push_back(lanes[v].front());
    }
    // Flow classes: per (colour, type), the lane flows they stand for and the links these cross.
    flow_class_.assign(colours * types, {});
    std::vector<std::unordered_map<std::size_t, std::int32_t>> count(colours * types);
    for (std::size_t t = 0; t < types; ++t) {
      for (std::size_t v = 0; v < nodes; ++v) {
        if (lane_flows_[t][v] == 0) continue;
        const auto c = static_cast<std::size_t>(colouring_.colour[v]);
        FlowClass& fc = flow_class_[c * types + t];
        fc.members += lane_flows_[t][v];
        fc.from = rep_[c];
        fc.latency_s = std::max(fc.latency_s, bundle_[t][v].latency_s);  // members alike in structure only: the slowest
        for (const auto& h : bundle_[t][v].hops) ++count[c * types + t][h.slot()];
      }
    }
    for (std::size_t i = 0; i < flow_class_.size(); ++i) {
      flow_class_[i].on_slot.assign(count[i].begin(), count[i].end());
      std::sort(flow_class_[i].on_slot.begin(), flow_class_[i].on_slot.end());
    }
    // The distinct colours in each kind of collective group.
    group_colours_.clear();
    for (std::size_t t = 0; t < kinds_.size(); ++t) {
      for (std::size_t v = 0; v < nodes; ++v) {
        const auto kind = colouring_.group_kind[t][v];
        if (kind < 0) continue;
        auto& cs = group_colours_[kind];
        const auto c = colouring_.colour[v];
        if (std::find(cs.begin(), cs.end(), c) == cs.end()) cs.push_back(c);
      }
    }
  }
  std::int32_t colour_of(std::int64_t rank) const { return colouring_.colour[static_cast<std::size_t>(node_of_[static_cast<std::size_t>(rank)])]; }
  std::int32_t group_kind_of(std::size_t type, std::int64_t rank) const {
    return colouring_.group_kind[type][static_cast<std::size_t>(node_of_[static_cast<std::size_t>(rank)])];
  }
  std::size_t played_actor_of(std::int64_t rank) const { return played_actor_[static_cast<std::size_t>(colour_of(rank))]; }
  std::size_t flow_class_of(std::int64_t rank, std::size_t type) const {
    return static_cast<std::size_t>(colour_of(rank)) * peer_.size() + type;
  }

  // The SimGrid platform: a host per played actor (its compute), and per flow class a host
  // whose route to the common sink goes through each link colour as many times as members
  // of the class cross one link of that colour (symmetry.hpp: SimGrid adds the repeated
  // consumptions up).
  void build_platform() {
    auto* impl = new ClassZone("cluster");  // owned by SimGrid's engine
    auto* zone = impl->get_iface();
    host_of_.assign(static_cast<std::size_t>(world_), nullptr);
    for (const auto lead : leads_) {
      auto* host = zone->create_host("gpu" + std::to_string(lead), kSpeed);
      host_of_[static_cast<std::size_t>(lead)] = host;
      if (!failing_rank_.empty() && failing_rank_[static_cast<std::size_t>(lead)]) failing_hosts_.push_back(host);
    }
    sink_ = zone->create_host("sink", kSpeed);
    std::vector<sg4::Link*> by_colour(static_cast<std::size_t>(colouring_.link_colours), nullptr);
    sg4::Link* free_link = nullptr;
    if (options_.free_communication) {
      free_link = zone->create_link("free", 1e30)->set_sharing_policy(sg4::Link::SharingPolicy::FATPIPE)->set_latency(0);
    } else {
      for (std::size_t slot = 0; slot < colouring_.link_colour.size(); ++slot) {
        const auto k = colouring_.link_colour[slot];
        if (k < 0 || by_colour[static_cast<std::size_t>(k)] != nullptr) continue;
        by_colour[static_cast<std::size_t>(k)] = zone->create_link("k" + std::to_string(k), links_[slot / 2].bytes_per_s)->set_latency(0);
        if (std::find(failing_link_ids_.begin(), failing_link_ids_.end(), static_cast<std::int64_t>(slot / 2)) != failing_link_ids_.end()) {
          failing_links_.push_back(by_colour[static_cast<std::size_t>(k)]);
        }
      }
    }
    // Per flow class, the members it puts on one link of each colour it crosses.
    std::vector<std::map<std::int32_t, std::int32_t>> per_colour(flow_class_.size());
    for (std::size_t i = 0; i < flow_class_.size(); ++i) {
      for (const auto& [slot, count] : flow_class_[i].on_slot) per_colour[i][colouring_.link_colour[slot]] = count;
    }
    // A link colour crossed by exactly the same classes with the same weights as another of
    // no more capacity can never bind before it (a GPU's link to its NIC and the NIC's to its
    // leaf carry the same flows): it is left out of every route, which changes no rate.
    std::vector<std::vector<std::pair<std::size_t, std::int32_t>>> users(static_cast<std::size_t>(colouring_.link_colours));
    for (std::size_t i = 0; i < flow_class_.size(); ++i) {
      for (const auto& [k, count] : per_colour[i]) users[static_cast<std::size_t>(k)].emplace_back(i, count);
    }
    std::vector<bool> dominated(users.size(), false);
    if (!options_.free_communication) {
      std::map<std::vector<std::pair<std::size_t, std::int32_t>>, std::int32_t> tightest;  // users -> the link colour kept
      for (std::size_t k = 0; k < users.size(); ++k) {
        if (users[k].empty()) continue;
        if (std::find(failing_links_.begin(), failing_links_.end(), by_colour[k]) != failing_links_.end()) continue;  // kept: it fails
        const auto [it, fresh] = tightest.emplace(users[k], static_cast<std::int32_t>(k));
        if (fresh) continue;
        const auto kept = static_cast<std::size_t>(it->second);
        if (by_colour[k]->get_bandwidth() < by_colour[kept]->get_bandwidth()) {
          dominated[kept] = true;
          it->second = static_cast<std::int32_t>(k);
        } else {
          dominated[k] = true;
        }
      }
    }
    flow_host_.assign(flow_class_.size(), nullptr);
    crosses_failed_.assign(flow_class_.size(), false);
    for (std::size_t i = 0; i < flow_class_.size(); ++i) {
      for (const auto& [slot, count] : flow_class_[i].on_slot) {
        if (std::find(failing_link_ids_.begin(), failing_link_ids_.end(), static_cast<std::int64_t>(slot / 2)) != failing_link_ids_.end()) crosses_failed_[i] = true;
      }
    }
    for (std::size_t i = 0; i < flow_class_.size(); ++i) {
      const FlowClass& fc = flow_class_[i];
      if (fc.members == 0) continue;
      std::vector<sg4::Link*> route;
      if (options_.free_communication) {
        route.push_back(free_link);
      } else {
        for (const auto& [k, count] : per_colour[i]) {
          if (dominated[static_cast<std::size_t>(k)]) continue;
          for (std::int32_t j = 0; j < count; ++j) route.push_back(by_colour[static_cast<std::size_t>(k)]);
        }
      }
      flow_host_[i] = zone->create_host("flow" + std::to_string(i), kSpeed);
      impl->set_route(flow_host_[i], route);
    }
    zone->seal();
  }

  // A transfer that failed (its link went down): NCCL's ranks wait for it until their
  // watchdog fires; so does this actor, for good.
  static void hang() { sg4::this_actor::suspend(); }

  // The flow class `from`'s flows of `type` belong to now: once the fabric has rerouted
  // around a failed link or switch, the class of the same flows on the faulted fabric.
  std::size_t class_now(std::int64_t from, std::size_t type) const { return flow_class_of(from, rerouted_ ? type + base_types_ : type); }
  // What one flow of class `i` carries of an edge's `bytes`: the edge is played as one flow
  // over all its flows' paths (flow_routes.hpp).
  double share(std::size_t i, double bytes) const { return bytes / flows_per_edge_[i % peer_.size()]; }

  // A flow of `type` (an edge of `bytes`) from played rank `from`, standing for its class,
  // which `cls` receives.
  sg4::CommPtr send_flow(std::int64_t from, std::size_t type, double bytes, std::size_t* cls = nullptr) {
    const std::size_t i = class_now(from, type);
    if (cls != nullptr) *cls = i;
    FlowClass& fc = flow_class_[i];
    const double b = share(i, bytes);
    fc.bytes += b;
    ++fc.played;
    if (options_.free_communication || bytes <= 0) return nullptr;
    if (rerouted_ && crosses_failed_[flow_class_of(from, type)]) ++flows_moved_;
    sg4::CommPtr flow = sg4::Comm::sendto_async(flow_host_[i], sink_, payload(b));
    const std::size_t now = class_now(from, type);
    if (now != i) {
      // The fabric rerouted while the flow was being started (starting it let the failure
      // daemon run): it goes on the new paths, all of it.
      flow->cancel();
      fc.bytes -= b;
      flow_class_[now].bytes += share(now, bytes);
      if (cls != nullptr) *cls = now;
      if (crosses_failed_[i]) ++flows_moved_;
      flow = sg4::Comm::sendto_async(flow_host_[now], sink_, payload(share(now, bytes)));
    }
    return flow;
  }

  // Waits for the flow in `slot`. The failure daemon may move it onto a new path meanwhile
  // (it cancels the old flow and puts the new one in the slot): then waits for that. Returns
  // false when the flow failed (its link went down and no path is left).
  static bool wait_flow(const sg4::CommPtr& slot) {
    for (;;) {
      const sg4::CommPtr mine = slot;  // the daemon may drop the slot's reference
      try {
        // Activity's wait, not Comm's: Comm's would start a prepared flow itself.
        static_cast<sg4::Activity&>(*mine).wait_for(-1.0);
        return true;
      } catch (const simgrid::NetworkFailureException&) {
        if (slot == mine) return false;
      }
    }
  }

  // The failure of options_.failure: at its time a GPU's or node's host turns off; a link's
  // or switch's links stall what crosses them (a trickle keeps SimGrid's rates finite) until
  // the fabric reroutes, reroute_s later. Then every flow in flight or prepared on a failed
  // link moves to its class on the faulted fabric with the bytes it has left, flows started
  // later take that class (send_flow), and the links turn off: a pair left without a path
  // fails there and its ranks wait, as NCCL's do until the watchdog.
  void play_failure() {
    sg4::this_actor::sleep_until(options_.failure->at_s);
    for (auto* h : failing_hosts_) h->turn_off();
    if (failing_links_.empty()) return;
    for (auto* l : failing_links_) l->set_bandwidth(kStalledBytesPerS);
    sg4::this_actor::sleep_until(options_.failure->at_s + p_.cluster.topology.effective_reroute_s());
    rerouted_ = true;
    // Two passes: the first swaps unstarted replacements into the slots without handing
    // control to any actor (the slots and the maps stay as they are meanwhile); the second
    // starts them and cancels the old flows, which lets the waiters run.
    std::vector<std::pair<sg4::CommPtr, sg4::CommPtr>> moved;  // (old started flow, its replacement)
    for (auto& [slot, cls] : in_flight_) move_flow(*slot, *cls, 0, moved);
    for (auto& [key, e] : p2p_) {
      if (e.flow) move_flow(e.flow, e.cls, e.bytes, moved);
    }
    for (auto& [old, fresh] : moved) {
      fresh->start();
      old->cancel();
    }
    for (auto* l : failing_links_) l->turn_off();
  }
  // Moves `flow` of class `cls` off the failed links, when it crosses one and its pair still
  // has a path: a started flow with the bytes it has left (queued in `started`, to start), a
  // prepared one (`bytes`: its edge's) unstarted on the new class, for its sender to start.
  void move_flow(sg4::CommPtr& flow, std::size_t& cls, double bytes, std::vector<std::pair<sg4::CommPtr, sg4::CommPtr>>& started) {
    const std::size_t types = peer_.size(), type = cls % types;
    if (!crosses_failed_[cls] || type >= base_types_) return;
    const std::size_t to = cls + base_types_;
    if (crosses_failed_[to]) return;  // partitioned: it fails when the links turn off
    const auto state = flow->get_state();
    if (state == sg4::Activity::State::FINISHED || state == sg4::Activity::State::FAILED || state == sg4::Activity::State::CANCELED) return;
    // Made by a receiver and not yet sent: sendto_init leaves it STARTING in SimGrid 3.32.
    const bool unstarted = state == sg4::Activity::State::INITED || state == sg4::Activity::State::STARTING;
    if (unstarted) {
      // Its sender starts the replacement, and counts its bytes then.
      ++flows_moved_;
      flow = sg4::Comm::sendto_init(flow_host_[to], sink_)->set_payload_size(payload(share(to, bytes)));
      cls = to;
      return;
    }
    // A started flow: the bytes of its edge still to go (its remainder is one share). One
    // that has delivered them, not yet waited for, stays.
    const double left = flow->get_remaining();
    if (left <= 0) return;
    ++flows_moved_;
    const double edge_left = left * flows_per_edge_[type];
    const sg4::CommPtr old = flow;
    flow = sg4::Comm::sendto_init(flow_host_[to], sink_)->set_payload_size(payload(share(to, edge_left)));
    flow_class_[cls].bytes -= left;
    flow_class_[to].bytes += share(to, edge_left);
    cls = to;
    started.emplace_back(old, flow);
  }
  // A flow's payload: at least a byte, since SimGrid never starts an empty one (its waiter
  // would wait for good).
  static std::uint64_t payload(double bytes) { return std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::llround(bytes))); }

  // A pipeline transfer: its flow starts once the sender has sent and the receiver posted
  // its receive (a rendezvous, as NCCL's send and receive), whichever comes second; it is
  // seen complete a route latency after its last byte.
  struct P2p {
    std::int64_t src = -1;
    std::size_t type = 0;
    double bytes = 0;
    bool sent = false, posted = false;
    bool prepared = false;       // the receiver made the flow; the send starts it
    sg4::CommPtr flow;
    std::size_t cls = 0;         // the flow's class
    sg4::SemaphorePtr ready;  // the receiver, waiting for the send
  };
  static std::uint64_t p2p_key(std::int64_t rank, std::int32_t tag) {
    return (static_cast<std::uint64_t>(rank) << 32) | static_cast<std::uint32_t>(tag);
  }
  void start(P2p& e) {
    if (!e.flow && e.src >= 0 && e.bytes > 0) e.flow = send_flow(e.src, e.type, e.bytes, &e.cls);
  }
  // The receiver `r` posts its receive of `in`. When the send has not come yet, it makes
  // the flow (unstarted) that its sender's class will play, and the send starts it: the
  // sender is r's neighbour on in.peer_stage.
  void post(std::int64_t r, const Instr& in) {
    P2p& e = p2p_[p2p_key(r, in.tag)];
    e.posted = true;
    if (e.sent) {
      start(e);
      return;
    }
    const std::size_t next_type = kinds_.size();
    const std::int64_t my_stage = layout_.coord(r).pp;
    if (options_.free_communication || in.bytes <= 0 || in.peer_stage == my_stage) return;
    const std::int64_t prev = peer_[next_type + 1][static_cast<std::size_t>(r)];
    const std::int64_t sender = in.peer_stage == layout_.coord(prev).pp ? prev : peer_[next_type][static_cast<std::size_t>(r)];
    const std::int64_t after_sender = peer_[next_type][static_cast<std::size_t>(sender)];
    e.src = rep_[static_cast<std::size_t>(colour_of(sender))];
    e.type = my_stage == layout_.coord(after_sender).pp ? next_type : next_type + 1;
    e.bytes = in.bytes;
    e.prepared = true;
    e.cls = class_now(e.src, e.type);
    e.flow = sg4::Comm::sendto_init(flow_host_[e.cls], sink_)->set_payload_size(payload(share(e.cls, e.bytes)));
  }
  // Blocks until the last byte of the transfer to `key` (receiving rank, tag) is through;
  // returns the route latency still to wait.
  double receive(const std::pair<std::int64_t, std::int32_t>& key) {
    // By key, not by iterator: other actors add entries while this one waits, and a rehash
    // invalidates iterators (references stay valid).
    const std::uint64_t k = p2p_key(key.first, key.second);
    P2p& e = p2p_.find(k)->second;
    if (!e.sent && (!e.flow || !failing_links_.empty())) {
      // Until the send. With a link failure pending, also when the flow was made here
      // (unstarted): the failure daemon may move it to another path before the send.
      e.ready = sg4::Semaphore::create(0);
      e.ready->acquire();
    }
    double latency = 0;
    if (e.flow) {
      if (!wait_flow(e.flow)) hang();
      latency = flow_class_[e.cls].latency_s;
    }
    p2p_.erase(k);
    return latency;
  }

  // One collective of a group: the flows of all its ring edges start when its last member
  // arrives (NCCL's kernels run together) and everyone is done when the slowest edge is (a
  // pipelined ring moves at its slowest link), plus the latency of the algorithm's steps and
  // its in-node phases. Each algorithm (models::collective_flows: ring, tree, NVLS,
  // hierarchical) is put on the ring edges as the bytes it moves through each member's own
  // link; a tree's edges between distant nodes are not laid out on their own paths.
  // Alike groups are one: a member arrives for every rank of its colour.
  struct Coll {
    std::int64_t arrived = 0, waiting = 0, left = 0;
    bool done = false;
    sg4::SemaphorePtr finished;
  };
  // `key` names the collective instance (type, stream, ordinal, group kind); the last of the
  // group's colours to arrive plays it, the others wait for it to finish.
  void collective(std::uint64_t key, std::int32_t kind, const models::CollectiveFlows& f, std::size_t type) {
    const auto& colours = group_colours_.at(kind);
    const auto size = static_cast<std::int64_t>(colours.size());
    Coll& c = colls_[key];
    if (++c.arrived < size) {
      if (!c.done) {
        if (!c.finished) c.finished = sg4::Semaphore::create(0);
        ++c.waiting;
        c.finished->acquire();
      }
    } else {
      // One flow per ring edge with all its bytes, then the ring's latency terms; or, per
      // message, each step's S/n on every edge once the previous step has arrived everywhere.
      const int steps = options_.per_message ? static_cast<int>(std::llround(f.steps)) : 1;
      const double bytes = f.edge_bytes / steps;
      std::vector<sg4::CommPtr> flows;
      std::vector<std::size_t> classes;
      // Slots that stay put: the failure daemon may move each flow from the moment it starts
      // (starting the next one lets it run).
      flows.reserve(colours.size());
      classes.reserve(colours.size());
      for (int step = 0; step < steps; ++step) {
        flows.clear();
        classes.clear();
        double latency = 0;
        for (const auto colour : colours) {
          const std::int64_t from = rep_[static_cast<std::size_t>(colour)];
          std::size_t cls = 0;
          if (auto flow = send_flow(from, type, bytes, &cls)) {
            flows.push_back(std::move(flow));
            classes.push_back(cls);
            if (!failing_links_.empty()) in_flight_.emplace(&flows.back(), &classes.back());
          }
          latency = std::max(latency, flow_class_[cls].latency_s * f.steps / steps);
        }
        bool failed = false;
        for (auto& fl : flows) failed = !wait_flow(fl) || failed;
        for (auto& fl : flows) in_flight_.erase(&fl);
        if (failed) hang();
        if (latency > 0) sg4::this_actor::sleep_for(latency);
      }
      // In-node phases (hierarchical, tree's chain): on NVLink, which nothing else shares.
      if (f.in_node_s > 0) sg4::this_actor::sleep_for(f.in_node_s);
      c.done = true;
      for (std::int64_t i = 0; i < c.waiting; ++i) c.finished->release();
    }
    if (++colls_[key].left == size) colls_.erase(key);
  }

  // What a traced actor ran: models::InstrTiming, in seconds until written.
  // A collective waiting for its stream's worker.
  struct Job {
    std::uint64_t key = 0;
    std::int32_t kind = 0;
    models::CollectiveFlows flows;
    std::size_t type = 0;
    std::int32_t index = 0;  // the instruction
  };
  struct Lane {
    std::deque<Job> jobs;
    sg4::SemaphorePtr queued;  // a token per job; one without a job stops the worker
    sg4::SemaphorePtr woken;   // the playing actor, waiting for instruction `awaited`
    sg4::ActorPtr worker;
    std::int32_t done = -1;     // the last instruction the worker finished
    std::int32_t awaited = -1;
  };

  // What an actor (one rank, or a TP group) did, for the report and the trace.
  struct ActorState {
    // Receives posted and not yet seen complete, and collectives issued and not yet waited
    // for (instruction, stream), by instruction: a handful at a time, kept short so that a
    // switch to this actor touches little memory.
    std::vector<std::pair<std::int32_t, std::pair<std::int64_t, std::int32_t>>> receiving;
    std::vector<std::pair<std::int32_t, std::size_t>> workers;
    // Per stream, one worker plays the collectives in issue order (as a CUDA stream runs its
    // NCCL kernels). One actor per stream, not per collective: a backlogged DP stream (ZeRO-2's
    // per-micro-batch buckets of a 16K-GPU plan) once held thousands of blocked actors and
    // their stacks, 22 GB.
    std::array<Lane, 6> lanes;
    double busy_s = 0, recompute_s = 0, optimizer_s = 0;
    double straggle_s = 0;  // compute time a slow member added
    std::map<Wait, double> waited_s;
    double last_compute_end_s = 0;
    double ready_s = 0;  // until when received data is still on its way
    double last_active_s = 0;  // when it last finished something (a failure stops it)
    double end_s = 0;    // when the actor's last instruction finished
    bool finished = false;
    bool traced = false;
    std::vector<models::InstrTiming> trace;  // microseconds
    std::vector<double> issued_s;  // traced actors: when each instruction was issued
  };

  // Sleeps until data received so far has arrived.
  static void settle(const ActorState& st) {
    const double now = sg4::Engine::get_clock();
    if (st.ready_s > now) sg4::this_actor::sleep_for(st.ready_s - now);
  }

  void wait_for(ActorState& st, std::int32_t i, const models::StageProgram* sp = nullptr) {
    if (i < 0 || (st.receiving.empty() && st.workers.empty())) return;
    const auto idx = static_cast<std::size_t>(i);
    bool waited = false;
    double latency = 0;
    for (std::size_t j = 0; j < st.receiving.size();) {
      if (st.receiving[j].first != i) {
        ++j;
        continue;
      }
      latency = std::max(latency, receive(st.receiving[j].second));
      st.receiving.erase(st.receiving.begin() + static_cast<std::ptrdiff_t>(j));
      waited = true;
    }
    // The last byte is through; the data is there a route latency later (waited for by the
    // next thing the actor does, in the same sleep as its compute when that comes next).
    if (waited) {
      const double arrived = sg4::Engine::get_clock() + latency;
      st.ready_s = std::max(st.ready_s, arrived);
      // A traced receive: from its posting to when the rank saw it complete.
      if (st.traced && sp != nullptr && sp->instrs[idx].kind == InstrKind::recv) record(st, *sp, sp->instrs[idx], st.issued_s[idx], arrived);
    }
    for (std::size_t j = 0; j < st.workers.size(); ++j) {
      if (st.workers[j].first != i) continue;
      Lane& lane = st.lanes[st.workers[j].second];
      if (lane.done < i) {
        lane.awaited = i;
        lane.woken->acquire();
      }
      st.workers.erase(st.workers.begin() + static_cast<std::ptrdiff_t>(j));
      break;
    }
  }

  // A stream's worker: its collectives one after the other, until a token without a job.
  void play_lane(ActorState& st, Lane& lane, const models::StageProgram& sp) {
    for (;;) {
      lane.queued->acquire();
      if (lane.jobs.empty()) return;
      const Job job = lane.jobs.front();
      lane.jobs.pop_front();
      const double start = sg4::Engine::get_clock();
      collective(job.key, job.kind, job.flows, job.type);
      if (st.traced) record(st, sp, sp.instrs[static_cast<std::size_t>(job.index)], start, sg4::Engine::get_clock());
      lane.done = job.index;
      if (lane.awaited >= 0 && lane.done >= lane.awaited) {
        lane.awaited = -1;
        lane.woken->release();
      }
    }
  }

  void play(std::size_t a) {
    ActorState& st = actors_[a];
    const std::int64_t lead = leads_[a];
    const models::StageProgram& sp = stage_of(lead);
    const std::size_t n = sp.instrs.size();

    std::array<std::uint64_t, 6> collectives{};  // collectives issued so far, per stream
    if (st.traced) st.issued_s.assign(n, 0);
    std::array<std::int32_t, 6> last{-1, -1, -1, -1, -1, -1};
    const double slow = pace_[static_cast<std::size_t>(node_of_[static_cast<std::size_t>(lead)])];  // the actor's slowest member
    const std::int64_t my_stage = layout_.coord(lead).pp;
    const std::size_t next_type = kinds_.size();
    const std::int64_t next_stage = (my_stage + 1) % program_.stages;
    std::size_t reported = 0;
    for (std::size_t k = 0; k < n; ++k) {
      const Instr& in = sp.instrs[k];
      const auto stream = static_cast<std::size_t>(in.stream);
      if (st.traced) st.issued_s[k] = sg4::Engine::get_clock();
      // A collective waits for its stream's previous one in its own worker, not here: the
      // compute stream goes on (a DP bucket does not hold the backward pass).
      if (in.kind != InstrKind::collective) wait_for(st, last[stream], &sp);
      switch (in.kind) {
        case InstrKind::compute: {
          // Idle compute time before this instruction is charged to what it waited for.
          wait_for(st, in.after, &sp);
          const double clock = sg4::Engine::get_clock();
          const double now = std::max(clock, st.ready_s);  // when the inputs are all there
          const double gap = now - st.last_compute_end_s;
          if (gap > 0) st.waited_s[in.after >= 0 ? wait_of(sp.instrs[static_cast<std::size_t>(in.after)]) : Wait::none] += gap;
          const BlockTime& bt = blocks_[static_cast<std::size_t>(sp.stage)][k];
          const double dt = bt.total() * slow;
          // Each part at the healthy pace; what a straggler adds is its own part (stalls).
          st.busy_s += bt.compute_s;
          st.recompute_s += bt.recompute_s;
          st.optimizer_s += bt.optimizer_s;
          st.straggle_s += bt.total() * (slow - 1);
          // In-node collectives merged into the block: their time is exposed TP/CP time.
          st.waited_s[Wait::tp] += bt.tp_s;
          st.waited_s[Wait::cp] += bt.cp_s;
          // The compute stream is this actor's own: nothing shares it, so it is a sleep
          // (an execution would cost SimGrid a max-min variable for nothing).
          if (now + dt > clock) sg4::this_actor::sleep_for(now + dt - clock);
          st.last_compute_end_s = sg4::Engine::get_clock();
          st.last_active_s = st.last_compute_end_s;
          if (st.traced) record(st, sp, in, now, st.last_compute_end_s);
          break;
        }
        case InstrKind::collective: {
          wait_for(st, in.after);
          settle(st);
          const auto g = in.group;
          if (layout_.group_size(g) <= 1 || options_.free_communication) break;
          const std::size_t type = kind_type(g);
          const auto& net = nets_[type];
          const models::CollectiveFlows f = models::collective_flows(net, in.collective, in.bytes, models::algorithm_for(net, in.collective, in.bytes));
          const std::uint64_t seq = collectives[stream]++;
          const auto kind = group_kind_of(type, lead);
          const std::uint64_t key = ((type * 8 + stream) << 52) | (static_cast<std::uint64_t>(kind) << 24) | seq;
          Lane& lane = st.lanes[stream];
          if (!lane.worker) {
            lane.queued = sg4::Semaphore::create(0);
            lane.woken = sg4::Semaphore::create(0);
            lane.worker = sg4::Actor::create("coll", host_of_[static_cast<std::size_t>(lead)], [this, &st, &lane, &sp] { play_lane(st, lane, sp); });
          }
          lane.jobs.push_back({key, kind, f, type, static_cast<std::int32_t>(k)});
          lane.queued->release();
          st.workers.emplace_back(static_cast<std::int32_t>(k), stream);
          break;
        }
        case InstrKind::send: {
          wait_for(st, in.after);
          settle(st);
          // Sends are buffered: in the trace, a mark where the rank handed the data over.
          if (st.traced) record(st, sp, in, sg4::Engine::get_clock(), sg4::Engine::get_clock());
          const double bytes = options_.free_communication ? 0 : in.bytes;
          const std::size_t type = in.peer_stage == my_stage || in.peer_stage == next_stage ? next_type : next_type + 1;
          const std::int64_t peer = in.peer_stage == my_stage ? lead : peer_[type][static_cast<std::size_t>(lead)];
          // Sends are buffered, as the Program's replay takes them (Megatron batches
          // isend/irecv): nothing waits for one but its receiver, the one playing the peer's
          // colour.
          P2p& e = p2p_[p2p_key(rep_[static_cast<std::size_t>(colour_of(peer))], in.tag)];
          e.sent = true;
          if (e.prepared) {
            // The receiver made this flow for the class it expected.
            if (flow_class_of(e.src, e.type) != flow_class_of(lead, type) || e.bytes != bytes) {
              throw std::logic_error("pipeline transfer " + std::to_string(in.tag) + " from rank " + std::to_string(lead) + " is not the one its receiver expected");
            }
            FlowClass& fc = flow_class_[e.cls];
            fc.bytes += share(e.cls, bytes);
            ++fc.played;
            e.flow->start();
            if (e.ready) e.ready->release();
            break;
          }
          e.src = peer == lead ? -1 : lead;
          e.type = type;
          e.bytes = bytes;
          // overlap.p2p: Megatron posts the next receive ahead of the compute
          // (--overlap-p2p-communication), so the transfer runs as soon as it is sent;
          // otherwise it starts when the receiver reaches its receive (models/pipeline).
          if (e.posted || p_.parallelism.overlap.p2p) start(e);
          if (e.ready) e.ready->release();
          break;
        }
        case InstrKind::recv: {
          post(lead, in);
          st.receiving.push_back({static_cast<std::int32_t>(k), {lead, in.tag}});
          break;
        }
      }
      if (in.kind != InstrKind::send) last[stream] = static_cast<std::int32_t>(k);
      if (a == 0 && progress_fd_ >= 0 && (k + 1) * 50 / n > reported) {
        reported = (k + 1) * 50 / n;
        const std::string line = "progress " + std::to_string(static_cast<double>(reported) / 50) + "\n";
        [[maybe_unused]] const auto ignored = ::write(progress_fd_, line.data(), line.size());
      }
    }
    while (!st.receiving.empty()) wait_for(st, st.receiving.front().first, &sp);
    while (!st.workers.empty()) wait_for(st, st.workers.front().first, &sp);
    for (Lane& lane : st.lanes) {
      if (lane.worker) lane.queued->release();  // no job: the worker ends
    }
    settle(st);
    // The tail after the last compute (the distributed optimizer's gather) is DP time.
    const double tail = sg4::Engine::get_clock() - st.last_compute_end_s;
    if (tail > 0) st.waited_s[Wait::dp] += tail;
    st.end_s = sg4::Engine::get_clock();
    st.finished = true;
  }

  static void record(ActorState& st, const models::StageProgram& sp, const Instr& in, double start, double end) {
    st.trace.push_back({static_cast<std::int32_t>(&in - sp.instrs.data()), 0, start * 1e6, end * 1e6});
  }

  // The one Trace of report/ (models/program_trace): a process per traced rank, a thread per
  // stream, each schedule item a block named by its pass and layers; with --fine its ops inside.
  std::string trace_json() const {
    std::vector<std::int64_t> traced = traced_;
    std::sort(traced.begin(), traced.end());
    traced.erase(std::unique(traced.begin(), traced.end()), traced.end());
    report::Trace trace;
    for (const std::int64_t r : traced) {
      // A TP group's ranks share their actor's timeline.
      const ActorState& st = actors_[played_actor_of(r)];
      models::append_rank_trace(program_, stage_of(r), r, st.trace, options_.fine, trace);
    }
    return report::chrome_trace_json(trace);
  }

  report::Report make_report() const {
    report::Report r = models::estimate(p_);
    r.method = report::Method::simulated;
    r.notes.clear();
    // The critical rank: the one that computed longest (its stage sets the pace).
    std::size_t crit = 0;
    for (std::size_t i = 0; i < actors_.size(); ++i) {
      const auto& a = actors_[i];
      const auto& b = actors_[crit];
      if (a.busy_s + a.recompute_s + a.straggle_s > b.busy_s + b.recompute_s + b.straggle_s) crit = i;
    }
    const ActorState& c = actors_[crit];
    auto waited = [&](Wait w) {
      const auto it = c.waited_s.find(w);
      return it == c.waited_s.end() ? 0.0 : it->second;
    };
    report::Breakdown& b = r.breakdown;
    b = report::Breakdown{};
    b.compute_s = c.busy_s;
    b.recompute_s = c.recompute_s;
    b.optimizer_s = c.optimizer_s;
    b.tp_s = waited(Wait::tp);
    b.cp_s = waited(Wait::cp);
    b.ep_s = waited(Wait::ep);
    b.dp_s = waited(Wait::dp);
    // Waiting for a pipeline neighbour (a rank done before the step ends waits for the pipeline
    // to drain elsewhere too). One bubble in both tiers (issue 18): the part of it the stage
    // would wait with free communication, for its neighbours' compute, which the Program's
    // replay gives; the rest waited for communication on the way (the transfers, and what the
    // neighbours themselves waited for): exposed pipeline communication.
    const double waiting = waited(Wait::pipeline) + waited(Wait::none) + (makespan_ - c.end_s);
    b.bubble_s = std::min(waiting, compute_bubble_s(layout_.coord(leads_[crit]).pp));
    b.pp_s = waiting - b.bubble_s;
    b.stalls_s = std::max(0.0, makespan_ - b.total());
    r.bubble_fraction = (c.busy_s + c.recompute_s) > 0 ? b.bubble_s / (c.busy_s + c.recompute_s) : 0;
    models::set_headline_figures(r, p_, makespan_, models::step_flops(p_), plan::peak_tflops(p_.cluster.gpu, p_.training.precision) * 1e12);
    models::attach_power(p_, r);
    if (options_.free_communication) r.notes.emplace_back("simulated with free communication");
    return r;
  }

  // A stage's idle time in the replay of the Program with its compute as simulated and
  // communication free: what it waits for its pipeline neighbours' compute.
  double compute_bubble_s(std::int64_t stage) const {
    const auto replayed = models::replay(program_, [&](const models::StageProgram& sp, const Instr& in) {
      if (in.kind != InstrKind::compute) return 0.0;
      const BlockTime& bt = blocks_[static_cast<std::size_t>(sp.stage)][static_cast<std::size_t>(&in - sp.instrs.data())];
      return bt.compute_s + bt.recompute_s + bt.optimizer_s;
    });
    if (!replayed.error.empty() || static_cast<std::size_t>(stage) >= replayed.idle_s.size()) return 0;
    return replayed.idle_s[static_cast<std::size_t>(stage)];
  }

  std::vector<LinkUse> hottest_links() const {
    std::vector<LinkUse> out;
    for (std::size_t slot = 0; slot < link_bytes_.size(); ++slot) {
      const double bytes = link_bytes_[slot];
      if (bytes <= 0) continue;
      const auto& l = links_[slot / 2];
      const bool up = slot % 2 == 0;
      const topology::VertexId low = std::min(l.a, l.b), high = std::max(l.a, l.b);
      const std::string from = topology::vertex_name(topo_, up ? low : high), to = topology::vertex_name(topo_, up ? high : low);
      out.push_back({from + "->" + to, makespan_ > 0 ? bytes / (l.bytes_per_s * makespan_) : 0, bytes});
    }
    std::sort(out.begin(), out.end(), [](const LinkUse& x, const LinkUse& y) { return x.bytes > y.bytes || (x.bytes == y.bytes && x.name < y.name); });
    if (out.size() > 10) out.resize(10);
    return out;
  }

  struct SimLink {
    double bytes_per_s = 0;
    double latency_s = 0;
    topology::VertexId a = 0, b = 0;
  };

  const plan::Plan& p_;
  SimulateOptions options_;
  int progress_fd_;
  plan::RankLayout layout_;
  models::ComputeTimer timer_;
  models::Program program_;
  topology::Topology topo_;
  std::int64_t world_ = 0, flows_ = 0;
  std::vector<double> slowdown_;                   // per rank, from the plan
  std::vector<double> pace_;                       // per node: its slowest member
  std::vector<std::int64_t> node_of_;              // per rank: its node (a TP group, or itself)
  std::vector<std::vector<Route>> bundle_;         // per flow type, per node: its lanes' routes
  std::vector<std::vector<std::int32_t>> lane_flows_;  // per flow type, per node
  std::vector<plan::GroupKind> kinds_;             // the groups collectives use, in first use
  std::vector<models::GroupNetwork> nets_;         // per kind: its fabric (models/comm)
  std::vector<std::vector<std::int64_t>> peer_;    // per flow type, per rank: who it sends to
  std::vector<std::vector<std::int64_t>> group_;   // per flow type, per rank: its group (collectives)
  std::vector<std::vector<Route>> route_;          // per flow type, per rank
  std::vector<SimLink> links_;                     // per topology link
  Colouring colouring_;
  std::vector<std::int64_t> rep_;                  // per colour: the rank that plays it
  std::vector<std::size_t> played_actor_;          // per colour: the actor that plays it
  std::vector<std::int64_t> leads_;                // the played actors, by their first rank
  std::vector<FlowClass> flow_class_;              // per (colour, type)
  std::map<std::int32_t, std::vector<std::int32_t>> group_colours_;  // per group kind: its colours
  std::vector<sg4::Host*> host_of_;                // per rank (played ones): its actor's
  std::vector<sg4::Host*> flow_host_;              // per flow class
  sg4::Host* sink_ = nullptr;
  std::vector<std::int64_t> traced_;
  std::vector<bool> failing_rank_;                 // per rank: on the host that fails (failure)
  std::vector<std::int64_t> failing_link_ids_;     // the topology links that fail (a link, a switch's)
  std::unique_ptr<topology::Topology> after_;      // the fabric without them
  std::size_t base_types_ = 0;                     // flow types before failure; rerouted ones follow
  std::vector<std::int32_t> flows_per_edge_;       // per flow type: flows an edge's bytes split into
  std::vector<bool> crosses_failed_;               // per flow class: it crosses a failing link
  bool rerouted_ = false;                          // the fabric has moved traffic off the failed links
  std::int64_t flows_moved_ = 0;
  std::string partitioned_;                        // the first pair the failure leaves without a path
  std::vector<sg4::Host*> failing_hosts_;
  std::vector<sg4::Link*> failing_links_;
  std::unordered_map<std::uint64_t, P2p> p2p_;  // by p2p_key(receiving rank, tag)
  // Collective flows being waited for while a link failure is pending: slot -> its class.
  std::map<sg4::CommPtr*, std::size_t*> in_flight_;
  std::unordered_map<std::uint64_t, Coll> colls_;  // by (type, stream, group kind, ordinal)
  std::vector<double> link_bytes_;                 // per directed link slot
  std::vector<ActorState> actors_;
  std::vector<std::vector<BlockTime>> blocks_;  // per stage class, per instruction
  double makespan_ = 0;
};

}  // namespace

SimulateResult simulate_here(const plan::Plan& plan, const SimulateOptions& options, int progress_fd) {
  Simulation s(plan, options, progress_fd);
  return s.run();
}

}  // namespace meshwork::sim
