#include "exec/cuda/unique_id.hpp"

#include <chrono>
#include <cstddef>
#include <cstring>
#include <span>
#include <thread>

#include "exec/cuda/nccl_check.hpp"
#include "exec/cuda/tcp_store.hpp"

namespace meshwork::exec::cuda {

static_assert(sizeof(ncclUniqueId) == NCCL_UNIQUE_ID_BYTES, "ncclUniqueId is sent as its raw bytes");

#ifdef MESHWORK_HAVE_MPI
ncclUniqueId unique_id_over_mpi(MPI_Comm comm, std::string_view group, double timeout_s) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  ncclUniqueId id{};
  if (rank == 0) MESHWORK_NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Ibcast(&id, NCCL_UNIQUE_ID_BYTES, MPI_BYTE, 0, comm, &request) != MPI_SUCCESS) {
    kernels::cuda::fail(__FILE__, __LINE__, "MPI_Ibcast", "broadcasting the NCCL id of the " + std::string(group) + " group");
  }
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return id;
    const double waited_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout_s > 0 && waited_s > timeout_s) {
      // The broadcast may still write `id`; the job ends on this error, and the request is
      // left to it rather than cancelled (MPI 4.0 §3.8.4: collectives cannot be cancelled).
      kernels::cuda::fail(__FILE__, __LINE__, "unique_id_over_mpi",
                          "member " + std::to_string(rank) + " of the " + std::string(group) + " group waited " + std::to_string(static_cast<int>(timeout_s)) +
                              " s for member 0's NCCL id: a member never arrived (hung or dead)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}
#endif

ncclUniqueId unique_id_over_tcp(const std::string& host, std::uint16_t port, std::string_view key, int group_rank, double timeout_s) {
  ncclUniqueId id{};
  if (group_rank == 0) {
    MESHWORK_NCCL_CHECK(ncclGetUniqueId(&id));
    tcp_store_set(host, port, key, std::as_bytes(std::span(id.internal)), timeout_s);
    return id;
  }
  const std::vector<std::byte> bytes = tcp_store_get(host, port, key, timeout_s);
  if (bytes.size() != sizeof id.internal) {
    throw TcpStoreError("tcp store " + host + ":" + std::to_string(port) + ": key '" + std::string(key) + "' holds " + std::to_string(bytes.size()) + " bytes, not an NCCL id's " +
                        std::to_string(sizeof id.internal));
  }
  std::memcpy(id.internal, bytes.data(), bytes.size());
  return id;
}

}  // namespace meshwork::exec::cuda
