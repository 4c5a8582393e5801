#include "exec/thread_group.hpp"

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <stdexcept>
#include <tuple>
#include <vector>

namespace meshwork::exec {

using Clock = std::chrono::steady_clock;

// The first failure of any rank of the world, which every group's waits check.
struct ThreadWorld::Failure {
  std::mutex m;
  std::atomic<bool> failed{false};
  std::string why;  // "rank R failed: ...", set once, before `failed`
  [[nodiscard]] std::string message() {
    std::lock_guard lock(m);
    return why;
  }
};

struct ThreadWorld::State {
  std::string name;
  int size = 1;
  double timeout_s = 120;
  bool hold_sends = false;
  std::mutex m;
  std::condition_variable cv;
  int arrived = 0;
  std::uint64_t generation = 0;
  // What each member posted for the collective in progress.
  std::vector<const void*> in;
  std::vector<std::size_t> in_size;
  std::vector<const int*> counts;
  std::map<std::tuple<int, int, int>, std::deque<std::vector<float>>> mailbox;  // (from, to, tag)
  std::shared_ptr<ThreadWorld::Failure> failure;

  [[nodiscard]] bool failed() const { return failure->failed.load(); }
  [[noreturn]] void throw_failed() const { throw CollectiveError("thread group " + name + ": " + failure->message()); }

  // Every member arrives before any leaves. With `stop_on_failure`, a failure anywhere in the
  // world ends the wait (the entry to a collective: a member that never comes); without it
  // only the timeout does (the exit, which keeps every member's input alive until all have
  // read it: past the entry every member comes, since the work between never waits).
  void barrier(std::unique_lock<std::mutex>& lock, bool stop_on_failure) {
    if (stop_on_failure && failed()) throw_failed();
    const std::uint64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    if (!cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return generation != gen || (stop_on_failure && failed()); })) {
      throw CollectiveError("thread group " + name + ": a member waited " + std::to_string(timeout_s) + " s for the others (one failed or hung)");
    }
    if (generation == gen) throw_failed();
  }
};

ThreadWorld::ThreadWorld(double timeout_s, bool hold_sends)
    : timeout_s_(timeout_s), hold_sends_(hold_sends), failure_(std::make_shared<Failure>()) {}

void ThreadWorld::fail(std::int64_t rank, const std::string& why) {
  {
    std::lock_guard lock(failure_->m);
    if (failure_->failed.load()) return;  // the first failure is the cause; the rest follow from it
    failure_->why = "rank " + std::to_string(rank) + " failed: " + why;
    failure_->failed.store(true);
  }
  std::lock_guard lock(m_);
  for (auto& [key, s] : states_) {
    std::lock_guard group_lock(s->m);  // a waiter checks the flag under this lock: none misses the notice
    s->cv.notify_all();
  }
}

namespace {

class ThreadGroup final : public Group {
 public:
  ThreadGroup(std::shared_ptr<ThreadWorld::State> s, int rank, std::vector<std::int64_t> members)
      : s_(std::move(s)), rank_(rank), members_(std::move(members)) {}
  [[nodiscard]] int size() const override { return s_->size; }
  [[nodiscard]] int rank() const override { return rank_; }
  [[nodiscard]] std::int64_t world_rank(int member) const override { return members_.at(static_cast<std::size_t>(member)); }
  [[nodiscard]] const std::string& name() const override { return s_->name; }

  void all_reduce_sum(std::span<float> d) override { reduce(d, [](float a, float b) { return a + b; }); }
  void all_reduce_sum(std::span<double> d) override { reduce(d, [](double a, double b) { return a + b; }); }
  void all_reduce_max(std::span<float> d) override {
    reduce(d, [](float a, float b) { return std::isnan(a) || std::isnan(b) ? NAN : (a > b ? a : b); });
  }
  void broadcast(int root, std::span<float> d) override {
    if (root < 0 || root >= size()) throw std::invalid_argument("broadcast in " + name() + ": root " + std::to_string(root) + " is not a member");
    std::vector<float> result(d.size());
    collective(d.data(), d.size(), nullptr, [&] {
      if (s_->in_size[static_cast<std::size_t>(root)] != d.size()) throw std::invalid_argument("broadcast in " + name() + ": sizes differ");
      std::memcpy(result.data(), at<float>(root), d.size_bytes());
    }, d.size_bytes());
    std::copy(result.begin(), result.end(), d.begin());  // after every member has read the root's
  }
  void reduce_scatter_sum(std::span<const float> in, std::span<float> out) override {
    if (in.size() != out.size() * static_cast<std::size_t>(size())) throw std::invalid_argument("reduce-scatter in " + name() + ": sizes differ");
    collective(in.data(), in.size(), nullptr, [&] {
      for (std::size_t i = 0; i < out.size(); ++i) {
        float sum = 0;
        for (int j = 0; j < size(); ++j) sum += at<float>(j)[static_cast<std::size_t>(rank_) * out.size() + i];
        out[i] = sum;
      }
    }, out.size_bytes() * static_cast<std::size_t>(size()));
  }
  void all_gather(std::span<const float> in, std::span<float> out) override { gather(in, out); }
  void all_gather(std::span<const std::uint64_t> in, std::span<std::uint64_t> out) override { gather(in, out); }
  void all_to_all_v(std::span<const float> send, std::span<const int> send_counts, std::span<float> recv, std::span<const int> recv_counts) override {
    collective(send.data(), send.size(), send_counts.data(), [&] {
      std::size_t to = 0;
      for (int j = 0; j < size(); ++j) {
        const int* theirs = s_->counts[static_cast<std::size_t>(j)];
        std::size_t from = 0;
        for (int k = 0; k < rank_; ++k) from += static_cast<std::size_t>(theirs[k]);
        const auto n = static_cast<std::size_t>(theirs[rank_]);
        if (n != static_cast<std::size_t>(recv_counts[static_cast<std::size_t>(j)])) throw std::invalid_argument("all_to_all_v in " + name() + ": counts disagree");
        std::memcpy(recv.data() + to, at<float>(j) + from, n * sizeof(float));
        to += n;
      }
    }, send.size_bytes());
  }
  void all_to_all(std::span<const std::int64_t> in, std::span<std::int64_t> out) override {
    const std::size_t block = in.size() / static_cast<std::size_t>(size());
    collective(in.data(), in.size(), nullptr, [&] {
      for (int j = 0; j < size(); ++j) std::memcpy(out.data() + static_cast<std::size_t>(j) * block, at<std::int64_t>(j) + static_cast<std::size_t>(rank_) * block, block * sizeof(std::int64_t));
    }, in.size_bytes());
  }
  void send(int to, int tag, std::span<const float> data) override {
    stats_.bytes += static_cast<double>(data.size_bytes());
    ++stats_.calls;
    if (s_->hold_sends) {
      held_.push_back({to, tag, std::vector<float>(data.begin(), data.end())});
      return;
    }
    std::lock_guard lock(s_->m);
    s_->mailbox[{rank_, to, tag}].emplace_back(data.begin(), data.end());
    s_->cv.notify_all();
  }
  void recv(int from, int tag, std::span<float> data) override {
    const auto t0 = Clock::now();
    flush();  // held sends go out with the receive, as NCCL's group call posts them
    std::unique_lock lock(s_->m);
    auto& box = s_->mailbox[{from, rank_, tag}];
    if (!s_->cv.wait_for(lock, std::chrono::duration<double>(s_->timeout_s), [&] { return !box.empty() || s_->failed(); })) {
      throw CollectiveError("thread group " + name() + ": member " + std::to_string(rank_) + " waited " + std::to_string(s_->timeout_s) + " s for a message from " +
                            std::to_string(from) + " (tag " + std::to_string(tag) + ")");
    }
    if (box.empty()) s_->throw_failed();
    std::vector<float> m = std::move(box.front());
    box.pop_front();
    if (m.size() != data.size()) throw CollectiveError("thread group " + name() + ": a message of " + std::to_string(m.size()) + " floats for a receive of " + std::to_string(data.size()));
    std::copy(m.begin(), m.end(), data.begin());
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    stats_.seconds += dt;
    stats_.recv_seconds += dt;
    stats_.bytes += static_cast<double>(data.size_bytes());
    ++stats_.calls;
  }
  void flush() override {
    if (held_.empty()) return;
    std::lock_guard lock(s_->m);
    for (auto& h : held_) s_->mailbox[{rank_, h.to, h.tag}].push_back(std::move(h.data));
    held_.clear();
    s_->cv.notify_all();
  }

 private:
  struct Held {
    int to, tag;
    std::vector<float> data;
  };
  std::vector<Held> held_;  // with hold_sends: sends not yet posted
  template <class T>
  const T* at(int member) const {
    return static_cast<const T*>(s_->in[static_cast<std::size_t>(member)]);
  }
  // Posts this member's input, runs `mine` once every member has posted, and returns once every
  // member has run its own.
  template <class F>
  void collective(const void* in, std::size_t size, const int* counts, F&& mine, std::size_t bytes) {
    const auto t0 = Clock::now();
    std::unique_lock lock(s_->m);
    s_->in[static_cast<std::size_t>(rank_)] = in;
    s_->in_size[static_cast<std::size_t>(rank_)] = size;
    s_->counts[static_cast<std::size_t>(rank_)] = counts;
    s_->barrier(lock, true);
    lock.unlock();
    // A member whose own part fails still reaches the exit, so that the others' reads of its
    // input end before it unwinds; then it throws.
    std::exception_ptr error;
    try {
      mine();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    s_->barrier(lock, false);
    if (error) std::rethrow_exception(error);
    stats_.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    stats_.bytes += static_cast<double>(bytes);
    ++stats_.calls;
  }
  template <class T, class Op>
  void reduce(std::span<T> d, Op op) {
    std::vector<T> result(d.size());
    collective(d.data(), d.size(), nullptr, [&] {
      for (int j = 0; j < size(); ++j) {
        if (s_->in_size[static_cast<std::size_t>(j)] != d.size()) throw std::invalid_argument("all-reduce in " + name() + ": sizes differ");
      }
      for (std::size_t i = 0; i < d.size(); ++i) {
        T v = at<T>(0)[i];
        for (int j = 1; j < size(); ++j) v = op(v, at<T>(j)[i]);
        result[i] = v;
      }
    }, d.size_bytes());
    std::copy(result.begin(), result.end(), d.begin());  // after every member has read ours
  }
  template <class T>
  void gather(std::span<const T> in, std::span<T> out) {
    if (out.size() != in.size() * static_cast<std::size_t>(size())) throw std::invalid_argument("all-gather in " + name() + ": sizes differ");
    collective(in.data(), in.size(), nullptr, [&] {
      for (int j = 0; j < size(); ++j) std::memcpy(out.data() + static_cast<std::size_t>(j) * in.size(), at<T>(j), in.size_bytes());
    }, out.size_bytes());
  }

  std::shared_ptr<ThreadWorld::State> s_;
  int rank_;
  std::vector<std::int64_t> members_;
};

}  // namespace

std::shared_ptr<ThreadWorld::State> ThreadWorld::state(const std::string& name, int colour, int size) {
  std::lock_guard lock(m_);
  auto& s = states_[{name, colour}];
  if (!s) {
    s = std::make_shared<State>();
    s->name = name;
    s->size = size;
    s->timeout_s = timeout_s_;
    s->hold_sends = hold_sends_;
    s->failure = failure_;
    s->in.resize(static_cast<std::size_t>(size));
    s->in_size.resize(static_cast<std::size_t>(size));
    s->counts.resize(static_cast<std::size_t>(size));
  }
  return s;
}

GroupMaker ThreadWorld::maker(std::int64_t rank) {
  return [this, rank](const char* name, const std::vector<std::int64_t>& members, int colour) -> std::unique_ptr<Group> {
    int mine = -1;
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (members[i] == rank) mine = static_cast<int>(i);
    }
    if (mine < 0) throw std::logic_error(std::string("rank ") + std::to_string(rank) + " is not a member of its own " + name + " group");
    return std::make_unique<ThreadGroup>(state(name, colour, static_cast<int>(members.size())), mine, members);
  };
}

}  // namespace meshwork::exec
