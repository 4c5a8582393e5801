#pragma once
// The discrete-event simulation of one training step (docs/DESIGN.md, sim/): SimGrid
// plays the plan's Program on its fabric. An actor (a TP group in lockstep, or a rank with
// `fine`) issues its instructions in order, each on its stream: compute timed by
// models::ComputeTimer (times a straggler's slowdown), collectives as one flow per ring edge
// on the links of our own routes (topology::Router: destination-mod-k or ECMP hashed) started
// when the group is complete, with the ring's latency terms added, and pipeline transfers as
// flows between neighbours at their rendezvous. Alike actors are played once (symmetry.hpp).
// Bubbles, exposed communication and contention are what happens, not what a formula says.
//
// SimGrid keeps one global engine per process and cannot start a second one, so each
// simulation runs in a child process (fork); its result comes back as JSON over a pipe, with
// progress lines on the way. A cancel flag kills the child.

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/program.hpp"
#include "plan/plan.hpp"
#include "report/report.hpp"

namespace meshwork::sim {

// The default budget of played actors: the 16,384-GPU Llama 3 plan plays 2,048 TP groups
// exactly (bench/RESULTS.md, simulator speed); more than that is what makes a step take
// minutes on one core.
inline constexpr std::int64_t kDefaultMaxPlayedActors = 2048;

struct SimulateOptions {
  // All communication free and instantaneous: what remains is compute and the schedule's
  // bubble (the check against the Program's replay and the papers' formulas).
  bool free_communication = false;
  // Called in the calling process with the fraction of instructions played, 0 to 1.
  std::function<void(double)> progress;
  // Set (from any thread) to stop the simulation: simulate() returns with error "cancelled".
  const std::atomic<bool>* cancel = nullptr;
  // A Chrome/Perfetto trace of these ranks (one process per rank, one thread per stream),
  // written to `trace_path` when it is not empty. No ranks given: the first rank of every
  // pipeline stage.
  std::string trace_path;
  std::vector<std::int64_t> trace_ranks;
  // Every instruction as its own event, TP collectives as flows (the reference). Otherwise
  // (the default) a stage's consecutive compute and its collectives inside one NVLink domain
  // are merged into one block, the collectives timed by the ring formula on the NVLink links
  // they would have used alone: the same step, with a fraction of the events.
  bool fine = false;
  // Each collective as its ring's 2(n-1) (or n-1) steps, every step a message of S/n per ring
  // edge that starts when the previous step has arrived everywhere (the reference the
  // one-flow-per-edge aggregate is checked against, docs/reference/simgrid-3.32-notes.md). Slower by the
  // number of steps.
  bool per_message = false;
  // Play this Program instead of the plan's own lowering (tests time single collectives).
  const models::Program* program = nullptr;
  // A failure inside the step: at `at_s`, a GPU ("gpu17", its rank), a node ("node3"), a
  // link ("leaf3-spine1", as `meshwork topology` names them) or a switch or NIC ("spine2",
  // "nic5") goes down. A GPU or node: SimGrid turns its host off, its ranks stop, and whoever
  // waits for them waits until NCCL's watchdog ends the job. A link or switch: the flows on it
  // stall until the fabric moves them to other paths, cluster.topology.reroute_s later (the
  // bytes left go on on the new paths, which the faulted fabric's routes give); a pair left
  // with no path (a GPU's only NIC link) waits like a dead GPU's peers.
  struct Failure {
    std::string target;
    double at_s = 0;
  };
  std::optional<Failure> failure;
  // Play one actor per colour of alike actors (sim/symmetry.hpp). Off: every actor is
  // played (the check that the reduction is exact).
  bool mirror_alike = true;
  // At most this many colours of alike actors are played (0: no limit, the reduction is
  // exact). Past it, ranks alike in structure but not in their paths share a colour and move
  // at its slowest member's pace (sim/symmetry.hpp); the report notes it.
  std::int64_t max_played_actors = kDefaultMaxPlayedActors;
  // A program to run the simulation in instead of a fork of this process: `WORKER
  // __simulate-worker` (the meshwork CLI) reads the plan and these options as JSON on its
  // stdin and answers as the forked child does. A multi-threaded caller (the GUI) must use it:
  // a fork copies only the calling thread, and a lock another thread held (the allocator's,
  // a Qt mutex) stays locked in the child for good. `program` cannot travel this way.
  std::string worker;
  // Where the simulation process's own messages (SimGrid's, a backtrace) go; empty: a file
  // of its own in the temporary directory, named in the error when the process dies and
  // removed when it does not.
  std::string child_log;
  // Fault injection for tests: the simulation process dies at its start, "abort" after a
  // SimGrid-style assertion message, "kill" by SIGKILL (as the kernel's OOM killer does),
  // "bad_alloc" by an allocation that fails.
  std::string inject_death;
};

struct LinkUse {
  std::string name;          // "leaf0-spine3 (up)": the link's ends, lower tier first, and direction
  double busy_fraction = 0;  // of the step, the link carried traffic
  double bytes = 0;
};

// What a failure inside the step did.
struct Interruption {
  std::string target;
  double at_s = 0;
  double stalled_s = 0;              // when the last rank still working stopped
  std::int64_t ranks_stopped = 0;    // on the failed host or node
  std::int64_t ranks_waiting = 0;    // blocked on a transfer or collective until the watchdog ends the job
  std::int64_t ranks = 0;
  // A link or switch failure that left some pair of peers without a path: the first such
  // flow ("the DP ring edge from rank 3 to rank 4 has no path without nic3-leaf0"); empty otherwise.
  std::string partitioned;
};

// A link or switch failure the fabric routed around: the step finished, slower.
struct Reroute {
  std::string target;
  double at_s = 0;
  double reroute_s = 0;          // until the flows on it moved (cluster.topology.reroute_s)
  std::int64_t flows_moved = 0;  // played flows moved onto new paths, in flight or started after
};

struct SimulateResult {
  std::optional<report::Report> report;  // method: simulated; absent when interrupted
  std::optional<Interruption> interruption;
  std::optional<Reroute> reroute;        // a link or switch failure routed around
  std::vector<LinkUse> hottest_links;    // most bytes first (up to 10)
  std::int64_t flows = 0;                // network flows, played or mirrored
  std::int64_t played_actors = 0;        // actors played (TP groups or ranks; the rest mirrored)
  std::string error;
  std::string child_log;                 // when the simulation process died: its messages, kept
};

// Why a simulation process ended without a result, and what to do, from how it ended and the
// messages it left (tested on the patterns of SimGrid's assertions, allocation failures and
// the kernel's limit on memory mappings).
std::string explain_child_death(int wait_status, const std::string& log_text, const std::string& log_path);

SimulateResult simulate(const plan::Plan& plan, const SimulateOptions& options = {});

// The simulation itself, in the current process; simulate() calls it in a child. A process
// can run it once (SimGrid's engine is global). Writes progress lines ("progress F\n") to
// `progress_fd` when it is >= 0.
SimulateResult simulate_here(const plan::Plan& plan, const SimulateOptions& options, int progress_fd);

// The worker's side (`meshwork __simulate-worker`): reads {"plan": ..., "options": ...} from
// `in`, simulates, and writes progress and the result to `out_fd`. Returns the exit status.
int run_worker(std::string_view request, int out_fd);

// The result as JSON and back (the pipe between child and parent).
std::string result_to_json(const SimulateResult& r);
SimulateResult result_from_json(const std::string& text);

}  // namespace meshwork::sim
