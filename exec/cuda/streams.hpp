#pragma once
// The CUDA streams a rank's Program runs on, the events that order them, and per-op timing.
// Compute and the three communication streams (tensor-, data- and pipeline-parallel) are
// non-blocking streams, so that nothing on them waits for the legacy default stream; a
// dependency between two of them is an event recorded on one and waited for on the other
// (`wait`), the way the Program's edges cross streams. EventTimer brackets named ops with
// events and sums their elapsed milliseconds per name once the work is done, for the Report's
// per-op timings, without synchronising between ops.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <exception>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace meshwork::exec::cuda {

// One non-blocking stream (cudaStreamNonBlocking) on the current device. Move-only.
class Stream {
 public:
  // priority: lower numbers run first (cudaDeviceGetStreamPriorityRange); 0 is the default.
  explicit Stream(int priority = 0);
  ~Stream();
  Stream(Stream&& o) noexcept;
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  [[nodiscard]] cudaStream_t get() const { return stream_; }
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

// The Program's streams, one per kind of work, all on the device current at construction.
struct Streams {
  Stream compute, tp, dp, pp;
  void synchronize() const;
};

// One CUDA event. `timing` events can measure elapsed time; the others
// (cudaEventDisableTiming) are cheaper and only order streams. Move-only.
class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  [[nodiscard]] cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream);
  // Whether the work before the last record() has completed (cudaEventQuery); a failed earlier
  // kernel throws here.
  [[nodiscard]] bool done() const;
  void synchronize() const;

 private:
  cudaEvent_t event_ = nullptr;
};

// `stream` waits, on the device, for the work `event` was recorded after.
void wait(cudaStream_t stream, const Event& event);

// Milliseconds between two completed timing events (cudaEventElapsedTime; resolution about
// 0.5 us, CUDA Runtime API reference).
[[nodiscard]] double elapsed_ms(const Event& start, const Event& stop);

// Per-op timings: start(name, stream) and stop(stream) bracket an op (or use Scope); collect()
// waits for the last recorded event, adds each op's elapsed time to its name's total and
// makes the events reusable. Ops may nest on one stream (each stop closes the latest open op
// of that stream) and run on several streams at once; time on concurrent streams is summed,
// not merged. Not thread-safe: one timer per host thread. A disabled timer records nothing.
class EventTimer {
 public:
  explicit EventTimer(bool enabled = true) : enabled_(enabled) {}

  void start(std::string_view op, cudaStream_t stream);
  void stop(cudaStream_t stream);

  class Scope {
   public:
    Scope(EventTimer& timer, std::string_view op, cudaStream_t stream) : timer_(&timer), stream_(stream), unwinding_(std::uncaught_exceptions()) {
      timer_->start(op, stream_);
    }
    // Closes the op, unless an exception is unwinding the stack (then the op stays open and
    // collect() reports it; the timer is reset() before reuse).
    ~Scope() noexcept(false) {
      if (std::uncaught_exceptions() == unwinding_) timer_->stop(stream_);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    EventTimer* timer_;
    cudaStream_t stream_;
    int unwinding_;
  };
  [[nodiscard]] Scope scope(std::string_view op, cudaStream_t stream) { return Scope(*this, op, stream); }

  // Adds the ops recorded since the last collect() to the totals and returns them, in ms by
  // op name. Throws if an op is still open.
  const std::map<std::string, double, std::less<>>& collect();
  [[nodiscard]] const std::map<std::string, double, std::less<>>& totals_ms() const { return totals_ms_; }
  [[nodiscard]] const std::map<std::string, long long, std::less<>>& counts() const { return counts_; }
  void reset();
  [[nodiscard]] bool enabled() const { return enabled_; }

 private:
  struct Op {
    std::string name;
    cudaStream_t stream;
    std::size_t start, stop;  // indices into events_
    bool open;
  };
  std::size_t take_event();

  bool enabled_;
  std::vector<Event> events_;  // a pool: the first used_ are in use until collect()
  std::size_t used_ = 0;
  std::vector<Op> ops_;
  std::map<std::string, double, std::less<>> totals_ms_;
  std::map<std::string, long long, std::less<>> counts_;
};

}  // namespace meshwork::exec::cuda
