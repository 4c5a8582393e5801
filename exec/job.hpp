#pragma once
// What both backends' `execute` start from: this process's rank and the job's size
// (MPI_COMM_WORLD) in an ExecuteResult, with its error set when the job's size is not the
// plan's cluster.num_gpus (every rank sees the same sizes: a job-wide error). Private to exec/.

#include <mpi.h>

#include <array>
#include <string>
#include <vector>

#include "exec/execute.hpp"

namespace meshwork::exec {

inline ExecuteResult start_job(const plan::Plan& plan) {
  ExecuteResult out;
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  out.rank = rank;
  out.world_size = size;
  if (size != plan.cluster.num_gpus) {
    out.error = "the plan has " + std::to_string(plan.cluster.num_gpus) + " ranks (cluster.num_gpus) and the job " + std::to_string(size) +
                " processes: launch it with mpirun -np " + std::to_string(plan.cluster.num_gpus);
    out.job_wide_error = true;
  }
  return out;
}

// Ranks as runs: "0-3, 6, 9-10".
inline std::string rank_runs(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    s += (s.empty() ? "" : ", ") + std::to_string(ranks[i]) + (j > i ? "-" + std::to_string(ranks[j]) : std::string());
    i = j + 1;
  }
  return s;
}

// Every rank's answer to `local_missing` (why this rank sees no CUDA device, "" when it sees
// one), gathered (collective over MPI_COMM_WORLD): "" when every rank has a device, otherwise
// one message naming the ranks without and rank 0's cause, or the first such rank's.
inline std::string job_missing_devices(const std::string& local_missing, int size) {
  const int mine = local_missing.empty() ? 0 : 1;
  std::vector<int> all(static_cast<std::size_t>(size));
  MPI_Allgather(&mine, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::vector<int> without;
  for (int r = 0; r < size; ++r) {
    if (all[static_cast<std::size_t>(r)] != 0) without.push_back(r);
  }
  if (without.empty()) return "";
  // The cause travels from the first rank without a device (its text, up to 255 bytes).
  std::array<char, 256> cause{};
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == without.front()) local_missing.copy(cause.data(), cause.size() - 1);
  MPI_Bcast(cause.data(), static_cast<int>(cause.size()), MPI_CHAR, without.front(), MPI_COMM_WORLD);
  const bool every = static_cast<int>(without.size()) == size;
  return "the CUDA backend found no CUDA device " +
         (size == 1 ? std::string("on this machine")
                    : (every ? "on any of the job's " + std::to_string(size) + " ranks" : "on rank" + std::string(without.size() > 1 ? "s " : " ") + rank_runs(without) + " of " + std::to_string(size))) +
         ": " + std::string(cause.data()) + (every ? " (a machine with an NVIDIA GPU runs it; without one, --backend cpu)" : "");
}

}  // namespace meshwork::exec
