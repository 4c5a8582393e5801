// MpiGroup's collectives under mpirun (2 or more ranks): exact results for buffers from empty
// to many chunks (several waves of chunks in flight), with the self-check on, and one call
// counted per collective however many chunks it took.
#include <gtest/gtest.h>
#include <mpi.h>

#include <numeric>
#include <vector>

#include "exec/mpi_group.hpp"

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
