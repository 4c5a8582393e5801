// MpiGroup's collectives under mpirun (2 or more ranks): exact results for buffers from empty
// to many chunks (several waves of chunks in flight), with the self-check on, and one call
// counted per collective however many chunks it took.
#include <gtest/gtest.h>
#include <mpi.h>

#include <array>
#include <numeric>
#include <vector>

#include "exec/mpi_group.hpp"
#include "exec/staged_group.hpp"

namespace meshwork::exec {
namespace {

std::unique_ptr<MpiGroup> world_group() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<std::int64_t> all(static_cast<std::size_t>(size));
  std::iota(all.begin(), all.end(), 0);
  // A rank that stops calling collectives (a failed check that returned early) ends the job
  // rather than leaving requests in flight into MPI_Finalize.
  return MpiGroup::split("world", all, 0, {.timeout_s = 60, .self_check = true, .on_timeout = [](const std::string&) { MPI_Abort(MPI_COMM_WORLD, 1); }});
}

// Small integers: every sum is exact in float, whatever the order MPI adds in.
float value(int rank, std::size_t i) { return static_cast<float>(rank + 1) + static_cast<float>(i % 7); }

// 0, 1, a partial chunk, one chunk (32 Ki floats), and nine and a bit: three waves of chunks.
const std::size_t kSizes[] = {0, 1, 1000, std::size_t{32} << 10, (std::size_t{32} << 10) * 9 + 17};

TEST(MpiGroup, AllReduceIsExactAtEverySize) {
  auto g = world_group();
  const int n = g->size();
  for (const std::size_t size : kSizes) {
    std::vector<float> data(size);
    for (std::size_t i = 0; i < size; ++i) data[i] = value(g->rank(), i);
    const auto calls = g->stats().calls;
    g->all_reduce_sum(data);
    EXPECT_EQ(g->stats().calls - calls, 2) << "the all-reduce and its self-check, once each, at " << size;
    // Mismatches are counted, not asserted: every rank must go on to the same next collective.
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < size; ++i) {
      const float want = static_cast<float>(n * (n + 1) / 2) + static_cast<float>(n) * static_cast<float>(i % 7);
      wrong += data[i] != want ? 1 : 0;
    }
    EXPECT_EQ(wrong, 0U) << "rank " << g->rank() << ", " << size << " floats";
  }
}

// The last member's buffer reaches every member, in chunks past 32 Ki floats.
TEST(MpiGroup, ABroadcastCarriesTheRootsBufferAtEverySize) {
  auto g = world_group();
  const int root = g->size() - 1;
  for (const std::size_t size : kSizes) {
    std::vector<float> data(size);
    for (std::size_t i = 0; i < size; ++i) data[i] = value(g->rank(), i);
    g->broadcast(root, data);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < size; ++i) wrong += data[i] != value(root, i) ? 1 : 0;
    EXPECT_EQ(wrong, 0U) << "rank " << g->rank() << ", " << size << " floats";
  }
}

TEST(MpiGroup, ReduceScatterAndAllGatherAreExactAtEverySize) {
  auto g = world_group();
  const auto n = static_cast<std::size_t>(g->size());
  for (const std::size_t block : kSizes) {
    std::vector<float> in(block * n), mine(block);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = value(g->rank(), i);
    g->reduce_scatter_sum(in, mine);
    const std::size_t begin = block * static_cast<std::size_t>(g->rank());
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < block; ++i) {
      const float want = static_cast<float>(n * (n + 1) / 2) + static_cast<float>(n) * static_cast<float>((begin + i) % 7);
      wrong += mine[i] != want ? 1 : 0;
    }
    EXPECT_EQ(wrong, 0U) << "reduce-scatter: rank " << g->rank() << ", blocks of " << block;
    std::vector<float> part(block), all(block * n);
    for (std::size_t i = 0; i < block; ++i) part[i] = value(g->rank(), i);
    g->all_gather(part, all);
    wrong = 0;
    for (std::size_t r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < block; ++i) wrong += all[r * block + i] != value(static_cast<int>(r), i) ? 1 : 0;
    }
    EXPECT_EQ(wrong, 0U) << "all-gather: rank " << g->rank() << ", blocks of " << block;
  }
}

// The CPU backend, counting the floats that cross between "its memory" and the host: what a
// device backend's copies would carry.
class CountingBackend final : public Backend {
 public:
  std::size_t down = 0, up = 0;
  [[nodiscard]] std::string_view name() const override { return "counting"; }
  [[nodiscard]] std::unique_ptr<Chunk> make_chunk(const ChunkConfig& c) override { return cpu_->make_chunk(c); }
  [[nodiscard]] Buffer allocate(std::size_t n) override { return cpu_->allocate(n); }
  void to_host(std::span<const float> from, std::span<float> to) override {
    down += from.size();
    cpu_->to_host(from, to);
  }
  void from_host(std::span<const float> from, std::span<float> to) override {
    up += from.size();
    cpu_->from_host(from, to);
  }
  void copy(std::span<const float> from, std::span<float> to) override { cpu_->copy(from, to); }
  void fill(std::span<float> x, float v) override { cpu_->fill(x, v); }
  void scale(std::span<float> x, float f) override { cpu_->scale(x, f); }
  void adamw(std::span<float> p, std::span<const float> g, std::span<float> m, std::span<float> v, std::int64_t step, const kernels::AdamWHyperparams& hp) override {
    cpu_->adamw(p, g, m, v, step, hp);
  }
  [[nodiscard]] double sum_squares(std::span<const float> x) override { return cpu_->sum_squares(x); }
  [[nodiscard]] std::uint64_t checksum(std::span<const float> x) override { return cpu_->checksum(x); }
  void synchronize() override {}

 private:
  std::unique_ptr<Backend> cpu_ = make_cpu_backend();
};

// A device backend's tensors through a host group (issue 23's mixed backends): the results are
// the host group's, every float goes down and comes back through the backend's copies, and the
// host group's figures are the staged group's.
TEST(StagedGroup, EveryTensorCrossesThroughTheBackend) {
  CountingBackend backend;
  StagedGroup g(world_group(), backend);
  const auto n = static_cast<std::size_t>(g.size());
  const std::size_t block = 1000;
  std::vector<float> data(block);
  for (std::size_t i = 0; i < block; ++i) data[i] = value(g.rank(), i);
  g.all_reduce_sum(data);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < block; ++i) wrong += data[i] != static_cast<float>(n * (n + 1) / 2) + static_cast<float>(n) * static_cast<float>(i % 7) ? 1 : 0;
  EXPECT_EQ(wrong, 0U);
  EXPECT_EQ(backend.down, block);
  EXPECT_EQ(backend.up, block);
  std::vector<float> in(block * n), mine(block), all(block * n);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = value(g.rank(), i);
  g.reduce_scatter_sum(in, mine);
  g.all_gather(mine, all);
  EXPECT_EQ(backend.down, block + block * n + block);
  EXPECT_EQ(backend.up, block + block + block * n);
  for (std::size_t i = 0; i < block; ++i) wrong += all[i] != static_cast<float>(n * (n + 1) / 2) + static_cast<float>(n) * static_cast<float>(i % 7) ? 1 : 0;
  EXPECT_EQ(wrong, 0U);
  // A ring of sends: each rank's block to the next, buffered before the receive.
  const int next = (g.rank() + 1) % g.size(), prev = (g.rank() + g.size() - 1) % g.size();
  std::vector<float> out(block, static_cast<float>(g.rank())), got(block, -1.0F);
  g.send(next, 7, out);
  g.recv(prev, 7, got);
  g.flush();
  EXPECT_EQ(got, std::vector<float>(block, static_cast<float>(prev)));
  // Host spans pass straight through.
  const std::size_t down_before = backend.down;
  std::array<double, 1> loss{1.0};
  g.all_reduce_sum(std::span<double>(loss));
  EXPECT_EQ(loss[0], static_cast<double>(n));
  EXPECT_EQ(backend.down, down_before);
  EXPECT_GT(g.stats().calls, 4);
  EXPECT_GT(g.stats().bytes, 0.0);
}

}  // namespace
}  // namespace meshwork::exec

// Every rank runs every test, in the same order (no shuffling: groups are split collectively),
// and prints its own failures; the job fails when any rank's test failed.
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  GTEST_FLAG_SET(shuffle, false);
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0, any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
