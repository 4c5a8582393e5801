#include "exec/synthetic_batch.hpp"

#include <numeric>
#include <vector>

#include "kernels/context_parallel_attention.hpp"

namespace meshwork::exec {

namespace {

// SplitMix64's finaliser (Steele et al. 2014), as a counter-based generator.
std::uint64_t mix(std::uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

Batch synthetic_batch(const plan::Plan& plan, std::int64_t microbatches_per_step, std::int64_t dp_index, std::int64_t step, std::int64_t microbatch,
                      std::int64_t cp_rank) {
  const auto& m = plan.model;
  const std::int64_t mbs = plan.training.micro_batch_size;
  const std::int64_t first = (step - 1) * plan.training.global_batch_size + (dp_index * microbatches_per_step + microbatch) * mbs;
  const std::int64_t cp = plan.parallelism.context_parallel_size;
  Batch b;
  b.samples = mbs;
  if (cp > 1) {
    b.positions = kernels::context_parallel_positions(m.seq_length, cp, cp_rank, plan.parallelism.context_parallel_load_balance);
  } else {
    b.positions.resize(static_cast<std::size_t>(m.seq_length));
    std::iota(b.positions.begin(), b.positions.end(), Index{0});
  }
  b.seq = static_cast<Index>(b.positions.size());
  const auto vocab = static_cast<std::uint64_t>(m.vocab_size);
  std::vector<std::int64_t> ids, targets;
  for (std::int64_t s = 0; s < mbs; ++s) {
    const std::uint64_t key = mix(static_cast<std::uint64_t>(plan.run.seed) * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(first + s));
    std::uint64_t token = key % vocab;
    ids.clear();
    targets.clear();
    for (std::int64_t i = 0; i <= m.seq_length; ++i) {
      if (i < m.seq_length) ids.push_back(static_cast<std::int64_t>(token));
      if (i > 0) targets.push_back(static_cast<std::int64_t>(token));
      const std::uint64_t r = mix(key + static_cast<std::uint64_t>(i) + 1);
      token = r % 8 == 0 ? (r >> 8) % vocab : (token * 5 + 3) % vocab;
    }
    for (const Index pos : b.positions) {
      b.ids.push_back(ids[static_cast<std::size_t>(pos)]);
      b.targets.push_back(targets[static_cast<std::size_t>(pos)]);
    }
  }
  return b;
}

}  // namespace meshwork::exec
