#include "exec/mpi_group.hpp"

#include <array>
#include <chrono>
#include <cstring>
#include <thread>

#include "kernels/checksum.hpp"

namespace meshwork::exec {

namespace {

using Clock = std::chrono::steady_clock;

int count(std::size_t n) {
  if (n > static_cast<std::size_t>(std::numeric_limits<int>::max())) throw std::length_error("collective of more than 2^31 elements");
  return static_cast<int>(n);
}

// Tags of arrival notices cycle below MPI's guaranteed upper bound (32767, MPI 4.0 §8.1.2).
constexpr std::int64_t kTagCycle = 32000;
// How many chunks of a large collective are in flight at once (run()); measured on 2 ranks,
// bench/RESULTS.md.
constexpr std::size_t kChunksInFlight = 4;

}  // namespace

std::unique_ptr<MpiGroup> MpiGroup::split(std::string name, const std::vector<std::int64_t>& members, int colour, const GroupOptions& options) {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  int key = 0;
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (members[i] == world_rank) key = static_cast<int>(i);
  }
  MPI_Comm comm = MPI_COMM_NULL, notices = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, colour, key, &comm);
  MPI_Comm_dup(comm, &notices);
  return std::unique_ptr<MpiGroup>(new MpiGroup(std::move(name), comm, notices, members, options));
}

MpiGroup::MpiGroup(std::string name, MPI_Comm comm, MPI_Comm notices, std::vector<std::int64_t> members, const GroupOptions& options)
    : name_(std::move(name)), comm_(comm), notices_(notices), members_(std::move(members)), options_(options) {
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(comm_, &rank_);
}

MpiGroup::~MpiGroup() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (failed_) {
    // Sends may still be reading their buffers: leave them (and the communicators) to the
    // job's end rather than free them under MPI.
    new std::list<PendingSend>(std::move(sends_));  // NOLINT: deliberately never freed
    return;
  }
  for (auto& s : sends_) MPI_Request_free(&s.request);
  if (notices_ != MPI_COMM_NULL) MPI_Comm_free(&notices_);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiGroup::fail(const std::string& message) {
  failed_ = true;
  if (options_.on_timeout) options_.on_timeout(message);
  throw CollectiveError(message);
}

namespace {
std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}
}  // namespace

void MpiGroup::wait(std::vector<MPI_Request>& requests, const char* what, const std::vector<MPI_Request>& arrivals, Clock::time_point start) {
  for (std::int64_t polls = 0;; ++polls) {
    int done = 0;
    MPI_Testall(count(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    if (done) return;
    const double waited_s = std::chrono::duration<double>(Clock::now() - start).count();
    if (options_.timeout_s > 0 && waited_s > options_.timeout_s) {
      // Who never arrived: their notices are the receives still open.
      std::string missing;
      for (std::size_t i = 0; i < arrivals.size(); ++i) {
        int arrived = 0;
        MPI_Request r = arrivals[i];
        if (r != MPI_REQUEST_NULL) MPI_Test(&r, &arrived, MPI_STATUS_IGNORE);
        if (r != MPI_REQUEST_NULL && !arrived) missing += (missing.empty() ? "" : ", ") + std::to_string(members_[i]);
      }
      std::string message = "watchdog: " + std::string(what) + " #" + std::to_string(sequence_) + " of the " + name_ + " group did not complete in " +
                            std::to_string(static_cast<int>(options_.timeout_s)) + " s on rank " + std::to_string(members_[static_cast<std::size_t>(rank_)]);
      message += missing.empty() ? ": every member arrived; a transfer stalled" : ": rank " + missing + " never arrived (hung or dead)";
      fail(message);
    }
    // Spin for latency, then yield the core: ranks are often oversubscribed on CPUs.
    if (polls > 20000) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

template <class Launch>
void MpiGroup::run(const char* what, double bytes, std::size_t chunks, Launch launch) {
  const auto t0 = Clock::now();
  ++sequence_;
  std::vector<MPI_Request> arrivals(static_cast<std::size_t>(size_), MPI_REQUEST_NULL), notices;
  // Notices live on the heap: after a timeout they may still be written, and are left be.
  auto inbox = std::make_unique<std::vector<std::int64_t>>(static_cast<std::size_t>(size_) + 1);
  auto& mine = inbox->back();
  mine = sequence_;
  if (options_.timeout_s > 0 && size_ > 1) {
    const int tag = static_cast<int>(sequence_ % kTagCycle);
    for (int m = 0; m < size_; ++m) {
      if (m == rank_) continue;
      MPI_Irecv(&(*inbox)[static_cast<std::size_t>(m)], 1, MPI_INT64_T, m, tag, notices_, &arrivals[static_cast<std::size_t>(m)]);
      notices.emplace_back();
      MPI_Isend(&mine, 1, MPI_INT64_T, m, tag, notices_, &notices.back());
    }
  }
  // Chunks go in waves of kChunksInFlight: a few keep the shared-memory transport busy, but
  // dozens outstanding at once slow Open MPI's non-blocking collectives down by orders of
  // magnitude (a 16 MiB reduce-scatter as 64 chunks at once: 124 ms, bench/RESULTS.md).
  try {
    for (std::size_t first = 0; first < chunks; first += kChunksInFlight) {
      std::vector<MPI_Request> requests;
      for (std::size_t c = first; c < std::min(chunks, first + kChunksInFlight); ++c) requests.push_back(launch(c));
      wait(requests, what, arrivals, t0);  // one deadline for the whole call, whatever its waves
    }
  } catch (...) {
    (void)inbox.release();  // NOLINT: still targeted by receives in flight
    throw;
  }
  MPI_Waitall(count(arrivals.size()), arrivals.data(), MPI_STATUSES_IGNORE);
  MPI_Waitall(count(notices.size()), notices.data(), MPI_STATUSES_IGNORE);
  stats_.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  stats_.bytes += bytes;
  ++stats_.calls;
}

void MpiGroup::check_identical(std::span<const float> result, const char* what) {
  if (!options_.self_check || size_ <= 1) return;
  const std::uint64_t mine = kernels::checksum_fnv1a64<float>(result);
  std::vector<std::uint64_t> all(static_cast<std::size_t>(size_));
  run("self-check", 0, 1, [&](std::size_t) {
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Iallgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm_, &r);
    return r;
  });
  for (const auto c : all) {
    if (c != all.front()) {
      ++stats_.wrong;
      throw CollectiveError(std::string(what) + " of the " + name_ + " group gave different results on its members (self-check, #wrong " +
                            std::to_string(stats_.wrong) + ")");
    }
  }
}

// Large buffers go as several non-blocking collectives of at most kChunkFloats each, a few in
// flight together (kChunksInFlight): Open MPI's non-blocking collectives over shared memory slow down tenfold
// past a few hundred KiB (a protocol change: 137 us for 256 KiB, 2 ms for 1 MiB here; see
// bench/RESULTS.md), and chunks keep every call below it, as NCCL splits a buffer in chunks.
constexpr std::size_t kChunkFloats = std::size_t{32} << 10;
// At least one chunk: an empty buffer is one empty collective, which every member must call.
constexpr std::size_t chunks_of(std::size_t floats) { return std::max<std::size_t>(1, (floats + kChunkFloats - 1) / kChunkFloats); }

void MpiGroup::all_reduce_sum(std::span<float> data) {
  run("all-reduce", static_cast<double>(data.size_bytes()), chunks_of(data.size()), [&](std::size_t j) {
    const std::size_t at = j * kChunkFloats;
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Iallreduce(MPI_IN_PLACE, data.data() + at, count(std::min(kChunkFloats, data.size() - at)), MPI_FLOAT, MPI_SUM, comm_, &r);
    return r;
  });
  check_identical(data, "all-reduce");
}

void MpiGroup::all_reduce_sum(std::span<double> data) {
  run("all-reduce", static_cast<double>(data.size_bytes()), 1, [&](std::size_t) {
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Iallreduce(MPI_IN_PLACE, data.data(), count(data.size()), MPI_DOUBLE, MPI_SUM, comm_, &r);
    return r;
  });
}

void MpiGroup::all_reduce_max(std::span<float> data) {
  run("all-reduce", static_cast<double>(data.size_bytes()), 1, [&](std::size_t) {
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Iallreduce(MPI_IN_PLACE, data.data(), count(data.size()), MPI_FLOAT, MPI_MAX, comm_, &r);
    return r;
  });
}

void MpiGroup::broadcast(int root, std::span<float> data) {
  if (root < 0 || root >= size_) throw std::invalid_argument("broadcast in " + name() + ": root " + std::to_string(root) + " is not a member");
  run("broadcast", static_cast<double>(data.size_bytes()), chunks_of(data.size()), [&](std::size_t j) {
    const std::size_t at = j * kChunkFloats;
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Ibcast(data.data() + at, count(std::min(kChunkFloats, data.size() - at)), MPI_FLOAT, root, comm_, &r);
    return r;
  });
  check_identical(data, "broadcast");
}

void MpiGroup::reduce_scatter_sum(std::span<const float> in, std::span<float> out) {
  if (in.size() != out.size() * static_cast<std::size_t>(size_)) throw std::invalid_argument("reduce-scatter: the input is not size() blocks of the output");
  const std::size_t block = out.size(), members = static_cast<std::size_t>(size_);
  // Chunk j of every member's block, packed contiguously for MPI (kept until the end, and
  // never freed if the call times out: MPI may still read it).
  auto packed = std::make_unique<std::vector<std::vector<float>>>();
  try {
    packed->reserve(chunks_of(block));
    run("reduce-scatter", static_cast<double>(in.size_bytes()), chunks_of(block), [&](std::size_t j) {
      const std::size_t at = j * kChunkFloats, c = std::min(kChunkFloats, block - at);
      auto& buf = packed->emplace_back(members * c);
      for (std::size_t b = 0; b < members; ++b) std::copy_n(in.begin() + static_cast<std::ptrdiff_t>(b * block + at), c, buf.begin() + static_cast<std::ptrdiff_t>(b * c));
      MPI_Request r = MPI_REQUEST_NULL;
      MPI_Ireduce_scatter_block(buf.data(), out.data() + at, count(c), MPI_FLOAT, MPI_SUM, comm_, &r);
      return r;
    });
  } catch (...) {
    (void)packed.release();  // NOLINT: MPI may still use them after a timeout
    throw;
  }
}

void MpiGroup::all_gather(std::span<const float> in, std::span<float> out) {
  if (out.size() != in.size() * static_cast<std::size_t>(size_)) throw std::invalid_argument("all-gather: the output is not size() blocks of the input");
  const std::size_t block = in.size(), members = static_cast<std::size_t>(size_);
  auto packed = std::make_unique<std::vector<std::vector<float>>>();
  try {
    packed->reserve(chunks_of(block));
    run("all-gather", static_cast<double>(out.size_bytes()), chunks_of(block), [&](std::size_t j) {
      const std::size_t at = j * kChunkFloats, c = std::min(kChunkFloats, block - at);
      auto& buf = packed->emplace_back(members * c);
      MPI_Request r = MPI_REQUEST_NULL;
      MPI_Iallgather(in.data() + at, count(c), MPI_FLOAT, buf.data(), count(c), MPI_FLOAT, comm_, &r);
      return r;
    });
  } catch (...) {
    (void)packed.release();  // NOLINT: MPI may still use them after a timeout
    throw;
  }
  std::size_t j = 0;
  for (std::size_t at = 0; at < block; at += kChunkFloats, ++j) {
    const std::size_t c = std::min(kChunkFloats, block - at);
    for (std::size_t b = 0; b < members; ++b) std::copy_n((*packed)[j].begin() + static_cast<std::ptrdiff_t>(b * c), c, out.begin() + static_cast<std::ptrdiff_t>(b * block + at));
  }
  check_identical(out, "all-gather");
}

void MpiGroup::all_gather(std::span<const std::uint64_t> in, std::span<std::uint64_t> out) {
  if (out.size() != in.size() * static_cast<std::size_t>(size_)) throw std::invalid_argument("all-gather: the output is not size() blocks of the input");
  run("all-gather", static_cast<double>(out.size_bytes()), 1, [&](std::size_t) {
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Iallgather(in.data(), count(in.size()), MPI_UINT64_T, out.data(), count(in.size()), MPI_UINT64_T, comm_, &r);
    return r;
  });
}

void MpiGroup::all_to_all_v(std::span<const float> send, std::span<const int> send_counts, std::span<float> recv, std::span<const int> recv_counts) {
  const auto members = static_cast<std::size_t>(size_);
  if (send_counts.size() != members || recv_counts.size() != members) throw std::invalid_argument("all-to-all: counts are not one per member");
  // Counts and contiguous displacements live on the heap: after a timeout MPI may still read
  // them, and they are left be.
  auto layout = std::make_unique<std::array<std::vector<int>, 4>>();
  std::vector<int>&scounts = (*layout)[0], &sdispls = (*layout)[1], &rcounts = (*layout)[2], &rdispls = (*layout)[3];
  scounts.assign(send_counts.begin(), send_counts.end());
  rcounts.assign(recv_counts.begin(), recv_counts.end());
  std::size_t sent = 0, received = 0;
  for (std::size_t i = 0; i < members; ++i) {
    if (scounts[i] < 0 || rcounts[i] < 0) throw std::invalid_argument("all-to-all: a negative count");
    sdispls.push_back(count(sent));
    rdispls.push_back(count(received));
    sent += static_cast<std::size_t>(scounts[i]);
    received += static_cast<std::size_t>(rcounts[i]);
  }
  if (sent != send.size() || received != recv.size()) throw std::invalid_argument("all-to-all: the counts do not add up to the buffers' sizes");
  try {
    run("all-to-all", static_cast<double>(send.size_bytes()), 1, [&](std::size_t) {
      MPI_Request r = MPI_REQUEST_NULL;
      MPI_Ialltoallv(send.data(), scounts.data(), sdispls.data(), MPI_FLOAT, recv.data(), rcounts.data(), rdispls.data(), MPI_FLOAT, comm_, &r);
      return r;
    });
  } catch (...) {
    (void)layout.release();  // NOLINT: MPI may still use them after a timeout
    throw;
  }
}

void MpiGroup::all_to_all(std::span<const std::int64_t> in, std::span<std::int64_t> out) {
  if (in.size() != out.size() || in.size() % static_cast<std::size_t>(size_) != 0) throw std::invalid_argument("all-to-all: the buffers are not size() equal blocks");
  const std::size_t block = in.size() / static_cast<std::size_t>(size_);
  run("all-to-all", static_cast<double>(in.size_bytes()), 1, [&](std::size_t) {
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Ialltoall(in.data(), count(block), MPI_INT64_T, out.data(), count(block), MPI_INT64_T, comm_, &r);
    return r;
  });
}

void MpiGroup::send(int to, int tag, std::span<const float> data) {
  const auto t0 = Clock::now();
  // Completed sends are retired as new ones come, so the list stays short.
  sends_.remove_if([](PendingSend& s) {
    int done = 0;
    MPI_Test(&s.request, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
  auto& s = sends_.emplace_back();
  s.data.assign(data.begin(), data.end());
  MPI_Isend(s.data.data(), count(s.data.size()), MPI_FLOAT, to, tag, comm_, &s.request);
  stats_.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  stats_.bytes += static_cast<double>(data.size_bytes());
  ++stats_.calls;
}

void MpiGroup::recv(int from, int tag, std::span<float> data) {
  const auto t0 = Clock::now();
  MPI_Request r;
  MPI_Irecv(data.data(), count(data.size()), MPI_FLOAT, from, tag, comm_, &r);
  const auto start = Clock::now();
  for (std::int64_t polls = 0;; ++polls) {
    int done = 0;
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    if (done) break;
    if (options_.timeout_s > 0 && std::chrono::duration<double>(Clock::now() - start).count() > options_.timeout_s) {
      fail("watchdog: rank " + std::to_string(members_[static_cast<std::size_t>(from)]) + " did not send pipeline message " + std::to_string(tag) +
           " to rank " + std::to_string(members_[static_cast<std::size_t>(rank_)]) + " in " + seconds_text(options_.timeout_s) + " s (hung or dead)");
    }
    if (polls > 20000) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  stats_.seconds += waited;
  stats_.recv_seconds += waited;
}

void MpiGroup::flush() {
  const auto start = Clock::now();
  for (std::int64_t polls = 0; !sends_.empty(); ++polls) {
    sends_.remove_if([](PendingSend& s) {
      int done = 0;
      MPI_Test(&s.request, &done, MPI_STATUS_IGNORE);
      return done != 0;
    });
    if (sends_.empty()) break;
    if (options_.timeout_s > 0 && std::chrono::duration<double>(Clock::now() - start).count() > options_.timeout_s) {
      fail("watchdog: " + std::to_string(sends_.size()) + " pipeline message(s) from rank " + std::to_string(members_[static_cast<std::size_t>(rank_)]) +
           " were not received in " + seconds_text(options_.timeout_s) + " s: a neighbour in the " + name_ + " group hung or died");
    }
    if (polls > 2000) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace meshwork::exec
