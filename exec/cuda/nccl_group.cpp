#include "exec/cuda/nccl_group.hpp"

#include <chrono>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <thread>
#include <utility>

#include "exec/cuda/nccl_check.hpp"

namespace meshwork::exec::cuda {

namespace {

using Clock = std::chrono::steady_clock;

std::size_t element_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: throw std::invalid_argument("NcclGroup: an NCCL data type of unknown size");
  }
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Spin for latency at first, then give the core back: the host thread may share it with a
// data loader, and a collective that takes long takes milliseconds anyway.
void pause(std::int64_t polls) {
  if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
}

const char* at(const void* p, std::size_t elements, std::size_t bytes_each) { return static_cast<const char*>(p) + elements * bytes_each; }
char* at(void* p, std::size_t elements, std::size_t bytes_each) { return static_cast<char*>(p) + elements * bytes_each; }

}  // namespace

NcclGroup::NcclGroup(std::string name, const ncclUniqueId& id, int rank, int size, NcclGroupOptions options)
    : name_(std::move(name)), rank_(rank), size_(size), options_(std::move(options)) {
  if (size_ < 1 || rank_ < 0 || rank_ >= size_) {
    throw std::invalid_argument("NcclGroup " + name_ + ": rank " + std::to_string(rank_) + " is outside a group of " + std::to_string(size_));
  }
  if (!options_.world_ranks.empty() && options_.world_ranks.size() != static_cast<std::size_t>(size_)) {
    throw std::invalid_argument("NcclGroup " + name_ + ": " + std::to_string(options_.world_ranks.size()) + " world ranks for a group of " + std::to_string(size_));
  }
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // creation returns at once and is polled under the deadline (settle)
  const ncclResult_t r = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
  if (r != ncclSuccess && r != ncclInProgress) abort_and_throw("creating the NCCL communicator of the " + name_ + " group failed on " + member_text() + ": " + nccl_message(r));
  settle("creating the NCCL communicator (every member must join with the same id)", options_.timeout_s);
#else
  // Before NCCL 2.14 creation blocks until every member has joined: no deadline.
  MESHWORK_NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
#endif
}

NcclGroup::~NcclGroup() {
  if (comm_ == nullptr) return;
  // Unwinding from another failure, or already failed: peers may be gone, so a finalise could
  // wait for them; abort instead.
  if (failed_ || std::uncaught_exceptions() > 0) {
    ncclCommAbort(comm_);  // not checked: destructors do not throw
    return;
  }
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
  // Finalise flushes the communicator's work; on a non-blocking communicator it returns
  // ncclInProgress and is polled like the rest (NCCL user guide, "Finalizing a communicator").
  ncclResult_t r = ncclCommFinalize(comm_);
  const auto t0 = Clock::now();
  for (std::int64_t polls = 0; r == ncclSuccess || r == ncclInProgress; ++polls) {
    ncclResult_t state = ncclSuccess;
    r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) break;
    if (state == ncclSuccess) {
      ncclCommDestroy(comm_);
      return;
    }
    if (state != ncclInProgress) break;
    if (options_.timeout_s > 0 && seconds_since(t0) > options_.timeout_s) break;
    pause(polls);
  }
  ncclCommAbort(comm_);
#else
  ncclCommDestroy(comm_);
#endif
}

std::string NcclGroup::member_text() const {
  std::string text = "member " + std::to_string(rank_) + " of " + std::to_string(size_);
  if (!options_.world_ranks.empty()) text += " (world rank " + std::to_string(options_.world_ranks[static_cast<std::size_t>(rank_)]) + ")";
  return text;
}

std::string NcclGroup::nccl_message(ncclResult_t r) const { return nccl_error_text(r, comm_); }

void NcclGroup::abort_and_throw(const std::string& message) {
  failed_ = true;
  std::string full = message;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  if (comm_ != nullptr) {
    const char* last = ncclGetLastError(comm_);
    if (last != nullptr && *last != '\0' && message.find(last) == std::string::npos) full += " (NCCL: " + std::string(last) + ")";
  }
#endif
  if (comm_ != nullptr) {
    ncclCommAbort(comm_);  // its own failure changes nothing: we are throwing already
    comm_ = nullptr;
    full += "; the communicator was aborted";
  }
  if (options_.on_timeout) options_.on_timeout(full);
  throw CollectiveError(full);
}

void NcclGroup::settle(const std::string& doing, double timeout_s) {
  const auto t0 = Clock::now();
  for (std::int64_t polls = 0;; ++polls) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) abort_and_throw("ncclCommGetAsyncError failed in the " + name_ + " group on " + member_text() + ": " + nccl_message(r));
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) abort_and_throw("NCCL error in the " + name_ + " group on " + member_text() + " while " + doing + ": " + nccl_message(state));
    if (timeout_s > 0 && seconds_since(t0) > timeout_s) {
      abort_and_throw("watchdog: " + doing + " in the " + name_ + " group did not complete within " + seconds_text(timeout_s) + " s on " + member_text() +
                      ": a member hung, died or never got there");
    }
    pause(polls);
  }
}

void NcclGroup::begin(const char* op) {
  if (failed_) throw CollectiveError("the " + name_ + " group failed earlier and was aborted: " + op + " cannot run");
  ++sequence_;
}

void NcclGroup::enqueued(ncclResult_t r, const char* op, double bytes, cudaStream_t stream) {
  const std::string what = std::string(op) + " #" + std::to_string(sequence_);
  if (r == ncclInvalidArgument || r == ncclInvalidUsage) {
    // A wrong call, not a failed peer: the communicator is still usable (NCCL user guide,
    // "Error handling and communicator abort").
    kernels::cuda::fail(__FILE__, __LINE__, op, what + " of the " + name_ + " group: " + nccl_message(r));
  }
  if (r != ncclSuccess && r != ncclInProgress) abort_and_throw("enqueueing " + what + " of the " + name_ + " group failed on " + member_text() + ": " + nccl_message(r));
  if (r == ncclInProgress) settle("enqueueing " + what, options_.timeout_s);
  Event done = [&] {
    if (spare_events_.empty()) return Event(false);
    Event e = std::move(spare_events_.back());
    spare_events_.pop_back();
    return e;
  }();
  done.record(stream);
  pending_.push_back({op, sequence_, bytes, std::move(done)});
  stats_.bytes += bytes;
  ++stats_.calls;
}

void NcclGroup::wait(double timeout_s) {
  if (failed_) throw CollectiveError("the " + name_ + " group failed earlier and was aborted");
  const auto t0 = Clock::now();
  for (std::int64_t polls = 0;; ++polls) {
    const Pending* first_open = nullptr;
    try {
      for (const auto& p : pending_) {
        if (!p.done.done()) {
          first_open = &p;
          break;
        }
      }
    } catch (const kernels::cuda::CudaError&) {
      // A kernel failed on the device (the context is unusable): nothing NCCL runs will finish.
      failed_ = true;
      if (comm_ != nullptr) ncclCommAbort(comm_);
      comm_ = nullptr;
      throw;
    }
    if (first_open == nullptr) {
      for (auto& p : pending_) spare_events_.push_back(std::move(p.done));
      pending_.clear();
      stats_.seconds += seconds_since(t0);
      return;
    }
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
      abort_and_throw(first_open->op + " #" + std::to_string(first_open->sequence) + " of the " + name_ + " group failed on " + member_text() + ": " +
                      nccl_message(r != ncclSuccess ? r : state));
    }
    if (timeout_s > 0 && seconds_since(t0) > timeout_s) {
      abort_and_throw("watchdog: " + first_open->op + " #" + std::to_string(first_open->sequence) + " of the " + name_ + " group (" +
                      std::to_string(static_cast<long long>(first_open->bytes)) + " bytes) did not complete within " + seconds_text(timeout_s) + " s on " +
                      member_text() + ": a member hung, died or never called it");
    }
    pause(polls);
  }
}

void NcclGroup::all_reduce(void* data, std::size_t count, ncclDataType_t type, ncclRedOp_t op, cudaStream_t stream) {
  begin("all-reduce");
  enqueued(ncclAllReduce(data, data, count, type, op, comm_, stream), "all-reduce", static_cast<double>(count * element_bytes(type)), stream);
}

void NcclGroup::reduce_scatter(const void* in, void* out, std::size_t out_count, ncclDataType_t type, cudaStream_t stream) {
  begin("reduce-scatter");
  enqueued(ncclReduceScatter(in, out, out_count, type, ncclSum, comm_, stream), "reduce-scatter",
           static_cast<double>(out_count * static_cast<std::size_t>(size_) * element_bytes(type)), stream);
}

void NcclGroup::all_gather(const void* in, void* out, std::size_t in_count, ncclDataType_t type, cudaStream_t stream) {
  begin("all-gather");
  enqueued(ncclAllGather(in, out, in_count, type, comm_, stream), "all-gather", static_cast<double>(in_count * static_cast<std::size_t>(size_) * element_bytes(type)),
           stream);
}

void NcclGroup::broadcast(const void* send, void* recv, std::size_t count, int root, ncclDataType_t type, cudaStream_t stream) {
  if (root < 0 || root >= size_) throw std::invalid_argument("broadcast in the " + name_ + " group: root " + std::to_string(root) + " is not a member");
  begin("broadcast");
  enqueued(ncclBroadcast(send, recv, count, type, root, comm_, stream), "broadcast", static_cast<double>(count * element_bytes(type)), stream);
}

void NcclGroup::all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv, std::span<const std::size_t> recv_counts, ncclDataType_t type,
                             cudaStream_t stream) {
  const auto members = static_cast<std::size_t>(size_);
  if (send_counts.size() != members || recv_counts.size() != members) {
    throw std::invalid_argument("all-to-all in the " + name_ + " group: counts are not one per member");
  }
  begin("all-to-all");
  const std::size_t bytes_each = element_bytes(type);
  // One NCCL group of a send and a receive per member, so that they progress together (NCCL
  // user guide, "Point-to-point communication", all-to-all).
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) {
    enqueued(r, "all-to-all", 0, stream);
    return;
  }
  ncclResult_t first_error = ncclSuccess;
  std::size_t sent = 0, received = 0;
  for (std::size_t m = 0; m < members && first_error == ncclSuccess; ++m) {
    const int peer = static_cast<int>(m);
    if (send_counts[m] > 0) first_error = ncclSend(at(send, sent, bytes_each), send_counts[m], type, peer, comm_, stream);
    if (first_error == ncclSuccess && recv_counts[m] > 0) first_error = ncclRecv(at(recv, received, bytes_each), recv_counts[m], type, peer, comm_, stream);
    sent += send_counts[m];
    received += recv_counts[m];
  }
  r = ncclGroupEnd();  // always closes the group, even after an error inside it
  enqueued(first_error != ncclSuccess ? first_error : r, "all-to-all", static_cast<double>(sent * bytes_each), stream);
}

void NcclGroup::send_recv(const void* send, std::size_t send_count, int to, void* recv, std::size_t recv_count, int from, ncclDataType_t type, cudaStream_t stream) {
  const bool sending = send != nullptr, receiving = recv != nullptr;
  if ((sending && (to < 0 || to >= size_)) || (receiving && (from < 0 || from >= size_))) {
    throw std::invalid_argument("send/recv in the " + name_ + " group: a peer is not a member");
  }
  const char* op = sending && receiving ? "send-recv" : sending ? "send" : "recv";
  begin(op);
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) {
    enqueued(r, op, 0, stream);
    return;
  }
  ncclResult_t first_error = ncclSuccess;
  if (sending) first_error = ncclSend(send, send_count, type, to, comm_, stream);
  if (first_error == ncclSuccess && receiving) first_error = ncclRecv(recv, recv_count, type, from, comm_, stream);
  r = ncclGroupEnd();
  const std::size_t bytes = ((sending ? send_count : 0) + (receiving ? recv_count : 0)) * element_bytes(type);
  enqueued(first_error != ncclSuccess ? first_error : r, op, static_cast<double>(bytes), stream);
}

void NcclGroup::point_to_point(std::span<const Transfer> transfers, ncclDataType_t type, cudaStream_t stream) {
  for (const auto& t : transfers) {
    if (t.peer < 0 || t.peer >= size_ || (t.count > 0 && (t.send == nullptr) == (t.recv == nullptr))) {
      throw std::invalid_argument("point-to-point in the " + name_ + " group: each transfer is a send or a receive to a member");
    }
  }
  begin("point-to-point");
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) {
    enqueued(r, "point-to-point", 0, stream);
    return;
  }
  ncclResult_t first_error = ncclSuccess;
  std::size_t elements = 0;
  for (const auto& t : transfers) {
    if (first_error != ncclSuccess) break;
    if (t.count == 0) continue;  // both sides skip it: their sizes agree
    first_error = t.send != nullptr ? ncclSend(t.send, t.count, type, t.peer, comm_, stream) : ncclRecv(t.recv, t.count, type, t.peer, comm_, stream);
    elements += t.count;
  }
  r = ncclGroupEnd();
  enqueued(first_error != ncclSuccess ? first_error : r, "point-to-point", static_cast<double>(elements * element_bytes(type)), stream);
}

// exec::Group.

std::int64_t NcclGroup::world_rank(int member) const {
  if (member < 0 || member >= size_) throw std::invalid_argument("the " + name_ + " group has no member " + std::to_string(member));
  return options_.world_ranks.empty() ? member : options_.world_ranks[static_cast<std::size_t>(member)];
}

template <class T, class Op>
void NcclGroup::staged(std::span<const T> in, std::span<T> out, Op&& op) {
  kernels::cuda::DeviceBuffer<T> d_in(in.size()), d_out(out.size());
  if (!in.empty()) MESHWORK_CUDA_CHECK(cudaMemcpyAsync(d_in.data(), in.data(), in.size_bytes(), cudaMemcpyHostToDevice, bound_));
  op(d_in.data(), d_out.data());
  if (!out.empty()) MESHWORK_CUDA_CHECK(cudaMemcpyAsync(out.data(), d_out.data(), out.size_bytes(), cudaMemcpyDeviceToHost, bound_));
  wait();
  MESHWORK_CUDA_CHECK(cudaStreamSynchronize(bound_));  // the copy down has landed
}

void NcclGroup::all_reduce_sum(std::span<float> data) {
  all_reduce(data.data(), data.size(), ncclFloat32, ncclSum, bound_);
  wait();
}
void NcclGroup::all_reduce_max(std::span<float> data) {
  all_reduce(data.data(), data.size(), ncclFloat32, ncclMax, bound_);
  wait();
}
void NcclGroup::broadcast(int root, std::span<float> data) {
  broadcast(data.data(), data.data(), data.size(), root, ncclFloat32, bound_);
  wait();
}
void NcclGroup::all_reduce_sum(std::span<double> data) {
  staged<double>(data, data, [&](double* d_in, double* d_out) {
    all_reduce(d_in, data.size(), ncclFloat64, ncclSum, bound_);
    if (!data.empty()) MESHWORK_CUDA_CHECK(cudaMemcpyAsync(d_out, d_in, data.size_bytes(), cudaMemcpyDeviceToDevice, bound_));
  });
}
void NcclGroup::reduce_scatter_sum(std::span<const float> in, std::span<float> out) {
  if (in.size() != out.size() * static_cast<std::size_t>(size_)) throw std::invalid_argument("reduce-scatter in the " + name_ + " group: the input is not size() blocks of the output");
  reduce_scatter(in.data(), out.data(), out.size(), ncclFloat32, bound_);
  wait();
}
void NcclGroup::all_gather(std::span<const float> in, std::span<float> out) {
  if (out.size() != in.size() * static_cast<std::size_t>(size_)) throw std::invalid_argument("all-gather in the " + name_ + " group: the output is not size() blocks of the input");
  all_gather(in.data(), out.data(), in.size(), ncclFloat32, bound_);
  wait();
}
void NcclGroup::all_gather(std::span<const std::uint64_t> in, std::span<std::uint64_t> out) {
  if (out.size() != in.size() * static_cast<std::size_t>(size_)) throw std::invalid_argument("all-gather in the " + name_ + " group: the output is not size() blocks of the input");
  staged<std::uint64_t>(in, out, [&](std::uint64_t* d_in, std::uint64_t* d_out) { all_gather(d_in, d_out, in.size(), ncclUint64, bound_); });
}
void NcclGroup::all_to_all_v(std::span<const float> send, std::span<const int> send_counts, std::span<float> recv, std::span<const int> recv_counts) {
  std::vector<std::size_t> sc(send_counts.begin(), send_counts.end()), rc(recv_counts.begin(), recv_counts.end());
  all_to_all_v(send.data(), sc, recv.data(), rc, ncclFloat32, bound_);
  wait();
}
void NcclGroup::all_to_all(std::span<const std::int64_t> in, std::span<std::int64_t> out) {
  if (in.size() != out.size() || in.size() % static_cast<std::size_t>(size_) != 0) throw std::invalid_argument("all-to-all in the " + name_ + " group: sizes differ");
  const std::vector<std::size_t> counts(static_cast<std::size_t>(size_), in.size() / static_cast<std::size_t>(size_));
  staged<std::int64_t>(in, out, [&](std::int64_t* d_in, std::int64_t* d_out) { all_to_all_v(d_in, counts, d_out, counts, ncclInt64, bound_); });
}
void NcclGroup::send(int to, int /*tag: NCCL matches by order*/, std::span<const float> data) {
  if (to < 0 || to >= size_) throw std::invalid_argument("send in the " + name_ + " group: " + std::to_string(to) + " is not a member");
  BufferedSend s{kernels::cuda::DeviceBuffer<float>(data.size()), to};
  if (!data.empty()) MESHWORK_CUDA_CHECK(cudaMemcpyAsync(s.data.data(), data.data(), data.size_bytes(), cudaMemcpyDeviceToDevice, bound_));
  sends_.push_back(std::move(s));
}
void NcclGroup::recv(int from, int /*tag*/, std::span<float> data) {
  const auto t0 = Clock::now();
  const Transfer r{nullptr, data.data(), data.size(), from};
  post_sends(&r);
  stats_.recv_seconds += seconds_since(t0);
}
void NcclGroup::flush() {
  if (!sends_.empty()) post_sends(nullptr);
}
void NcclGroup::post_sends(const Transfer* also) {
  std::vector<Transfer> transfers;
  for (auto& s : sends_) transfers.push_back({s.data.data(), nullptr, s.data.size(), s.to});
  if (also != nullptr) transfers.push_back(*also);
  point_to_point(std::span<const Transfer>(transfers), ncclFloat32, bound_);
  wait();
  sends_.clear();  // their copies are no longer read
}

}  // namespace meshwork::exec::cuda
