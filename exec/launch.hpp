#pragma once
// Who this process is in the job, from whichever launcher started it: torchrun (RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT), Slurm (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID) or Open MPI (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK). A process started by
// none of them is rank 0 of 1.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace meshwork::exec {

struct Launch {
  std::int64_t rank = 0;
  std::int64_t world_size = 1;
  std::int64_t local_rank = 0;
  std::string launcher = "none";  // torchrun, slurm, openmpi or none
  std::string master_addr;        // torchrun's rendezvous, for a TCP store
  std::int64_t master_port = 0;
};

// `getenv` is the environment's lookup (a fake one in tests). Returns an error message when a
// launcher's variables are present but inconsistent (a rank outside the world, not a number).
struct LaunchResult {
  std::optional<Launch> launch;
  std::string error;
};
LaunchResult detect_launch(const std::function<const char*(const char*)>& getenv);
LaunchResult detect_launch();  // the process's environment

// Keeps the memory a step frees for the next step, as a GPU framework's caching allocator does:
// glibc returns large freed blocks to the kernel (blocks past M_MMAP_THRESHOLD are unmapped,
// and the heap's free top past M_TRIM_THRESHOLD is trimmed), so every step faults its
// activations' pages in again, zeroed; on a virtual machine those faults cost 15% of a step
// and made the CPU executor's norms 8x slower inside a step than alone (bench/RESULTS.md).
// Raises both thresholds (mallopt(3)) for this process; a no-op without glibc. Call it before
// the first large allocation.
void keep_freed_memory();

}  // namespace meshwork::exec
