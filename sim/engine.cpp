// The simulation proper: the SimGrid platform from topology/, one actor per rank playing its
// stage's Program.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <simgrid/s4u.hpp>
#include <unordered_map>

#include "models/compute_time.hpp"
#include "models/estimate.hpp"
#include "models/flops.hpp"
#include "models/program.hpp"
#include "plan/plan_io.hpp"
#include "plan/rank_layout.hpp"
#include "plan/validate.hpp"
#include "sim/blocks.hpp"
#include "sim/simulate.hpp"
#include "topology/builders.hpp"
#include "topology/faults.hpp"
#include "topology/router.hpp"

namespace meshwork::sim {
namespace {

namespace sg4 = simgrid::s4u;
using models::Instr;
using models::InstrKind;

// Hosts compute at this many "flops" per second; an execution of d seconds is d * kSpeed.
constexpr double kSpeed = 1e12;

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

struct Route {
  std::vector<topology::Hop> hops;
  double latency_s = 0;
};

// An actor plays one rank, or a TP group whose `lanes` (one rank each) it plays; mirrors[i]
// are the group's ranks lane i stands for, itself included.
struct ActorSpec {
  std::vector<std::int64_t> lanes;
  std::vector<std::vector<std::int64_t>> mirrors;
};

class Simulation {
 public:
  Simulation(const plan::Plan& p, const SimulateOptions& options, int progress_fd)
      : p_(p), options_(options), progress_fd_(progress_fd), layout_(plan::RankLayout::from_plan(p.parallelism)), timer_(p) {}

  SimulateResult run() {
    SimulateResult out;
    if (options_.program != nullptr) {
      program_ = *options_.program;
    } else {
      auto lowered = models::lower(p_);
      if (!lowered.program) {
        out.error = lowered.error;
        return out;
      }
      program_ = std::move(*lowered.program);
    }
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

    // SimGrid's own log is for SimGrid's developers: warnings and worse only.
    int argc = 2;
    char name[] = "meshwork";
    char quiet[] = "--log=root.thresh:warning";
    char* argv[] = {name, quiet, nullptr};
    sg4::Engine engine(&argc, argv);
    // The network model, set explicitly: CM02 without cross-traffic or TCP windows matches
    // the exact ring formulas (simgrid-3.32-notes.md, "Network model").
    engine.set_config("network/model:CM02");
    engine.set_config("network/crosstraffic:0");
    engine.set_config("network/TCP-gamma:0");
    // Lazy action updates: an event re-solves only the actions it touches, not every host's
    // and every flow's (without it each event costs O(hosts), a 1,024-rank step O(N^2)).
    engine.set_config("cpu/optim:Lazy");
    engine.set_config("network/optim:Lazy");
    // Microsecond kernels and latencies: keep event times exact well below them.
    engine.set_config("surf/precision:1e-13");
    // Actors here keep little on their stacks; SimGrid's default 8 MiB each is mapped and
    // unmapped for every collective's worker.
    engine.set_config("contexts/stack-size:128");
#if defined(__SANITIZE_ADDRESS__)
    engine.set_config("contexts/factory:thread");  // ASan-clean contexts (the notes)
#endif
    build_platform();
    const BlockTimer blocks{p_, layout_, timer_, options_.free_communication};
    for (auto& c : program_.classes) blocks_.push_back(options_.fine ? blocks.per_instruction(c) : blocks.coarsen(c));
    if (std::getenv("MESHWORK_SIM_DEBUG") != nullptr) {
      for (const auto& c : program_.classes) std::fprintf(stderr, "stage %lld: %zu instructions to play\n", static_cast<long long>(c.stage), c.instrs.size());
    }
    actors_.resize(specs_.size());
    if (std::getenv("MESHWORK_SIM_DEBUG") != nullptr) {
      std::size_t played = 0;
      for (const auto& spec : specs_) played += spec.lanes.size();
      std::fprintf(stderr, "%zu actors play %zu of %lld ranks\n", specs_.size(), played, static_cast<long long>(world_));
    }
    if (!options_.trace_path.empty()) {
      std::vector<std::int64_t> traced = options_.trace_ranks;
      if (traced.empty()) {
        for (std::int64_t s = 0; s < program_.stages; ++s) {
          plan::MeshCoord c{};
          c.pp = s;
          traced.push_back(layout_.rank(c));
        }
      }
      for (auto r : traced) {
        if (r < 0 || r >= world_) {
          out.error = "--trace-ranks: rank " + std::to_string(r) + " is outside the plan's " + std::to_string(world_) + " ranks";
          return out;
        }
        traced_.push_back(r);
        actors_[static_cast<std::size_t>(actor_of_[static_cast<std::size_t>(r)])].traced = true;
      }
    }
    for (std::size_t a = 0; a < specs_.size(); ++a) {
      const std::int64_t rep = specs_[a].lanes.front();
      sg4::Actor::create("rank" + std::to_string(rep), hosts_[static_cast<std::size_t>(rep)], [this, a] { play(a); });
    }
    engine.run();
    makespan_ = sg4::Engine::get_clock();
    for (std::size_t a = 0; a < specs_.size(); ++a) {
      if (!actors_[a].finished) {
        out.error = "rank " + std::to_string(specs_[a].lanes.front()) + " did not finish its Program (a deadlock in the simulation)";
        return out;
      }
    }
    out.report = make_report();
    if (!options_.trace_path.empty()) {
      std::string error;
      if (!plan::write_file_atomically(options_.trace_path, trace_json(), error)) out.error = "trace: " + error;
    }
    out.flows = flows_;
    for (const auto& spec : specs_) out.played_ranks += static_cast<std::int64_t>(spec.lanes.size());
    out.hottest_links = hottest_links();
    return out;
  }

 private:
  const models::StageProgram& stage_of(std::int64_t rank) const {
    return program_.classes[static_cast<std::size_t>(layout_.coord(rank).pp)];
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
    for (std::int64_t r = 0; r < world_; ++r) {
      const auto i = static_cast<std::size_t>(r);
      for (std::size_t t = 0; t < kinds_.size(); ++t) {
        const auto members = layout_.group_members(kinds_[t], r);
        const auto pos = static_cast<std::size_t>(layout_.rank_in_group(kinds_[t], r));
        peer_[t][i] = members[(pos + 1) % members.size()];
      }
      if (program_.stages > 1) {
        const auto v = models::for_rank(program_, layout_, r);
        peer_[kinds_.size()][i] = v.next_rank;
        peer_[kinds_.size() + 1][i] = v.prev_rank;
      }
    }
  }
  std::size_t kind_type(plan::GroupKind g) const {
    return static_cast<std::size_t>(std::find(kinds_.begin(), kinds_.end(), g) - kinds_.begin());
  }

  // Which ranks each actor plays. By default (merged blocks, a TP group inside one NVLink
  // domain) an actor is a TP group: its members meet in a TP collective inside every block,
  // so they compute in lockstep at the pace of the slowest (a straggler holds its whole
  // group). Each TP coordinate is a lane: pipeline and DP/CP/EP traffic joins ranks of the
  // same lane only. A lane's flows are played only when they could differ from those of a
  // lane already played: when no link carries two lanes' flows and lane k's flows meet links
  // of the same capacities and latencies, shared among corresponding flows in the same way,
  // as lane j's, then the max-min sharing SimGrid solves is the same system for both, and
  // lane k's ranks are lane j's mirror (their bytes still count on their own links).
  // Otherwise every lane is played. `--fine` plays every rank as its own actor.
  void plan_actors() {
    const std::int64_t tp = layout_.group_size(plan::GroupKind::tp);
    const bool grouped = !options_.fine && tp > 1 && layout_.group_span(plan::GroupKind::tp) < p_.cluster.gpus_per_node;
    actor_of_.assign(static_cast<std::size_t>(world_), -1);
    if (!grouped) {
      for (std::int64_t r = 0; r < world_; ++r) {
        actor_of_[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(specs_.size());
        specs_.push_back({{r}, {{r}}});
      }
      return;
    }
    // mirror_of[k]: the lane whose play stands for lane k.
    std::vector<std::int64_t> mirror_of(static_cast<std::size_t>(tp));
    for (std::int64_t k = 0; k < tp; ++k) mirror_of[static_cast<std::size_t>(k)] = k;
    if (!options_.mirror_lanes) {
      // every lane played
    } else if (options_.free_communication) {
      std::fill(mirror_of.begin(), mirror_of.end(), 0);  // no network: every lane alike
    } else {
      // Per lane, each directed link it uses: (capacity, latency, the flows on it, named by
      // their lane-0 rank and type).
      using Use = std::tuple<double, double, std::vector<std::int64_t>>;
      std::vector<std::map<std::size_t, std::vector<std::int64_t>>> on_slot(static_cast<std::size_t>(tp));
      std::unordered_map<std::size_t, std::int64_t> lane_of_slot;
      bool disjoint = true;
      const auto types = static_cast<std::int64_t>(peer_.size());
      for (std::int64_t r = 0; r < world_ && disjoint; ++r) {
        plan::MeshCoord c = layout_.coord(r);
        const std::int64_t lane = c.tp;
        c.tp = 0;
        const std::int64_t r0 = layout_.rank(c);
        for (std::int64_t t = 0; t < types; ++t) {
          const std::int64_t to = peer_[static_cast<std::size_t>(t)][static_cast<std::size_t>(r)];
          if (to < 0 || to == r) continue;
          for (const auto& h : route(t, r).hops) {
            const auto [it, fresh] = lane_of_slot.emplace(h.slot(), lane);
            if (!fresh && it->second != lane) {
              disjoint = false;
              break;
            }
            on_slot[static_cast<std::size_t>(lane)][h.slot()].push_back(r0 * types + t);
          }
        }
      }
      if (disjoint) {
        std::vector<std::vector<Use>> signature(static_cast<std::size_t>(tp));
        for (std::int64_t k = 0; k < tp; ++k) {
          auto& sig = signature[static_cast<std::size_t>(k)];
          for (auto& [slot, flows] : on_slot[static_cast<std::size_t>(k)]) {
            std::sort(flows.begin(), flows.end());
            const auto& l = links_[slot / 2];
            sig.emplace_back(l.bytes_per_s, l.link->get_latency(), flows);
          }
          std::sort(sig.begin(), sig.end());
          for (std::int64_t j = 0; j < k; ++j) {
            if (mirror_of[static_cast<std::size_t>(j)] == j && signature[static_cast<std::size_t>(j)] == sig) {
              mirror_of[static_cast<std::size_t>(k)] = j;
              break;
            }
          }
        }
      }
    }
    const std::int64_t groups = layout_.num_groups(plan::GroupKind::tp);
    for (std::int64_t g = 0; g < groups; ++g) {
      const auto members = layout_.group(plan::GroupKind::tp, g);
      ActorSpec spec;
      for (std::int64_t k = 0; k < tp; ++k) {
        const auto played = static_cast<std::size_t>(mirror_of[static_cast<std::size_t>(k)]);
        const std::int64_t r = members[static_cast<std::size_t>(k)];
        if (played == static_cast<std::size_t>(k)) {
          spec.lanes.push_back(r);
          spec.mirrors.push_back({});
        }
        // Lanes are numbered in order, so the played lane is already in place.
        const auto idx = static_cast<std::size_t>(std::find(spec.lanes.begin(), spec.lanes.end(), members[played]) - spec.lanes.begin());
        spec.mirrors[idx].push_back(r);
        actor_of_[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(specs_.size());
      }
      specs_.push_back(std::move(spec));
    }
  }

  void build_platform() {
    auto* zone = sg4::create_full_zone("cluster");
    for (std::int64_t r = 0; r < world_; ++r) hosts_.push_back(zone->create_host("gpu" + std::to_string(r), kSpeed));
    if (options_.free_communication) {
      // One zero-latency, unshared link of infinite capacity between any two ranks.
      free_link_ = zone->create_link("free", 1e30)->set_sharing_policy(sg4::Link::SharingPolicy::FATPIPE)->set_latency(0);
    } else {
      links_.resize(boost::num_edges(topo_.graph));
      for (auto e : boost::make_iterator_range(boost::edges(topo_.graph))) {
        const auto& l = topo_.graph[e];
        // What a collective achieves of a link's line rate (the hardware profile's NVLink and
        // NIC efficiencies, the same the estimate uses). A link that is down keeps a trickle so
        // that SimGrid accepts it; routes avoid it.
        const auto& hw = timer_.hardware();
        const double efficiency = l.tier == topology::LinkTier::nvlink ? hw.nvlink_efficiency : hw.nic_efficiency;
        const double bw = std::max(l.bandwidth_gbytes_per_s, 1e-9) * 1e9 * efficiency;
        auto* link = zone->create_split_duplex_link("l" + std::to_string(l.id), bw);
        link->set_latency(l.latency_us * 1e-6);
        links_[static_cast<std::size_t>(l.id)] = {link, bw, boost::source(e, topo_.graph), boost::target(e, topo_.graph)};
      }
    }
    // Routes only for the pairs that talk: ring neighbours of every group a collective uses,
    // and pipeline neighbours (no N x N table); SimGrid is given those of the played lanes.
    find_peers();
    topology::Router router(topo_);
    std::vector<std::pair<std::int64_t, std::int64_t>> pairs;
    for (const auto& by_rank : peer_) {
      for (std::int64_t r = 0; r < world_; ++r) {
        const std::int64_t to = by_rank[static_cast<std::size_t>(r)];
        if (to >= 0 && to != r) pairs.emplace_back(r, to);
      }
    }
    std::sort(pairs.begin(), pairs.end());
    pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
    for (const auto& [a, b] : pairs) {
      Route mine;
      if (!options_.free_communication) {
        mine.hops = p_.cluster.topology.routing == plan::Routing::d_mod_k
                        ? router.route_d_mod_k(a, b)
                        : router.route(a, b, static_cast<std::uint64_t>(a) * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(b));
        if (mine.hops.empty()) throw std::runtime_error("no route from rank " + std::to_string(a) + " to " + std::to_string(b));
        for (const auto& h : mine.hops) mine.latency_s += links_[static_cast<std::size_t>(h.link)].link->get_latency();
      }
      routes_[{a, b}] = std::move(mine);
    }
    // Each rank's route of each type, found without a search when flows are played.
    route_of_.assign(peer_.size(), std::vector<const Route*>(static_cast<std::size_t>(world_), nullptr));
    for (std::size_t t = 0; t < peer_.size(); ++t) {
      for (std::int64_t r = 0; r < world_; ++r) {
        const std::int64_t to = peer_[t][static_cast<std::size_t>(r)];
        if (to >= 0 && to != r) route_of_[t][static_cast<std::size_t>(r)] = &routes_.at({r, to});
      }
    }
    link_bytes_.assign(2 * links_.size(), 0.0);
    plan_actors();
    std::vector<bool> played(static_cast<std::size_t>(world_), false);
    for (const auto& spec : specs_) {
      for (auto r : spec.lanes) played[static_cast<std::size_t>(r)] = true;
    }
    for (const auto& [pair, mine] : routes_) {
      const auto [a, b] = pair;
      if (!played[static_cast<std::size_t>(a)]) continue;
      std::vector<sg4::LinkInRoute> route;
      if (options_.free_communication) {
        route.emplace_back(free_link_);
      } else {
        for (const auto& h : mine.hops) {
          route.emplace_back(links_[static_cast<std::size_t>(h.link)].link, h.forward ? sg4::LinkInRoute::Direction::UP : sg4::LinkInRoute::Direction::DOWN);
        }
      }
      zone->add_route(hosts_[static_cast<std::size_t>(a)]->get_netpoint(), hosts_[static_cast<std::size_t>(b)]->get_netpoint(), nullptr,
                      nullptr, route, false);
    }
    zone->seal();
  }

  // Counts the bytes of a lane's flow of type `type` on the links of its route, and of the
  // flows of the lanes it mirrors on theirs (per-link utilisation).
  void account(const ActorSpec& spec, std::size_t lane, std::size_t type, double bytes) {
    for (const auto m : spec.mirrors[lane]) {
      ++flows_;
      if (options_.free_communication || bytes <= 0) continue;
      const std::int64_t to = peer_[type][static_cast<std::size_t>(m)];
      if (to == m) continue;
      for (const auto& h : route(type, m).hops) link_bytes_[h.slot()] += bytes;
    }
  }
  const Route& route(std::size_t type, std::int64_t from) const { return *route_of_[type][static_cast<std::size_t>(from)]; }

  // A pipeline transfer: its flow starts once the sender has sent and the receiver posted
  // its receive (a rendezvous, as NCCL's send and receive), whichever comes second.
  struct P2p {
    std::int64_t src = -1;
    double bytes = 0;
    bool sent = false, posted = false;
    sg4::CommPtr flow;
    sg4::SemaphorePtr ready;  // the receiver, waiting for the send
  };
  static std::uint64_t p2p_key(std::int64_t rank, std::int32_t tag) {
    return (static_cast<std::uint64_t>(rank) << 32) | static_cast<std::uint32_t>(tag);
  }
  void start(P2p& e, std::int64_t dst) {
    if (e.bytes > 0 && e.src != dst && !options_.free_communication) {
      e.flow = sg4::Comm::sendto_async(hosts_[static_cast<std::size_t>(e.src)], hosts_[static_cast<std::size_t>(dst)], static_cast<std::uint64_t>(std::llround(e.bytes)));
    }
  }
  // Blocks until the transfer to `key` (receiving rank, tag) has arrived.
  void receive(const std::pair<std::int64_t, std::int32_t>& key) {
    auto it = p2p_.find(p2p_key(key.first, key.second));
    if (!it->second.sent) {
      it->second.ready = sg4::Semaphore::create(0);
      it->second.ready->acquire();
    }
    if (it->second.flow) it->second.flow->wait();
    p2p_.erase(it);
  }

  // One collective of a ring group: the flows of all its ring edges start when its last
  // member arrives (NCCL's kernels run together) and everyone is done when the slowest edge
  // is (a pipelined ring moves at its slowest link), plus the ring's other steps' latency.
  struct Coll {
    std::int64_t arrived = 0, waiting = 0, left = 0;
    bool done = false;
    sg4::SemaphorePtr finished;
  };
  void collective(const std::vector<std::pair<std::uint64_t, std::int64_t>>& joins, const RingFlow& f, plan::GroupKind g, std::size_t type) {
    const std::int64_t size = layout_.group_size(g);
    std::vector<sg4::CommPtr> flows;
    std::vector<std::uint64_t> mine, theirs;
    double extra = 0;
    for (const auto& [key, r] : joins) {
      Coll& c = colls_[key];
      if (++c.arrived < size) {
        theirs.push_back(key);
        continue;
      }
      mine.push_back(key);
      for (const auto m : layout_.group_members(g, r)) {
        const std::int64_t next = peer_[type][static_cast<std::size_t>(m)];
        extra = std::max(extra, std::max(0.0, f.steps - 1) * route(type, m).latency_s);
        flows.push_back(sg4::Comm::sendto_async(hosts_[static_cast<std::size_t>(m)], hosts_[static_cast<std::size_t>(next)], static_cast<std::uint64_t>(std::llround(f.bytes))));
      }
    }
    for (auto& fl : flows) fl->wait();
    if (!mine.empty() && extra > 0) sg4::this_actor::sleep_for(extra);
    for (const auto key : mine) {
      Coll& c = colls_[key];
      c.done = true;
      for (std::int64_t i = 0; i < c.waiting; ++i) c.finished->release();
      if (++c.left == size) colls_.erase(key);
    }
    for (const auto key : theirs) {
      Coll& c = colls_[key];
      if (!c.done) {
        if (!c.finished) c.finished = sg4::Semaphore::create(0);
        ++c.waiting;
        c.finished->acquire();
      }
      if (++colls_[key].left == size) colls_.erase(key);
    }
  }

  struct TraceEvent {
    std::int32_t name;  // Program::names
    std::uint8_t stream;
    double start_s, end_s;
    std::int32_t microbatch;
  };

  // What an actor (one rank, or a TP group) did, for the report and the trace.
  struct ActorState {
    // Per instruction and played lane: the receive posted and not yet seen complete.
    std::vector<std::pair<std::int64_t, std::int32_t>> receiving;
    std::vector<sg4::ActorPtr> worker;
    double busy_s = 0, recompute_s = 0, optimizer_s = 0;
    std::map<Wait, double> waited_s;
    double last_compute_end_s = 0;
    double end_s = 0;  // when the actor's last instruction finished
    bool finished = false;
    bool traced = false;
    std::size_t lanes = 1;
    std::vector<TraceEvent> trace;
    std::vector<double> issued_s;  // traced actors: when each instruction was issued
  };

  void wait_for(ActorState& st, std::int32_t i, const models::StageProgram* sp = nullptr) {
    if (i < 0) return;
    auto idx = static_cast<std::size_t>(i);
    bool waited = false;
    for (std::size_t l = 0; l < st.lanes; ++l) {
      auto& key = st.receiving[idx * st.lanes + l];
      if (key.second >= 0) {
        receive(key);
        key.second = -1;
        waited = true;
      }
    }
    // A traced receive: from its posting to when the rank saw it complete.
    if (waited && st.traced && sp != nullptr && sp->instrs[idx].kind == InstrKind::recv) {
      record(st, *sp, sp->instrs[idx], st.issued_s[idx], sg4::Engine::get_clock());
    }
    if (st.worker[idx]) {
      st.worker[idx]->join();
      st.worker[idx] = nullptr;
    }
  }

  void play(std::size_t a) {
    const ActorSpec& spec = specs_[a];
    ActorState& st = actors_[a];
    const std::int64_t rep = spec.lanes.front();
    const models::StageProgram& sp = stage_of(rep);
    const std::size_t n = sp.instrs.size();
    const std::size_t lanes = spec.lanes.size();
    st.lanes = lanes;
    st.receiving.assign(n * lanes, {-1, -1});
    st.worker.assign(n, nullptr);
    std::array<std::uint64_t, 6> collectives{};  // collectives issued so far, per stream
    if (st.traced) st.issued_s.assign(n, 0);
    std::array<std::int32_t, 6> last{-1, -1, -1, -1, -1, -1};
    // The actor computes at the pace of its slowest member.
    double slow = 1;
    for (const auto& ms : spec.mirrors) {
      for (auto m : ms) slow = std::max(slow, slowdown_[static_cast<std::size_t>(m)]);
    }
    const std::int64_t my_stage = layout_.coord(rep).pp;
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
          const double now = sg4::Engine::get_clock();
          const double gap = now - st.last_compute_end_s;
          if (gap > 0) st.waited_s[in.after >= 0 ? wait_of(sp.instrs[static_cast<std::size_t>(in.after)]) : Wait::none] += gap;
          const BlockTime& bt = blocks_[static_cast<std::size_t>(sp.stage)][k];
          const double dt = bt.total() * slow;
          st.busy_s += bt.compute_s * slow;
          st.recompute_s += bt.recompute_s * slow;
          st.optimizer_s += bt.optimizer_s * slow;
          // In-node collectives merged into the block: their time is exposed TP/CP time.
          st.waited_s[Wait::tp] += bt.tp_s * slow;
          st.waited_s[Wait::cp] += bt.cp_s * slow;
          if (dt > 0) sg4::this_actor::execute(dt * kSpeed);  // the compute stream is this actor's own
          st.last_compute_end_s = sg4::Engine::get_clock();
          if (st.traced) record(st, sp, in, now, st.last_compute_end_s);
          break;
        }
        case InstrKind::collective: {
          wait_for(st, in.after);
          const auto g = in.group;
          if (layout_.group_size(g) <= 1 || options_.free_communication) break;
          const std::size_t type = kind_type(g);
          const RingFlow f = ring_flow(in.collective, in.bytes, static_cast<double>(layout_.group_size(g)));
          std::vector<std::pair<std::uint64_t, std::int64_t>> joins;  // (instance, a member rank) per played lane
          const std::uint64_t seq = collectives[stream]++;
          for (std::size_t l = 0; l < lanes; ++l) {
            const std::int64_t r = spec.lanes[l];
            account(spec, l, type, f.bytes);
            const auto group = static_cast<std::uint64_t>(layout_.group_index(g, r));
            joins.emplace_back(((type * 8 + stream) << 52) | (group << 24) | seq, r);
          }
          ActorState* traced = st.traced ? &st : nullptr;
          // The stream's previous collective, if still running, is joined by this worker.
          sg4::ActorPtr before = last[stream] >= 0 ? st.worker[static_cast<std::size_t>(last[stream])] : nullptr;
          st.worker[k] = sg4::Actor::create("coll", hosts_[static_cast<std::size_t>(rep)], [this, joins = std::move(joins), f, g, type, traced, before, &sp, &in] {
            if (before) before->join();
            const double start = sg4::Engine::get_clock();
            collective(joins, f, g, type);
            if (traced != nullptr) record(*traced, sp, in, start, sg4::Engine::get_clock());
          });
          break;
        }
        case InstrKind::send: {
          wait_for(st, in.after);
          const std::size_t type = kinds_.size() + (in.peer_stage == my_stage ? 0 : (in.peer_stage == layout_.coord(peer_[kinds_.size()][static_cast<std::size_t>(rep)]).pp ? 0 : 1));
          const double bytes = options_.free_communication ? 0 : in.bytes;
          for (std::size_t l = 0; l < lanes; ++l) {
            const std::int64_t r = spec.lanes[l];
            const std::int64_t peer = in.peer_stage == my_stage ? r : peer_[type][static_cast<std::size_t>(r)];
            if (peer != r) account(spec, l, type, bytes);
            // Sends are buffered, as the Program's replay takes them (Megatron batches
            // isend/irecv): nothing waits for one but its receiver.
            P2p& e = p2p_[p2p_key(peer, in.tag)];
            e.src = r;
            e.bytes = bytes;
            e.sent = true;
            if (e.posted) start(e, peer);
            if (e.ready) e.ready->release();
          }
          break;
        }
        case InstrKind::recv: {
          for (std::size_t l = 0; l < lanes; ++l) {
            const std::int64_t r = spec.lanes[l];
            P2p& e = p2p_[p2p_key(r, in.tag)];
            e.posted = true;
            if (e.sent) start(e, r);
            st.receiving[k * lanes + l] = {r, in.tag};
          }
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
    for (std::size_t k = 0; k < n; ++k) wait_for(st, static_cast<std::int32_t>(k), &sp);
    // The tail after the last compute (the distributed optimizer's gather) is DP time.
    const double tail = sg4::Engine::get_clock() - st.last_compute_end_s;
    if (tail > 0) st.waited_s[Wait::dp] += tail;
    st.end_s = sg4::Engine::get_clock();
    st.finished = true;
  }

  static void record(ActorState& st, const models::StageProgram& sp, const Instr& in, double start, double end) {
    const std::int32_t mb = in.item >= 0 ? sp.schedule[static_cast<std::size_t>(in.item)].microbatch : -1;
    st.trace.push_back({in.name, static_cast<std::uint8_t>(in.stream), start, end, mb});
  }

  // Chrome trace event format: complete events ("X") in microseconds, one process per rank,
  // one thread per stream, named by metadata events.
  std::string trace_json() const {
    nlohmann::json events = nlohmann::json::array();
    std::vector<std::int64_t> traced = traced_;
    std::sort(traced.begin(), traced.end());
    traced.erase(std::unique(traced.begin(), traced.end()), traced.end());
    for (const std::int64_t r : traced) {
      // A TP group's ranks share their actor's timeline.
      const ActorState& st = actors_[static_cast<std::size_t>(actor_of_[static_cast<std::size_t>(r)])];
      const auto pid = r;
      events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", "rank " + std::to_string(r) + " (stage " + std::to_string(layout_.coord(pid).pp) + ")"}}}});
      for (int s = 0; s < 6; ++s) {
        events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", s}, {"args", {{"name", std::string(models::to_string(static_cast<models::Stream>(s)))}}}});
      }
      for (const auto& e : st.trace) {
        nlohmann::json ev = {{"ph", "X"}, {"name", program_.names[static_cast<std::size_t>(e.name)]}, {"pid", pid}, {"tid", e.stream},
                             {"ts", e.start_s * 1e6}, {"dur", (e.end_s - e.start_s) * 1e6}};
        if (e.microbatch >= 0) ev["args"] = {{"microbatch", e.microbatch}};
        events.push_back(std::move(ev));
      }
    }
    return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() + "\n";
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
      if (a.busy_s + a.recompute_s > b.busy_s + b.recompute_s) crit = i;
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
    // Waiting for a pipeline neighbour: the bubble, with the point-to-point transfers in it.
    // A rank done before the step ends waits for the pipeline to drain elsewhere: bubble too.
    b.bubble_s = waited(Wait::pipeline) + waited(Wait::none) + (makespan_ - c.end_s);
    b.pp_s = 0;
    b.stalls_s = std::max(0.0, makespan_ - b.total());
    r.step_time_s = makespan_;
    r.bubble_fraction = (c.busy_s + c.recompute_s) > 0 ? b.bubble_s / (c.busy_s + c.recompute_s) : 0;
    const models::StepFlops flops = models::step_flops(p_);
    const double gpus = static_cast<double>(p_.cluster.num_gpus);
    const double peak = plan::peak_tflops(p_.cluster.gpu, p_.training.precision);
    r.model_tflops_per_gpu = flops.model / makespan_ / gpus / 1e12;
    r.hardware_tflops_per_gpu = flops.hardware / makespan_ / gpus / 1e12;
    if (peak > 0) {
      r.mfu = r.model_tflops_per_gpu / peak;
      r.hfu = r.hardware_tflops_per_gpu / peak;
    }
    const double tokens = static_cast<double>(p_.training.global_batch_size) * static_cast<double>(p_.model.seq_length);
    r.tokens_per_s = tokens / makespan_;
    if (p_.training.tokens > 0) r.time_to_train_s = p_.training.tokens / r.tokens_per_s;
    if (options_.free_communication) r.notes.emplace_back("simulated with free communication");
    return r;
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
    sg4::SplitDuplexLink* link = nullptr;
    double bytes_per_s = 0;
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
  std::vector<double> slowdown_;
  std::vector<plan::GroupKind> kinds_;             // the groups collectives use, in first use
  std::vector<std::vector<std::int64_t>> peer_;    // per flow type, per rank: who it sends to
  std::vector<ActorSpec> specs_;                   // who each actor plays
  std::vector<std::int32_t> actor_of_;             // per rank
  std::vector<std::int64_t> traced_;
  std::unordered_map<std::uint64_t, P2p> p2p_;  // by p2p_key(receiving rank, tag)
  std::unordered_map<std::uint64_t, Coll> colls_;             // by (type, stream, group, ordinal)
  std::vector<sg4::Host*> hosts_;
  std::vector<SimLink> links_;
  sg4::Link* free_link_ = nullptr;
  std::map<std::pair<std::int64_t, std::int64_t>, Route> routes_;
  std::vector<std::vector<const Route*>> route_of_;  // per flow type, per rank
  std::vector<double> link_bytes_;                    // per directed link slot
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
