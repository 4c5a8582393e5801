#pragma once
// What both backends' `execute` start from: this process's rank and the job's size
// (MPI_COMM_WORLD) in an ExecuteResult, with its error set when the job's size is not the
// plan's cluster.num_gpus. Private to exec/.

#include <mpi.h>

#include <string>

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
  }
  return out;
}

}  // namespace meshwork::exec
