#pragma once
// An owning, typed device allocation (cudaMalloc / cudaFree) with checked copies to and from
// the host. Move-only; size in elements, size_bytes() in bytes.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_check.hpp"

namespace meshwork::kernels::cuda {

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) : count_(count) {
    if (count_ > 0) MESHWORK_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), size_bytes()));
  }
  // A copy of `host` on the device.
  explicit DeviceBuffer(std::span<const T> host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);  // not checked: destructors do not throw
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (data_ != nullptr) cudaFree(data_);
      data_ = std::exchange(o.data_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  [[nodiscard]] T* data() { return data_; }
  [[nodiscard]] const T* data() const { return data_; }
  [[nodiscard]] std::size_t size() const { return count_; }
  [[nodiscard]] std::size_t size_bytes() const { return count_ * sizeof(T); }

  // Synchronous copies, complete when they return; `host` must hold size() elements.
  void upload(std::span<const T> host) {
    if (host.size() != count_) fail(__FILE__, __LINE__, "DeviceBuffer::upload", "host span has the wrong length");
    if (count_ > 0) {
      MESHWORK_CUDA_CHECK(cudaMemcpy(data_, host.data(), size_bytes(), cudaMemcpyHostToDevice));
      // From pageable memory cudaMemcpy may return before the copy lands (CUDA Runtime API,
      // "API synchronization behavior"), and non-blocking streams do not wait for the legacy
      // one: wait here, so work on any stream sees the data.
      MESHWORK_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
    }
  }
  [[nodiscard]] std::vector<T> download() const {
    std::vector<T> host(count_);
    if (count_ > 0) MESHWORK_CUDA_CHECK(cudaMemcpy(host.data(), data_, size_bytes(), cudaMemcpyDeviceToHost));
    return host;
  }
  void zero() {
    if (count_ > 0) {
      MESHWORK_CUDA_CHECK(cudaMemset(data_, 0, size_bytes()));
      MESHWORK_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));  // as upload()
    }
  }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace meshwork::kernels::cuda
