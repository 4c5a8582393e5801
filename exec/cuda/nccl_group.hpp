#pragma once
// The CUDA backend's process group: one NCCL communicator over a group's members, collectives
// on device buffers enqueued on a caller's stream, and a watchdog so that a dead or hung peer
// ends the job with a message rather than a hang.
//
// The communicator is non-blocking (ncclConfig_t::blocking = 0, NCCL 2.14+): creating it and
// enqueuing work return at once, possibly with ncclInProgress, and this class polls
// ncclCommGetAsyncError until NCCL is done, under the deadline (NCCL user guide, "Creating a
// communicator with options" and "Fault tolerance": after ncclInProgress nothing else may be
// called on the communicator until its state leaves ncclInProgress). Each enqueued operation
// is followed by an event on its stream; wait() polls those events and the communicator's
// asynchronous error. On an error or when the deadline passes it aborts the communicator
// (ncclCommAbort, which also ends NCCL's kernels still waiting for a peer) and throws
// exec::CollectiveError naming the group, the operation, its sequence number and the timeout.
// After that the group is unusable. Not thread-safe: one host thread drives a group.
//
// It is also the CUDA backend's exec::Group (issue 23), on the stream bind() names (the
// chunks' compute stream): its float spans are device tensors, its integer and double spans
// host values staged through the device. Each call enqueues on that stream and waits for it
// under the watchdog, as MpiGroup's calls return done. Sends are buffered as exec::Group
// says: the data is copied aside and posted, in one NCCL group, with the next receive or at
// flush(), so that two neighbours exchanging cannot wait for each other. NCCL matches a
// pair's transfers by order, not by tag: the Program lists a pair's sends in the order its
// receiver lists them (tests/models/program_transfers_test.cpp), and the tag is not sent.
// A receive waits for the sends posted with it, so a buffered send to one neighbour can hold a
// receive from another until the first posts its receive: deadlock-free when every rank's
// receives follow the Program's order, which the pipeline schedules keep; to be run on 8 GPUs
// under the interleaved and zero-bubble schedules before it is trusted there.

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "exec/cuda/streams.hpp"
#include "exec/group.hpp"
#include "kernels/cuda/device_buffer.hpp"

namespace meshwork::exec::cuda {

struct NcclGroupOptions {
  double timeout_s = 300;  // the watchdog's deadline for creation, each enqueue and each wait(); 0: none
  // The members' world ranks, for messages (empty: members are named by their group rank).
  std::vector<std::int64_t> world_ranks;
  // Called with the watchdog's message before it throws (a program may end the job here).
  std::function<void(const std::string&)> on_timeout;
};

// The NCCL type of a buffer's elements.
template <class T>
constexpr ncclDataType_t nccl_type();
template <>
constexpr ncclDataType_t nccl_type<float>() { return ncclFloat32; }
template <>
constexpr ncclDataType_t nccl_type<__nv_bfloat16>() { return ncclBfloat16; }
template <>
constexpr ncclDataType_t nccl_type<double>() { return ncclFloat64; }
template <>
constexpr ncclDataType_t nccl_type<std::int64_t>() { return ncclInt64; }
template <>
constexpr ncclDataType_t nccl_type<std::uint64_t>() { return ncclUint64; }

class NcclGroup final : public Group {
 public:
  // Collective over the group: every member calls it with the same id (unique_id.hpp), its
  // rank and the size, with its own device current. Returns once the communicator is ready;
  // throws CollectiveError if that takes longer than options.timeout_s.
  NcclGroup(std::string name, const ncclUniqueId& id, int rank, int size, NcclGroupOptions options = {});
  // A healthy communicator is finalised (its work flushed) and destroyed; a failed one is
  // aborted.
  ~NcclGroup() override;
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  [[nodiscard]] int rank() const override { return rank_; }
  [[nodiscard]] int size() const override { return size_; }
  [[nodiscard]] std::int64_t world_rank(int member) const override;
  [[nodiscard]] const std::string& name() const override { return name_; }
  [[nodiscard]] ncclComm_t comm() const { return comm_; }
  // stats(): bytes and calls as nccl-tests counts them (the buffer's size); seconds spent in
  // wait() (every exec::Group call waits).

  // exec::Group, on the bound stream (the legacy default stream until bind()).
  void bind(cudaStream_t stream) { bound_ = stream; }
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

  // In place. Sum or max of every member's `data`.
  template <class T>
  void all_reduce_sum(T* data, std::size_t count, cudaStream_t stream) {
    all_reduce(data, count, nccl_type<T>(), ncclSum, stream);
  }
  template <class T>
  void all_reduce_max(T* data, std::size_t count, cudaStream_t stream) {
    all_reduce(data, count, nccl_type<T>(), ncclMax, stream);
  }
  // `in` holds size() blocks of out_count; member i gets the sum of every member's block i.
  template <class T>
  void reduce_scatter_sum(const T* in, T* out, std::size_t out_count, cudaStream_t stream) {
    reduce_scatter(in, out, out_count, nccl_type<T>(), stream);
  }
  // `out` (size() * in_count) gets every member's `in`, in member order.
  template <class T>
  void all_gather(const T* in, T* out, std::size_t in_count, cudaStream_t stream) {
    all_gather(in, out, in_count, nccl_type<T>(), stream);
  }
  // `send` holds size() blocks of block_count, block i going to member i; `recv` gets member
  // i's block for this member at block i.
  template <class T>
  void all_to_all(const T* send, T* recv, std::size_t block_count, cudaStream_t stream) {
    const std::vector<std::size_t> counts(static_cast<std::size_t>(size_), block_count);
    all_to_all_v(send, counts, recv, counts, nccl_type<T>(), stream);
  }
  // Variable blocks, contiguous in member order (MoE dispatch); counts must agree pairwise.
  template <class T>
  void all_to_all_v(const T* send, std::span<const std::size_t> send_counts, T* recv, std::span<const std::size_t> recv_counts, cudaStream_t stream) {
    all_to_all_v(send, send_counts, recv, recv_counts, nccl_type<T>(), stream);
  }
  // `root`'s `send` into every member's `recv` (the same pointer for in place).
  template <class T>
  void broadcast(const T* send, T* recv, std::size_t count, int root, cudaStream_t stream) {
    broadcast(send, recv, count, root, nccl_type<T>(), stream);
  }
  // Point to point (pipeline neighbours). A lone send or recv blocks its stream until the
  // peer posts the other half; send_recv posts both in one NCCL group, so that neighbours
  // exchanging in both directions cannot deadlock.
  template <class T>
  void send(const T* data, std::size_t count, int peer, cudaStream_t stream) {
    send_recv(data, count, peer, nullptr, 0, -1, nccl_type<T>(), stream);
  }
  template <class T>
  void recv(T* data, std::size_t count, int peer, cudaStream_t stream) {
    send_recv(nullptr, 0, -1, data, count, peer, nccl_type<T>(), stream);
  }
  template <class T>
  void send_recv(const T* send, std::size_t send_count, int to, T* recv, std::size_t recv_count, int from, cudaStream_t stream) {
    send_recv(send, send_count, to, recv, recv_count, from, nccl_type<T>(), stream);
  }

  // Point-to-point transfers posted as one NCCL group, so that they progress together (a send
  // to a neighbour and a receive from it cannot wait for each other). Each is a send (`send`
  // set) or a receive (`recv` set) of `count` elements; between two members NCCL matches them
  // in the order they are posted, not by any tag.
  struct Transfer {
    const void* send = nullptr;
    void* recv = nullptr;
    std::size_t count = 0;
    int peer = -1;
  };
  template <class T>
  void point_to_point(std::span<const Transfer> transfers, cudaStream_t stream) {
    point_to_point(transfers, nccl_type<T>(), stream);
  }

  // Waits until every operation enqueued so far has completed, or throws CollectiveError
  // (after aborting the communicator) when NCCL reports an error or timeout_s passes first
  // (0: no deadline). wait() uses options.timeout_s.
  void wait(double timeout_s);
  void wait() { wait(options_.timeout_s); }

 private:
  void all_reduce(void* data, std::size_t count, ncclDataType_t type, ncclRedOp_t op, cudaStream_t stream);
  void reduce_scatter(const void* in, void* out, std::size_t out_count, ncclDataType_t type, cudaStream_t stream);
  void all_gather(const void* in, void* out, std::size_t in_count, ncclDataType_t type, cudaStream_t stream);
  void all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv, std::span<const std::size_t> recv_counts, ncclDataType_t type,
                    cudaStream_t stream);
  void broadcast(const void* send, void* recv, std::size_t count, int root, ncclDataType_t type, cudaStream_t stream);
  void send_recv(const void* send, std::size_t send_count, int to, void* recv, std::size_t recv_count, int from, ncclDataType_t type, cudaStream_t stream);
  void point_to_point(std::span<const Transfer> transfers, ncclDataType_t type, cudaStream_t stream);

  // Before an operation: the group is usable. After NCCL returned `r` for it: waits out
  // ncclInProgress, then records the completion event on `stream`.
  void begin(const char* op);
  void enqueued(ncclResult_t r, const char* op, double bytes, cudaStream_t stream);
  // Polls ncclCommGetAsyncError until it leaves ncclInProgress; `doing` says for what.
  void settle(const std::string& doing, double timeout_s);
  [[noreturn]] void abort_and_throw(const std::string& message);
  [[nodiscard]] std::string member_text() const;
  [[nodiscard]] std::string nccl_message(ncclResult_t r) const;

  std::string name_;
  int rank_, size_;
  NcclGroupOptions options_;
  ncclComm_t comm_ = nullptr;
  bool failed_ = false;
  std::int64_t sequence_ = 0;
  struct Pending {
    std::string op;
    std::int64_t sequence;
    double bytes;
    Event done;
  };
  std::vector<Pending> pending_;
  std::vector<Event> spare_events_;
  // exec::Group: the bound stream, and the sends not posted yet (their copies).
  cudaStream_t bound_ = nullptr;
  struct BufferedSend {
    kernels::cuda::DeviceBuffer<float> data;
    int to;
  };
  std::vector<BufferedSend> sends_;
  // Posts the buffered sends and `also` (a receive, if any) as one group, then waits.
  void post_sends(const Transfer* also);
  // A host span through the device: up, `op` on the device copy, down.
  template <class T, class Op>
  void staged(std::span<const T> in, std::span<T> out, Op&& op);
};

}  // namespace meshwork::exec::cuda
