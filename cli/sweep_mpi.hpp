#pragma once
// Sweeps across MPI ranks: each rank estimates a slice, rank 0 gathers the rows. Without MPI
// (or outside mpirun) a single process does everything.

#include <cstdint>
#include <vector>

#include "models/sweep.hpp"

namespace meshwork::cli {

class SweepMpi {
 public:
  SweepMpi();   // initialises MPI only when launched by mpirun/srun
  ~SweepMpi();  // finalises it
  SweepMpi(const SweepMpi&) = delete;
  SweepMpi& operator=(const SweepMpi&) = delete;

  [[nodiscard]] std::uint64_t rank() const { return rank_; }
  [[nodiscard]] std::uint64_t size() const { return size_; }
  // All ranks' rows on rank 0 (in index order); other ranks get an empty vector.
  std::vector<models::SweepRow> gather(const std::vector<models::SweepRow>& mine);

 private:
  std::uint64_t rank_ = 0;
  std::uint64_t size_ = 1;
  bool initialised_ = false;
};

}  // namespace meshwork::cli
