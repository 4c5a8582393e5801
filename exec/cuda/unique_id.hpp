#pragma once
// How the members of a process group agree on one ncclUniqueId before ncclCommInitRank: member
// 0 creates it (ncclGetUniqueId) and the others receive its 128 bytes, over MPI where the job
// has it, else through the TCP store (tcp_store.hpp) that world rank 0 serves on MASTER_ADDR.
// Both wait under a deadline and say who they were waiting for, like the watchdogs.

#include <nccl.h>

#include <cstdint>
#include <string>
#include <string_view>

#ifdef MESHWORK_HAVE_MPI
#include <mpi.h>
#endif

namespace meshwork::exec::cuda {

#ifdef MESHWORK_HAVE_MPI
// Collective over `comm`: its member 0 creates the id and broadcasts it (MPI_Ibcast, polled
// against timeout_s; 0: no deadline). `group` names the group in errors.
[[nodiscard]] ncclUniqueId unique_id_over_mpi(MPI_Comm comm, std::string_view group, double timeout_s);
#endif

// Member 0 (group_rank 0) creates the id and sets it under `key` ("tp/3": the group's name
// and index, unique per communicator in the job); the others get it, waiting up to timeout_s.
// The store at host:port must be served (TcpStoreServer) by one process of the job.
[[nodiscard]] ncclUniqueId unique_id_over_tcp(const std::string& host, std::uint16_t port, std::string_view key, int group_rank, double timeout_s);

}  // namespace meshwork::exec::cuda
