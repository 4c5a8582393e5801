#pragma once
// Process groups of threads: every rank of a mesh as a thread of one process, its collectives
// exchanged in memory. What runs a plan's mesh without MPI: the GPU machine's check of the
// CUDA backend on one GPU (each thread its own CudaBackend, the tensors staged through the
// host by StagedGroup; exec/thread_mesh.hpp), and tests of the Trainer without a launcher.
//
// A collective is two barriers: every member posts its buffers, each computes its own result
// from all of them (sums in member order, so every member gets the same bits), and none
// returns before all have read. Point-to-point sends are copied into a mailbox keyed by
// (sender, receiver, tag) and return at once, as exec::Group's buffered sends. A member that
// waits longer than the timeout throws CollectiveError naming the group.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "exec/rank_groups.hpp"

namespace meshwork::exec {

class ThreadWorld {
 public:
  // With `hold_sends`, a member's point-to-point sends are held back as NcclGroup holds them
  // (exec/cuda/nccl_group.hpp: posted together with the member's next receive, or at flush()),
  // so that a schedule that would deadlock on NCCL deadlocks here too.
  explicit ThreadWorld(double timeout_s = 120, bool hold_sends = false);
  // The group maker of world rank `rank` (exec/rank_groups.hpp); every rank's thread calls it
  // for the same groups, in any order.
  [[nodiscard]] GroupMaker maker(std::int64_t rank);
  // World rank `rank` failed (`why`): every member waiting in any group, now or later, stops
  // with a CollectiveError that names it, instead of waiting out the timeout for a rank that
  // will not come (as a process group is aborted when one of its ranks dies).
  void fail(std::int64_t rank, const std::string& why);

  struct State;
  struct Failure;

 private:
  std::shared_ptr<State> state(const std::string& name, int colour, int size);
  double timeout_s_;
  bool hold_sends_;
  std::shared_ptr<Failure> failure_;
  std::mutex m_;
  std::map<std::pair<std::string, int>, std::shared_ptr<State>> states_;
};

}  // namespace meshwork::exec
