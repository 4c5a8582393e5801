#pragma once
// The CPU backend's process groups: Open MPI communicators with a watchdog. Every collective
// is non-blocking underneath and polled against a deadline; before it, each member posts a
// small arrival notice to the others, so that when the deadline passes each waiting member
// knows which peers never arrived and says so (a hung or dead rank is named, not waited for
// forever). With self-checks on, every result that must be identical on all members (an
// all-reduce, an all-gather) is compared by checksum across them, as nccl-tests counts #wrong.

#include <mpi.h>

#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <vector>

#include "exec/group.hpp"

namespace meshwork::exec {

struct GroupOptions {
  double timeout_s = 300;    // the watchdog's deadline per call; 0: none
  bool self_check = false;   // compare results across members
  // Called with the watchdog's message before it throws: a program ends the job here
  // (MPI_Abort), while the buffers of the operations still in flight are alive.
  std::function<void(const std::string&)> on_timeout;
};

class MpiGroup final : public Group {
 public:
  // A group of the world's ranks `members` (ascending); this process must be one of them.
  // Collective over the world: every rank calls it for every group, in the same order.
  static std::unique_ptr<MpiGroup> split(std::string name, const std::vector<std::int64_t>& members, int colour, const GroupOptions& options);
  ~MpiGroup() override;
  MpiGroup(const MpiGroup&) = delete;
  MpiGroup& operator=(const MpiGroup&) = delete;

  [[nodiscard]] int size() const override { return size_; }
  [[nodiscard]] int rank() const override { return rank_; }
  [[nodiscard]] std::int64_t world_rank(int member) const override { return members_.at(static_cast<std::size_t>(member)); }
  [[nodiscard]] const std::string& name() const override { return name_; }

  void all_reduce_sum(std::span<float> data) override;
  void all_reduce_sum(std::span<double> data) override;
  void all_reduce_max(std::span<float> data) override;
  void broadcast(int root, std::span<float> data) override;
  void reduce_scatter_sum(std::span<const float> in, std::span<float> out) override;
  void all_gather(std::span<const float> in, std::span<float> out) override;
  void all_gather(std::span<const std::uint64_t> in, std::span<std::uint64_t> out) override;
  void all_to_all_v(std::span<const float> send, std::span<const int> send_counts, std::span<float> recv, std::span<const int> recv_counts) override;
  void all_to_all(std::span<const std::int64_t> in, std::span<std::int64_t> out) override;
  void send(int to, int tag, std::span<const float> data) override;
  void recv(int from, int tag, std::span<float> data) override;
  void flush() override;

 private:
  MpiGroup(std::string name, MPI_Comm comm, MPI_Comm notices, std::vector<std::int64_t> members, const GroupOptions& options);
  // Posts this member's arrival at collective `what`, starts its `chunks` pieces
  // (`launch(i)` starts piece i and returns its request) a few at a time, and waits for them
  // under the deadline.
  template <class Launch>
  void run(const char* what, double bytes, std::size_t chunks, Launch launch);
  // Polls `requests` until done, or fails the call `timeout_s` after `start` naming the members
  // whose arrival notices never came.
  void wait(std::vector<MPI_Request>& requests, const char* what, const std::vector<MPI_Request>& arrivals, std::chrono::steady_clock::time_point start);
  [[noreturn]] void fail(const std::string& message);
  void check_identical(std::span<const float> result, const char* what);

  std::string name_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm notices_ = MPI_COMM_NULL;  // arrival notices, apart from the data
  std::vector<std::int64_t> members_;
  GroupOptions options_;
  int size_ = 1, rank_ = 0;
  std::int64_t sequence_ = 0;  // collectives so far
  struct PendingSend {
    std::vector<float> data;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  std::list<PendingSend> sends_;
  bool failed_ = false;  // a timeout: operations may still be in flight, so nothing is freed
};

}  // namespace meshwork::exec
