#include "exec/cuda/streams.hpp"

#include <utility>

#include "kernels/cuda/cuda_check.hpp"

namespace meshwork::exec::cuda {

Stream::Stream(int priority) { MESHWORK_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, priority)); }

Stream::~Stream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);  // not checked: destructors do not throw
}

Stream::Stream(Stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    stream_ = std::exchange(o.stream_, nullptr);
  }
  return *this;
}

void Stream::synchronize() const { MESHWORK_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

void Streams::synchronize() const {
  compute.synchronize();
  tp.synchronize();
  dp.synchronize();
  pp.synchronize();
}

Event::Event(bool timing) { MESHWORK_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming)); }

Event::~Event() {
  if (event_ != nullptr) cudaEventDestroy(event_);  // not checked: destructors do not throw
}

Event::Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (event_ != nullptr) cudaEventDestroy(event_);
    event_ = std::exchange(o.event_, nullptr);
  }
  return *this;
}

void Event::record(cudaStream_t stream) { MESHWORK_CUDA_CHECK(cudaEventRecord(event_, stream)); }

bool Event::done() const {
  const cudaError_t e = cudaEventQuery(event_);
  if (e == cudaErrorNotReady) return false;
  MESHWORK_CUDA_CHECK(e);
  return true;
}

void Event::synchronize() const { MESHWORK_CUDA_CHECK(cudaEventSynchronize(event_)); }

void wait(cudaStream_t stream, const Event& event) { MESHWORK_CUDA_CHECK(cudaStreamWaitEvent(stream, event.get(), 0)); }

double elapsed_ms(const Event& start, const Event& stop) {
  float ms = 0;
  MESHWORK_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ms;
}

std::size_t EventTimer::take_event() {
  if (used_ == events_.size()) events_.emplace_back(true);
  return used_++;
}

void EventTimer::start(std::string_view op, cudaStream_t stream) {
  if (!enabled_) return;
  const std::size_t e = take_event();
  events_[e].record(stream);
  ops_.push_back({std::string(op), stream, e, 0, true});
}

void EventTimer::stop(cudaStream_t stream) {
  if (!enabled_) return;
  for (auto it = ops_.rbegin(); it != ops_.rend(); ++it) {
    if (it->open && it->stream == stream) {
      const std::size_t e = take_event();
      events_[e].record(stream);
      it->stop = e;
      it->open = false;
      return;
    }
  }
  kernels::cuda::fail(__FILE__, __LINE__, "EventTimer::stop", "no op is open on this stream");
}

const std::map<std::string, double, std::less<>>& EventTimer::collect() {
  for (const auto& op : ops_) {
    if (op.open) kernels::cuda::fail(__FILE__, __LINE__, "EventTimer::collect", "op '" + op.name + "' was started and never stopped");
  }
  for (const auto& op : ops_) {
    events_[op.stop].synchronize();
    totals_ms_[op.name] += elapsed_ms(events_[op.start], events_[op.stop]);
    ++counts_[op.name];
  }
  ops_.clear();
  used_ = 0;
  return totals_ms_;
}

void EventTimer::reset() {
  ops_.clear();
  used_ = 0;
  totals_ms_.clear();
  counts_.clear();
}

}  // namespace meshwork::exec::cuda
