#include "exec/launch.hpp"

#include <charconv>
#include <cstdlib>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace meshwork::exec {

namespace {

std::optional<std::int64_t> number(const char* text) {
  if (text == nullptr) return std::nullopt;
  std::int64_t v = 0;
  const char* end = text + std::char_traits<char>::length(text);
  const auto [ptr, ec] = std::from_chars(text, end, v);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

}  // namespace

LaunchResult detect_launch(const std::function<const char*(const char*)>& getenv) {
  struct Scheme {
    const char* name;
    const char* rank;
    const char* size;
    const char* local;
  };
  // torchrun first: a torchrun job inside a Slurm allocation has both, and its own are the
  // ones its processes were given.
  const Scheme schemes[] = {{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
                            {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
                            {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}};
  LaunchResult out;
  for (const auto& s : schemes) {
    const char* rank_text = getenv(s.rank);
    const char* size_text = getenv(s.size);
    if (rank_text == nullptr || size_text == nullptr) continue;
    const auto rank = number(rank_text), size = number(size_text);
    const auto local = getenv(s.local) ? number(getenv(s.local)) : std::optional<std::int64_t>(0);
    if (!rank || !size || !local) {
      out.error = std::string(s.name) + ": " + s.rank + "=" + rank_text + ", " + s.size + "=" + size_text + " are not whole numbers";
      return out;
    }
    if (*size < 1 || *rank < 0 || *rank >= *size) {
      out.error = std::string(s.name) + ": rank " + rank_text + " is outside a world of " + size_text;
      return out;
    }
    Launch l;
    l.launcher = s.name;
    l.rank = *rank;
    l.world_size = *size;
    l.local_rank = *local;
    if (l.launcher == "torchrun") {
      if (const char* a = getenv("MASTER_ADDR")) l.master_addr = a;
      if (const auto p = number(getenv("MASTER_PORT"))) l.master_port = *p;
    }
    out.launch = l;
    return out;
  }
  out.launch = Launch{};
  return out;
}

LaunchResult detect_launch() {
  return detect_launch([](const char* name) { return std::getenv(name); });
}

void keep_freed_memory() {
#if defined(__GLIBC__)
  // Blocks up to 32 MiB (the most mallopt(3) allows on 64-bit) come from the heap, and up to
  // 1 GiB of its free top stays mapped.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

}  // namespace meshwork::exec
