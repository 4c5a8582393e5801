#include "exec/cuda/cuda_backend.hpp"

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "exec/cuda/cuda_chunk.hpp"
#include "exec/cuda/chunk_kernels.hpp"
#include "exec/cuda/gpt_kernels.hpp"
#include "exec/cuda/streams.hpp"
#include "kernels/cuda/adamw.hpp"
#include "kernels/cuda/checksum.hpp"
#include "kernels/cuda/cuda_check.hpp"

namespace meshwork::exec::cuda {

namespace {

void same_size(std::span<const float> a, std::span<const float> b, const char* what) {
  if (a.size() != b.size()) throw std::invalid_argument(std::string(what) + ": " + std::to_string(a.size()) + " values into " + std::to_string(b.size()));
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(select(device)), stream_(), context_{stream_.get(), Gemm()} {
    // Keep freed memory in the pool between steps (its default threshold returns it to the
    // driver at every synchronisation; CUDA Runtime API, "Stream Ordered Memory Allocator").
    cudaMemPool_t pool = nullptr;
    MESHWORK_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
    std::uint64_t keep = std::numeric_limits<std::uint64_t>::max();
    MESHWORK_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  }
  [[nodiscard]] std::string_view name() const override { return "cuda"; }
  [[nodiscard]] std::unique_ptr<Chunk> make_chunk(const ChunkConfig& config) override { return make_cuda_chunk(config, context_); }
  [[nodiscard]] Buffer allocate(std::size_t count) override {
    float* p = nullptr;
    const cudaStream_t s = stream_.get();
    if (count > 0) {
      MESHWORK_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&p), count * sizeof(float), s));
      MESHWORK_CUDA_CHECK(cudaMemsetAsync(p, 0, count * sizeof(float), s));
    }
    return Buffer(p, count, [s](float* q) { cudaFreeAsync(q, s); });
  }
  void to_host(std::span<const float> from, std::span<float> to) override {
    same_size(from, to, "to_host");
    if (from.empty()) return;
    MESHWORK_CUDA_CHECK(cudaMemcpyAsync(to.data(), from.data(), from.size_bytes(), cudaMemcpyDeviceToHost, stream_.get()));
    stream_.synchronize();
  }
  void from_host(std::span<const float> from, std::span<float> to) override {
    same_size(from, to, "from_host");
    if (from.empty()) return;
    MESHWORK_CUDA_CHECK(cudaMemcpyAsync(to.data(), from.data(), from.size_bytes(), cudaMemcpyHostToDevice, stream_.get()));
    stream_.synchronize();  // the host values may go once this returns
  }
  void copy(std::span<const float> from, std::span<float> to) override {
    same_size(from, to, "copy");
    if (!from.empty()) MESHWORK_CUDA_CHECK(cudaMemcpyAsync(to.data(), from.data(), from.size_bytes(), cudaMemcpyDeviceToDevice, stream_.get()));
  }
  void fill(std::span<float> x, float value) override { exec::cuda::fill(x.data(), value, static_cast<std::int64_t>(x.size()), stream_.get()); }
  void scale(std::span<float> x, float factor) override {
    if (!x.empty()) exec::cuda::scale(x.data(), factor, static_cast<std::int64_t>(x.size()), stream_.get());
  }
  void adamw(std::span<float> params, std::span<const float> grads, std::span<float> exp_avg, std::span<float> exp_avg_sq, std::int64_t step,
             const kernels::AdamWHyperparams& hp) override {
    same_size(grads, params, "adamw");
    if (params.empty()) return;
    kernels::cuda::adamw_step<float>(params.data(), grads.data(), exp_avg.data(), exp_avg_sq.data(), nullptr, static_cast<std::int64_t>(params.size()), step, hp,
                                     stream_.get());
  }
  [[nodiscard]] double sum_squares(std::span<const float> x) override {
    if (x.empty()) return 0;
    double* d = nullptr;
    MESHWORK_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&d), sizeof(double), stream_.get()));
    exec::cuda::sum_squares(x.data(), static_cast<std::int64_t>(x.size()), d, stream_.get());
    double v = 0;
    MESHWORK_CUDA_CHECK(cudaMemcpyAsync(&v, d, sizeof v, cudaMemcpyDeviceToHost, stream_.get()));
    MESHWORK_CUDA_CHECK(cudaFreeAsync(d, stream_.get()));
    stream_.synchronize();
    return v;
  }
  [[nodiscard]] std::uint64_t checksum(std::span<const float> x) override {
    std::uint64_t* d = nullptr;
    MESHWORK_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&d), sizeof(std::uint64_t), stream_.get()));
    kernels::cuda::checksum_fnv1a64_chunked<float>(x.data(), static_cast<std::int64_t>(x.size()), static_cast<std::int64_t>(kChecksumChunkElems), d, stream_.get());
    std::uint64_t h = 0;
    MESHWORK_CUDA_CHECK(cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, stream_.get()));
    MESHWORK_CUDA_CHECK(cudaFreeAsync(d, stream_.get()));
    stream_.synchronize();
    return h;
  }
  void synchronize() override { stream_.synchronize(); }
  [[nodiscard]] cudaStream_t stream() const { return stream_.get(); }

 private:
  static int select(int device) {
    MESHWORK_CUDA_CHECK(cudaSetDevice(device));
    return device;
  }
  int device_;
  Stream stream_;
  DeviceContext context_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }

cudaStream_t compute_stream_of(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  return cuda == nullptr ? nullptr : cuda->stream();
}

}  // namespace meshwork::exec::cuda
