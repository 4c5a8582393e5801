#pragma once
// Scratch memory ordered on a stream (cudaMallocAsync / cudaFreeAsync): a launcher's
// workspace (per-block partial sums, sort buffers) is allocated and released in stream order,
// so the caller passes no workspace and nothing synchronises the host.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "kernels/cuda/cuda_check.hpp"

namespace meshwork::kernels::cuda {

template <class T>
class StreamBuffer {
 public:
  StreamBuffer(std::size_t count, cudaStream_t stream) : count_(count), stream_(stream) {
    if (count_ > 0)
      MESHWORK_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&data_), count_ * sizeof(T), stream_));
  }
  ~StreamBuffer() {
    if (data_ != nullptr) cudaFreeAsync(data_, stream_);  // not checked: destructors do not throw
  }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  StreamBuffer(StreamBuffer&&) = delete;
  StreamBuffer& operator=(StreamBuffer&&) = delete;

  [[nodiscard]] T* data() { return data_; }
  [[nodiscard]] std::size_t size() const { return count_; }
  [[nodiscard]] std::size_t size_bytes() const { return count_ * sizeof(T); }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
  cudaStream_t stream_ = nullptr;
};

}  // namespace meshwork::kernels::cuda
