#include "exec/cuda/execute_cuda.hpp"

#include <mpi.h>

#include <stdexcept>
#include <utility>

#include "exec/cuda/cuda_backend.hpp"
#include "exec/cuda/nccl_environment.hpp"
#include "exec/cuda/nccl_group.hpp"
#include "exec/cuda/unique_id.hpp"
#include "exec/rank_groups.hpp"
#include "exec/staged_group.hpp"
#include "kernels/cuda/cuda_check.hpp"

namespace meshwork::exec::cuda {

namespace {

struct NodePlace {
  int local_rank = 0, local_size = 1;
};

// This rank's place among the ranks sharing its node (MPI_COMM_TYPE_SHARED, MPI 4.0 §7.4.2).
NodePlace node_place(int world_rank) {
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node) != MPI_SUCCESS) {
    throw std::runtime_error("MPI_Comm_split_type failed: cannot tell which ranks share this node");
  }
  NodePlace p;
  MPI_Comm_rank(node, &p.local_rank);
  MPI_Comm_size(node, &p.local_size);
  MPI_Comm_free(&node);
  return p;
}

std::string text(std::int64_t v) { return std::to_string(v); }

}  // namespace

std::string missing_device() {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e == cudaSuccess && devices > 0) return "";
  // Without a driver the runtime says "CUDA driver version is insufficient": say what it means.
  return e == cudaErrorInsufficientDriver ? "no NVIDIA driver, or one older than this CUDA runtime"
         : e != cudaSuccess              ? std::string(cudaGetErrorString(e))
                                         : "the driver lists no GPU";
}

CudaRank make_cuda_rank(const plan::Plan& plan, std::int64_t world_rank, const GroupOptions& options, const std::string& collectives) {
  // execute() has checked the device on every rank; a direct caller is told here.
  if (const std::string why = missing_device(); !why.empty()) {
    throw std::runtime_error("the CUDA backend found no CUDA device on rank " + text(world_rank) + ": " + why);
  }
  int devices = 0;
  MESHWORK_CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (collectives != "auto" && collectives != "nccl" && collectives != "mpi") {
    throw std::invalid_argument("--collectives '" + collectives + "' is not one of auto, nccl, mpi");
  }
  const NodePlace place = node_place(static_cast<int>(world_rank));
  // Every rank decides alike: NCCL refuses two members of one communicator on one device.
  int crowded = place.local_size > devices ? 1 : 0, any_crowded = 0;
  MPI_Allreduce(&crowded, &any_crowded, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (collectives == "nccl" && any_crowded != 0) {
    throw std::invalid_argument("--collectives nccl: a node runs more ranks than it has GPUs (rank " + text(world_rank) + "'s runs " + text(place.local_size) +
                                " on " + text(devices) + "), and NCCL takes one rank per GPU: use --collectives mpi");
  }
  const bool nccl = collectives == "nccl" || (collectives == "auto" && any_crowded == 0);
  CudaRank out;
  out.backend = make_cuda_backend(place.local_rank % devices);
  Backend& backend = *out.backend;
  const cudaStream_t stream = compute_stream_of(backend);
  if (nccl) {
    out.groups = rank_groups(plan, world_rank, [&](const char* name, const std::vector<std::int64_t>& members, int colour) -> std::unique_ptr<Group> {
      int key = 0;
      for (std::size_t i = 0; i < members.size(); ++i) {
        if (members[i] == world_rank) key = static_cast<int>(i);
      }
      MPI_Comm comm = MPI_COMM_NULL;
      MPI_Comm_split(MPI_COMM_WORLD, colour, key, &comm);
      const ncclUniqueId id = unique_id_over_mpi(comm, name, options.timeout_s);
      MPI_Comm_free(&comm);
      NcclGroupOptions o;
      o.timeout_s = options.timeout_s;
      o.world_ranks = members;
      o.on_timeout = options.on_timeout;
      auto g = std::make_unique<NcclGroup>(name, id, key, static_cast<int>(members.size()), std::move(o));
      g->bind(stream);
      return g;
    });
    const NcclEnvironment env = nccl_environment();
    out.collectives = "collectives over NCCL " + env.version + ", one GPU per rank";
  } else {
    out.groups = rank_groups(plan, world_rank, [&](const char* name, const std::vector<std::int64_t>& members, int colour) -> std::unique_ptr<Group> {
      return std::make_unique<StagedGroup>(MpiGroup::split(name, members, colour, options), backend);
    });
    out.collectives = std::string("collectives over Open MPI, staged through the host") +
                      (collectives == "auto" ? " (a node runs more ranks than it has GPUs, which NCCL refuses)" : " (--collectives mpi)");
  }
  return out;
}

}  // namespace meshwork::exec::cuda
