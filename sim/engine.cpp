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
#if defined(__SANITIZE_ADDRESS__)
    engine.set_config("contexts/factory:thread");  // ASan-clean contexts (the notes)
#endif
    build_platform();
    const BlockTimer blocks{p_, layout_, timer_, options_.free_communication};
    for (auto& c : program_.classes) blocks_.push_back(options_.fine ? blocks.per_instruction(c) : blocks.coarsen(c));
    if (std::getenv("MESHWORK_SIM_DEBUG") != nullptr) {
      for (const auto& c : program_.classes) std::fprintf(stderr, "stage %lld: %zu instructions to play\n", static_cast<long long>(c.stage), c.instrs.size());
    }
    total_instrs_ = 0;
    for (std::int64_t r = 0; r < world_; ++r) total_instrs_ += static_cast<std::int64_t>(stage_of(r).instrs.size());
    ranks_.resize(static_cast<std::size_t>(world_));
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
        ranks_[static_cast<std::size_t>(r)].traced = true;
      }
    }
    for (std::int64_t r = 0; r < world_; ++r) {
      sg4::Actor::create("rank" + std::to_string(r), hosts_[static_cast<std::size_t>(r)], [this, r] { play(r); });
    }
    engine.run();
    makespan_ = sg4::Engine::get_clock();
    for (std::int64_t r = 0; r < world_; ++r) {
      if (!ranks_[static_cast<std::size_t>(r)].finished) {
        out.error = "rank " + std::to_string(r) + " did not finish its Program (a deadlock in the simulation)";
        return out;
      }
    }
    out.report = make_report();
    if (!options_.trace_path.empty()) {
      std::string error;
      if (!plan::write_file_atomically(options_.trace_path, trace_json(), error)) out.error = "trace: " + error;
    }
    out.flows = flows_;
    out.hottest_links = hottest_links();
    return out;
  }

 private:
  const models::StageProgram& stage_of(std::int64_t rank) const {
    return program_.classes[static_cast<std::size_t>(layout_.coord(rank).pp)];
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
    // and pipeline neighbours (no N x N table).
    topology::Router router(topo_);
    std::map<std::pair<std::int64_t, std::int64_t>, bool> pairs;
    std::vector<plan::GroupKind> kinds;
    for (const auto& sp : program_.classes) {
      for (const auto& in : sp.instrs) {
        if (in.kind == InstrKind::collective && std::find(kinds.begin(), kinds.end(), in.group) == kinds.end()) kinds.push_back(in.group);
      }
    }
    for (std::int64_t r = 0; r < world_; ++r) {
      for (auto g : kinds) {
        if (layout_.group_size(g) <= 1) continue;
        const auto members = layout_.group_members(g, r);
        const auto pos = static_cast<std::size_t>(layout_.rank_in_group(g, r));
        pairs[{r, members[(pos + 1) % members.size()]}] = true;
      }
      if (program_.stages > 1) {
        const auto v = models::for_rank(program_, layout_, r);
        pairs[{r, v.next_rank}] = true;
        pairs[{r, v.prev_rank}] = true;
      }
    }
    for (const auto& [pair, _] : pairs) {
      const auto [a, b] = pair;
      if (a == b) continue;
      std::vector<sg4::LinkInRoute> route;
      Route mine;
      if (options_.free_communication) {
        route.emplace_back(free_link_);
      } else {
        mine.hops = p_.cluster.topology.routing == plan::Routing::d_mod_k
                        ? router.route_d_mod_k(a, b)
                        : router.route(a, b, static_cast<std::uint64_t>(a) * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(b));
        if (mine.hops.empty()) throw std::runtime_error("no route from rank " + std::to_string(a) + " to " + std::to_string(b));
        for (const auto& h : mine.hops) {
          const auto& l = links_[static_cast<std::size_t>(h.link)];
          route.emplace_back(l.link, h.forward ? sg4::LinkInRoute::Direction::UP : sg4::LinkInRoute::Direction::DOWN);
          mine.latency_s += l.link->get_latency();
        }
      }
      zone->add_route(hosts_[static_cast<std::size_t>(a)]->get_netpoint(), hosts_[static_cast<std::size_t>(b)]->get_netpoint(), nullptr,
                      nullptr, route, false);
      routes_[pair] = std::move(mine);
    }
    zone->seal();
  }

  // Counts a flow's bytes on the links of its route (for per-link utilisation).
  void account(std::int64_t from, std::int64_t to, double bytes) {
    ++flows_;
    if (options_.free_communication || bytes <= 0) return;
    for (const auto& h : routes_.at({from, to}).hops) link_bytes_[h.slot()] += bytes;
  }
  double route_latency(std::int64_t from, std::int64_t to) const { return routes_.at({from, to}).latency_s; }

  struct TraceEvent {
    std::int32_t name;  // Program::names
    std::uint8_t stream;
    double start_s, end_s;
    std::int32_t microbatch;
  };

  struct RankState {
    std::vector<sg4::ActivityPtr> activity;
    std::vector<sg4::ActorPtr> worker;
    double busy_s = 0, recompute_s = 0, optimizer_s = 0;
    std::map<Wait, double> waited_s;
    double last_compute_end_s = 0;
    double end_s = 0;  // when the rank's last instruction finished
    bool finished = false;
    bool traced = false;
    std::vector<TraceEvent> trace;
    std::vector<double> issued_s;  // traced ranks: when each instruction was issued
  };

  void wait_for(RankState& st, std::int32_t i, const models::StageProgram* sp = nullptr) {
    if (i < 0) return;
    auto idx = static_cast<std::size_t>(i);
    if (st.activity[idx]) {
      st.activity[idx]->wait();
      st.activity[idx] = nullptr;
      // A traced receive: from its posting to when the rank saw it complete.
      if (st.traced && sp != nullptr && sp->instrs[idx].kind == InstrKind::recv) {
        record(st, *sp, sp->instrs[idx], st.issued_s[idx], sg4::Engine::get_clock());
      }
    }
    if (st.worker[idx]) {
      st.worker[idx]->join();
      st.worker[idx] = nullptr;
    }
  }

  void play(std::int64_t rank) {
    RankState& st = ranks_[static_cast<std::size_t>(rank)];
    const models::StageProgram& sp = stage_of(rank);
    const auto view = models::for_rank(program_, layout_, rank);
    const std::size_t n = sp.instrs.size();
    st.activity.assign(n, nullptr);
    st.worker.assign(n, nullptr);
    std::vector<int*> received(n, nullptr);  // where receives land; lives until they complete
    std::deque<std::size_t> sends;           // sends not yet seen complete, oldest first
    if (st.traced) st.issued_s.assign(n, 0);
    std::array<std::int32_t, 6> last{-1, -1, -1, -1, -1, -1};
    static int token = 0;
    const double slow = slowdown_[static_cast<std::size_t>(rank)];
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
          if (dt > 0) {
            st.activity[k] = sg4::this_actor::exec_async(dt * kSpeed);
            st.activity[k]->wait();  // the compute stream is this actor's own
            st.activity[k] = nullptr;
          }
          st.last_compute_end_s = sg4::Engine::get_clock();
          if (st.traced) record(st, sp, in, now, st.last_compute_end_s);
          break;
        }
        case InstrKind::collective: {
          wait_for(st, in.after);
          const auto g = in.group;
          if (layout_.group_size(g) <= 1 || options_.free_communication) break;
          const auto members = layout_.group_members(g, rank);
          const auto pos = static_cast<std::size_t>(layout_.rank_in_group(g, rank));
          const std::int64_t next = members[(pos + 1) % members.size()];
          const RingFlow f = ring_flow(in.collective, in.bytes, static_cast<double>(members.size()));
          const double extra = std::max(0.0, f.steps - 1) * route_latency(rank, next);
          account(rank, next, f.bytes);
          const std::string to = "c" + std::to_string(stream) + ":" + std::to_string(next);
          const std::string mine = "c" + std::to_string(stream) + ":" + std::to_string(rank);
          const double bytes = f.bytes;
          RankState* traced = st.traced ? &st : nullptr;
          // The stream's previous collective, if still running, is joined by this worker.
          sg4::ActorPtr before = last[stream] >= 0 ? st.worker[static_cast<std::size_t>(last[stream])] : nullptr;
          st.worker[k] = sg4::Actor::create("coll", hosts_[static_cast<std::size_t>(rank)], [this, to, mine, bytes, extra, traced, before, &sp, &in] {
            if (before) before->join();
            const double start = sg4::Engine::get_clock();
            int* got = nullptr;
            auto send = sg4::Mailbox::by_name(to)->put_async(&token, static_cast<std::uint64_t>(std::llround(bytes)));
            auto recv = sg4::Mailbox::by_name(mine)->get_async<int>(&got);
            send->wait();
            recv->wait();
            if (extra > 0) sg4::this_actor::sleep_for(extra);
            if (traced != nullptr) record(*traced, sp, in, start, sg4::Engine::get_clock());
          });
          break;
        }
        case InstrKind::send: {
          wait_for(st, in.after);
          const std::int64_t peer = in.peer_stage == layout_.coord(rank).pp ? rank
                                    : (in.peer_stage == layout_.coord(view.next_rank).pp ? view.next_rank : view.prev_rank);
          const double bytes = options_.free_communication ? 0 : in.bytes;
          account(rank, peer, bytes);
          st.activity[k] = sg4::Mailbox::by_name("p" + std::to_string(peer) + ":" + std::to_string(in.tag))->put_async(&token, static_cast<std::uint64_t>(std::llround(bytes)));
          sends.push_back(k);
          break;
        }
        case InstrKind::recv: {
          st.activity[k] = sg4::Mailbox::by_name("p" + std::to_string(rank) + ":" + std::to_string(in.tag))->get_async<int>(&received[k]);
          break;
        }
      }
      // Finished sends are let go as soon as they are seen: SimGrid 3.32 keeps an actor's
      // pending activities in a list it searches linearly, so hundreds of them held to the end
      // would make every completion slow.
      while (!sends.empty() && (!st.activity[sends.front()] || st.activity[sends.front()]->test())) {
        st.activity[sends.front()] = nullptr;
        sends.pop_front();
      }
      // Sends are buffered, as the Program's replay takes them (Megatron batches isend/irecv):
      // nothing later on the stream waits for one to be received.
      if (in.kind != InstrKind::send) last[stream] = static_cast<std::int32_t>(k);
      if (rank == 0 && progress_fd_ >= 0 && (k + 1) * 50 / n > reported) {
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

  static void record(RankState& st, const models::StageProgram& sp, const Instr& in, double start, double end) {
    const std::int32_t mb = in.item >= 0 ? sp.schedule[static_cast<std::size_t>(in.item)].microbatch : -1;
    st.trace.push_back({in.name, static_cast<std::uint8_t>(in.stream), start, end, mb});
  }

  // Chrome trace event format: complete events ("X") in microseconds, one process per rank,
  // one thread per stream, named by metadata events.
  std::string trace_json() const {
    nlohmann::json events = nlohmann::json::array();
    for (std::size_t r = 0; r < ranks_.size(); ++r) {
      const RankState& st = ranks_[r];
      if (!st.traced) continue;
      const auto pid = static_cast<std::int64_t>(r);
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
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      const auto& a = ranks_[i];
      const auto& b = ranks_[crit];
      if (a.busy_s + a.recompute_s > b.busy_s + b.recompute_s) crit = i;
    }
    const RankState& c = ranks_[crit];
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
    for (const auto& [slot, bytes] : link_bytes_) {
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
  std::int64_t world_ = 0, total_instrs_ = 0, flows_ = 0;
  std::vector<double> slowdown_;
  std::vector<sg4::Host*> hosts_;
  std::vector<SimLink> links_;
  sg4::Link* free_link_ = nullptr;
  std::map<std::pair<std::int64_t, std::int64_t>, Route> routes_;
  std::unordered_map<std::size_t, double> link_bytes_;
  std::vector<RankState> ranks_;
  std::vector<std::vector<BlockTime>> blocks_;  // per stage class, per instruction
  double makespan_ = 0;
};

}  // namespace

SimulateResult simulate_here(const plan::Plan& plan, const SimulateOptions& options, int progress_fd) {
  Simulation s(plan, options, progress_fd);
  return s.run();
}

}  // namespace meshwork::sim
