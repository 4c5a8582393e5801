#pragma once
// The executor's backend interface (issue 23): what the one Trainer (exec/trainer.hpp) needs
// from a backend, so that the CPU and CUDA backends differ only below it.
//
// - Memory: flat float buffers in the backend's memory (the host's for the CPU backend, the
//   device's for CUDA), copies between them and the host, and the optimizer's kernels on
//   them (the gradients' scaling, AdamW, the replicas' checksum).
// - Compute: the model's chunks (exec/chunk.hpp), which run the Program's compute
//   instructions and its TP, EP and CP collectives on their own tensors.
// - Communication: exec::Group. Its float spans are tensors in the backend's memory; its
//   integer and double spans (counts, checksums, losses) are the host's. MpiGroup serves the
//   CPU backend; the CUDA backend takes NCCL's, or MPI's staged through the host to check
//   meshes on one GPU (exec/staged_group.hpp).
//
// A backend's calls are ordered as the Trainer makes them: a device backend may queue them
// (on one stream) as long as every copy to the host has completed when it returns.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <utility>

#include "exec/chunk.hpp"
#include "kernels/adamw.hpp"

namespace meshwork::exec {

// The replicas' checksum's chunk: 64 K values keep the GPU's sequential combine short
// (kernels/cuda/checksum.hpp).
inline constexpr std::size_t kChecksumChunkElems = std::size_t{1} << 16;

// An owned flat float buffer in a backend's memory.
class Buffer {
 public:
  using Free = std::function<void(float*)>;  // must not throw
  Buffer() = default;
  Buffer(float* data, std::size_t size, Free free) : data_(data), size_(size), free_(std::move(free)) {}
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), free_(std::move(o.free_)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      free_ = std::move(o.free_);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  [[nodiscard]] std::span<float> span() { return {data_, size_}; }
  [[nodiscard]] std::span<const float> span() const { return {data_, size_}; }
  [[nodiscard]] std::size_t size() const { return size_; }

 private:
  void reset() {
    if (data_ != nullptr && free_ != nullptr) free_(data_);
    data_ = nullptr;
    size_ = 0;
  }
  float* data_ = nullptr;
  std::size_t size_ = 0;
  Free free_ = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // "cpu", "cuda".
  [[nodiscard]] virtual std::string_view name() const = 0;
  // Throws std::invalid_argument when the backend cannot run the chunk (the field and why).
  [[nodiscard]] virtual std::unique_ptr<Chunk> make_chunk(const ChunkConfig& config) = 0;

  // `count` zeros.
  [[nodiscard]] virtual Buffer allocate(std::size_t count) = 0;
  // Between the backend's memory and the host's; the sizes must be equal.
  virtual void to_host(std::span<const float> from, std::span<float> to) = 0;
  virtual void from_host(std::span<const float> from, std::span<float> to) = 0;
  // Inside the backend's memory (the spans may be views into larger buffers).
  virtual void copy(std::span<const float> from, std::span<float> to) = 0;
  virtual void fill(std::span<float> x, float value) = 0;
  virtual void scale(std::span<float> x, float factor) = 0;
  // kernels::adamw_step over spans in the backend's memory.
  virtual void adamw(std::span<float> params, std::span<const float> grads, std::span<float> exp_avg, std::span<float> exp_avg_sq, std::int64_t step,
                     const kernels::AdamWHyperparams& hp) = 0;
  // The sum of the squares of the values, in double, in an order fixed for a size (a
  // gradient norm's partial sum).
  [[nodiscard]] virtual double sum_squares(std::span<const float> x) = 0;
  // kernels::checksum_fnv1a64_chunked of the values in chunks of kChecksumChunkElems (the
  // CUDA kernel's definition is the same), so equal floats give equal checksums on every backend.
  [[nodiscard]] virtual std::uint64_t checksum(std::span<const float> x) = 0;
  // Waits for everything queued (a wall-clock timing's end).
  virtual void synchronize() = 0;
};

// The CPU backend: host memory, exec::GptChunk on kernels/ (Eigen), fp32.
[[nodiscard]] std::unique_ptr<Backend> make_cpu_backend();

}  // namespace meshwork::exec
