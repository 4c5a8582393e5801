#pragma once
// A process group's collectives: the executor's communication interface. `LocalGroup` is a
// group of one (every collective is the identity: the single-rank reference runs on it);
// `MpiGroup` (mpi_group.hpp) is the CPU backend's, over Open MPI; the CUDA backend's is NCCL's.
// Sizes and times are recorded per group with nccl-tests' conventions (bytes = the buffer).
//
// Float spans are tensors in the backend's memory (the host's on the CPU backend, the device's
// under NcclGroup); integer and double spans (counts, checksums, losses, flags) are the host's
// on every backend.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>

namespace meshwork::exec {

// A collective that could not complete: a peer hung or died (the message names it), or a
// self-check found a wrong result.
class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct GroupStats {
  double seconds = 0;  // inside this group's calls, waiting included
  double recv_seconds = 0;  // of which in point-to-point receives (mostly waiting for the sender)
  double bytes = 0;    // buffer sizes, as nccl-tests' "size"
  std::int64_t calls = 0;
  std::int64_t wrong = 0;  // self-checked results that disagreed across members (#wrong)
};

class Group {
 public:
  virtual ~Group() = default;
  [[nodiscard]] virtual int size() const = 0;
  [[nodiscard]] virtual int rank() const = 0;
  // The world rank of member `member`, for messages.
  [[nodiscard]] virtual std::int64_t world_rank(int member) const = 0;
  [[nodiscard]] virtual const std::string& name() const = 0;

  virtual void all_reduce_sum(std::span<float> data) = 0;
  virtual void all_reduce_sum(std::span<double> data) = 0;
  virtual void all_reduce_max(std::span<float> data) = 0;
  // Member `root`'s `data` to every member's (a micro-batch's load, Megatron's
  // get_batch_on_this_tp_rank).
  virtual void broadcast(int root, std::span<float> data) = 0;
  // `in` holds size() equal blocks; member i gets the sum of block i.
  virtual void reduce_scatter_sum(std::span<const float> in, std::span<float> out) = 0;
  // `out` gets every member's `in`, in member order.
  virtual void all_gather(std::span<const float> in, std::span<float> out) = 0;
  virtual void all_gather(std::span<const std::uint64_t> in, std::span<std::uint64_t> out) = 0;
  // All-to-all with variable sizes (MoE token dispatch): `send` holds size() contiguous
  // blocks, block i of send_counts[i] floats going to member i; `recv` gets member i's block
  // for this member, recv_counts[i] floats, in member order. The counts must agree pairwise.
  virtual void all_to_all_v(std::span<const float> send, std::span<const int> send_counts, std::span<float> recv, std::span<const int> recv_counts) = 0;
  // `in` holds size() equal blocks; member i gets block i of every member, in member order
  // (how MoE dispatch exchanges its counts).
  virtual void all_to_all(std::span<const std::int64_t> in, std::span<std::int64_t> out) = 0;
  // Point to point inside the group (pipeline neighbours): sends are buffered and return at
  // once; a receive waits for the matching tag.
  virtual void send(int to, int tag, std::span<const float> data) = 0;
  virtual void recv(int from, int tag, std::span<float> data) = 0;
  // Completes every buffered send.
  virtual void flush() = 0;

  [[nodiscard]] const GroupStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 protected:
  GroupStats stats_;
};

// Its float copies are the host's: a device backend's group of one is NcclGroup or StagedGroup.
class LocalGroup final : public Group {
 public:
  explicit LocalGroup(std::string name = "local", std::int64_t world_rank = 0) : name_(std::move(name)), world_rank_(world_rank) {}
  [[nodiscard]] int size() const override { return 1; }
  [[nodiscard]] int rank() const override { return 0; }
  [[nodiscard]] std::int64_t world_rank(int) const override { return world_rank_; }
  [[nodiscard]] const std::string& name() const override { return name_; }
  void all_reduce_sum(std::span<float>) override {}
  void all_reduce_sum(std::span<double>) override {}
  void all_reduce_max(std::span<float>) override {}
  void broadcast(int root, std::span<float>) override {
    if (root != 0) throw std::invalid_argument("broadcast in a group of one from member " + std::to_string(root));
  }
  void reduce_scatter_sum(std::span<const float> in, std::span<float> out) override { copy(in, out); }
  void all_gather(std::span<const float> in, std::span<float> out) override { copy(in, out); }
  void all_gather(std::span<const std::uint64_t> in, std::span<std::uint64_t> out) override {
    if (in.size() != out.size()) throw std::invalid_argument("all_gather: sizes differ");
    std::copy(in.begin(), in.end(), out.begin());
  }
  void all_to_all_v(std::span<const float> send, std::span<const int> send_counts, std::span<float> recv, std::span<const int> recv_counts) override {
    if (send_counts.size() != 1 || recv_counts.size() != 1 || send_counts[0] != recv_counts[0] || static_cast<std::size_t>(send_counts[0]) != send.size()) {
      throw std::invalid_argument("all_to_all_v in a group of one: counts and sizes differ");
    }
    copy(send, recv);
  }
  void all_to_all(std::span<const std::int64_t> in, std::span<std::int64_t> out) override {
    if (in.size() != out.size()) throw std::invalid_argument("all_to_all: sizes differ");
    std::copy(in.begin(), in.end(), out.begin());
  }
  void send(int, int, std::span<const float>) override { throw std::logic_error("send in a group of one"); }
  void recv(int, int, std::span<float>) override { throw std::logic_error("recv in a group of one"); }
  void flush() override {}

 private:
  static void copy(std::span<const float> in, std::span<float> out) {
    if (in.size() != out.size()) throw std::invalid_argument("collective in a group of one: sizes differ");
    std::copy(in.begin(), in.end(), out.begin());
  }
  std::string name_;
  std::int64_t world_rank_;
};

// One rank's groups of a plan's mesh (exec/rank_groups.hpp makes them).
struct Groups {
  std::unique_ptr<Group> world, tp, dp, pp, embedding;
  // MoE: expert parallelism and the expert-data-parallel group that reduces the experts'
  // gradients (groups of one when absent).
  std::unique_ptr<Group> ep, expert_dp;
  // Context parallelism: the CP group (ring attention's exchanges; a group of one when absent).
  // With CP, `dp` is the DP x CP group that reduces and shards the dense gradients.
  std::unique_ptr<Group> cp;
};

}  // namespace meshwork::exec
