#pragma once
// The simulation of one step (simulate_here, sim/simulate.hpp), one class whose work is split
// by responsibility over these files:
//
// - engine.cpp: the run, from the Program and the fabric to the result.
// - engine_platform.cpp: peers, routes and the failure's target; alike actors coloured
//   (symmetry.hpp) and the SimGrid platform of their flow classes.
// - engine_flows.cpp: a class's flows started, waited for, and moved when the fabric reroutes.
// - engine_play.cpp: the actors' play: pipeline transfers, collectives, stream workers.
// - engine_report.cpp: the step's attribution (the Report), the trace, the hottest links.
//
// Internal to sim/: nothing outside includes it.

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
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
#include "models/sm_share.hpp"
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

namespace meshwork::sim::engine {

namespace sg4 = simgrid::s4u;
using models::Instr;
using models::InstrKind;

// Hosts' speed: nothing executes on them (compute is a sleep of the actor playing it).
inline constexpr double kSpeed = 1e12;
// A failed link until the fabric reroutes: packets go nowhere. A trickle rather than 0 keeps
// SimGrid's sharing finite; a flow on it moves 1 byte in a thousand seconds.
inline constexpr double kStalledBytesPerS = 1e-3;

// What the compute stream waited for before an instruction: the kind of its `after` (and of
// its `also_after`, for the part of the wait up to that one's end); a split attention's wait
// for its tail_after, inside it, is CP's.
enum class Wait { none, pipeline, tp, cp, ep, dp };

inline Wait stream_wait(models::Stream s) {
  switch (s) {
    case models::Stream::tp: return Wait::tp;
    case models::Stream::cp: return Wait::cp;
    case models::Stream::ep: return Wait::ep;
    case models::Stream::dp: return Wait::dp;
    default: return Wait::none;
  }
}

inline Wait wait_of(const Instr& in) {
  if (in.kind == InstrKind::recv) return Wait::pipeline;
  return stream_wait(in.stream);
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
  // `progress` is told the fraction of its Program the first actor has played (0 to 1).
  Simulation(const plan::Plan& p, const SimulateOptions& options, std::function<void(double)> progress)
      : p_(p), options_(options), progress_(std::move(progress)), layout_(plan::RankLayout::from_plan(p.parallelism)), timer_(p) {}

  SimulateResult run();

 private:
  const models::StageProgram& stage_of(std::int64_t rank) const {
    return program_.classes[static_cast<std::size_t>(layout_.coord(rank).pp)];
  }

  // The failure's target (sim/failure_target.hpp): the ranks that stop, or the links that go down.
  std::optional<std::string> resolve_failure();

  // Who each rank sends to: its ring successor in every group a collective uses (type k of
  // `kinds_`), and its pipeline neighbours (types K and K+1).
  void find_peers();
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
  void find_routes();
  bool has_flow(std::size_t t, std::int64_t r) const;

  // Who is played. By default (merged blocks, a TP group inside one NVLink domain) an actor
  // is a TP group: its members meet in a TP collective inside every block, so they compute in
  // lockstep at the pace of the slowest (a straggler holds its whole group), and its lanes
  // (one rank per TP coordinate) move their pipeline and DP/CP/EP bytes side by side: one
  // flow per transfer whose route crosses each link once per lane on it, finishing when the
  // slowest lane would (lanes on one bottleneck share it as separate flows would; a faster
  // lane does not free its links early). `--fine` plays every rank as its own actor with its
  // own flows, the reference. Actors are then coloured (symmetry.hpp) and one of each colour
  // is played.
  void plan_actors();
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
  void build_platform();

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
  sg4::CommPtr send_flow(std::int64_t from, std::size_t type, double bytes, std::size_t* cls = nullptr);

  // Waits for the flow in `slot`. The failure daemon may move it onto a new path meanwhile
  // (it cancels the old flow and puts the new one in the slot): then waits for that. Returns
  // false when the flow failed (its link went down and no path is left).
  static bool wait_flow(const sg4::CommPtr& slot);

  // The failure of options_.failure: at its time a GPU's or node's host turns off; a link's
  // or switch's links stall what crosses them (a trickle keeps SimGrid's rates finite) until
  // the fabric reroutes, reroute_s later. Then every flow in flight or prepared on a failed
  // link moves to its class on the faulted fabric with the bytes it has left, flows started
  // later take that class (send_flow), and the links turn off: a pair left without a path
  // fails there and its ranks wait, as NCCL's do until the watchdog.
  void play_failure();
  // Moves `flow` of class `cls` off the failed links, when it crosses one and its pair still
  // has a path: a started flow with the bytes it has left (queued in `started`, to start), a
  // prepared one (`bytes`: its edge's) unstarted on the new class, for its sender to start.
  void move_flow(sg4::CommPtr& flow, std::size_t& cls, double bytes, std::vector<std::pair<sg4::CommPtr, sg4::CommPtr>>& started);
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
  void start(P2p& e);
  // The receiver `r` posts its receive of `in`. When the send has not come yet, it makes
  // the flow (unstarted) that its sender's class will play, and the send starts it: the
  // sender is r's neighbour on in.peer_stage.
  void post(std::int64_t r, const Instr& in);
  // Blocks until the last byte of the transfer to `key` (receiving rank, tag) is through;
  // returns when the data is there: the flow's end plus its route latency.
  double receive(const std::pair<std::int64_t, std::int32_t>& key);

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
  void collective(std::uint64_t key, std::int32_t kind, const models::CollectiveFlows& f, std::size_t type);

  // What a traced actor ran: models::InstrTiming, in seconds until written.
  // A collective waiting for its stream's worker.
  struct Job {
    std::uint64_t key = 0;
    std::int32_t kind = 0;
    models::CollectiveFlows flows;
    std::size_t type = 0;
    std::int32_t index = 0;  // the instruction
    double sms = 0;          // the fraction of the SMs it holds while it runs (models/sm_share.hpp)
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
    // The SMs the lanes' running collectives hold (models/sm_share.hpp), per stream: the
    // compute beside them runs on the rest, and waits on `sms_changed` (while `computing`) for
    // a collective to start or end.
    std::array<double, 6> held_sms{};
    sg4::SemaphorePtr sms_changed;
    bool computing = false;
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

  void wait_for(ActorState& st, std::int32_t i, const models::StageProgram* sp = nullptr);

  // Compute of `work_s` seconds (at full speed) beside the collectives the actor's lanes run:
  // at 1 - the SMs they hold while they run; the time lost is charged to their streams' waits.
  void compute_for(ActorState& st, double work_s);
  // A lane's collective starts (`sms` > 0) or ends (0): wakes the compute to change its pace.
  static void hold_sms(ActorState& st, std::size_t stream, double sms);

  // A stream's worker: its collectives one after the other, until a token without a job.
  void play_lane(ActorState& st, Lane& lane, const models::StageProgram& sp);

  void play(std::size_t a);

  static void record(ActorState& st, const models::StageProgram& sp, const Instr& in, double start, double end);

  // The one Trace of report/ (models/program_trace): a process per traced rank, a thread per
  // stream, each schedule item a block named by its pass and layers; with --fine its ops inside.
  std::string trace_json() const;

  report::Report make_report() const;

  // A stage's idle time in the replay of the Program with its compute as simulated and
  // communication free: what it waits for its pipeline neighbours' compute.
  double compute_bubble_s(std::int64_t stage) const;

  std::vector<LinkUse> hottest_links() const;

  struct SimLink {
    double bytes_per_s = 0;
    double latency_s = 0;
    topology::VertexId a = 0, b = 0;
  };

  const plan::Plan& p_;
  SimulateOptions options_;
  std::function<void(double)> progress_;  // the caller's observer; empty: nobody asks
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

}  // namespace meshwork::sim::engine
