// The CPU backend (exec/backend.hpp): host memory, GptChunk, kernels/ on the host.

#include <algorithm>
#include <stdexcept>
#include <string>

#include "exec/backend.hpp"
#include "exec/gpt.hpp"
#include "kernels/adamw.hpp"
#include "kernels/checksum.hpp"

namespace meshwork::exec {

namespace {

void same_size(std::span<const float> a, std::span<const float> b, const char* what) {
  if (a.size() != b.size()) throw std::invalid_argument(std::string(what) + ": " + std::to_string(a.size()) + " values into " + std::to_string(b.size()));
}

class CpuBackend final : public Backend {
 public:
  [[nodiscard]] std::string_view name() const override { return "cpu"; }
  [[nodiscard]] std::unique_ptr<Chunk> make_chunk(const ChunkConfig& config) override { return std::make_unique<GptChunk>(config); }
  [[nodiscard]] Buffer allocate(std::size_t count) override {
    return Buffer(new float[count](), count, [](float* p) noexcept { delete[] p; });
  }
  void to_host(std::span<const float> from, std::span<float> to) override { copy(from, to); }
  void from_host(std::span<const float> from, std::span<float> to) override { copy(from, to); }
  void copy(std::span<const float> from, std::span<float> to) override {
    same_size(from, to, "copy");
    std::copy(from.begin(), from.end(), to.begin());
  }
  void fill(std::span<float> x, float value) override { std::fill(x.begin(), x.end(), value); }
  void scale(std::span<float> x, float factor) override {
    for (auto& v : x) v *= factor;
  }
  void adamw(std::span<float> params, std::span<const float> grads, std::span<float> exp_avg, std::span<float> exp_avg_sq, std::int64_t step,
             const kernels::AdamWHyperparams& hp) override {
    kernels::adamw_step<float>(params, grads, exp_avg, exp_avg_sq, step, hp);
  }
  [[nodiscard]] double sum_squares(std::span<const float> x) override {
    double sum = 0;
    for (const float v : x) sum += static_cast<double>(v) * static_cast<double>(v);
    return sum;
  }
  [[nodiscard]] std::uint64_t checksum(std::span<const float> x) override { return kernels::checksum_fnv1a64_chunked<float>(x, kChecksumChunkElems); }
  void synchronize() override {}
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace meshwork::exec
